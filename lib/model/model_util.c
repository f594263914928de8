/* SPDX-License-Identifier: BSD-3-Clause */
/* Error messages and argument checks shared by the model sources. */

#include <errno.h>
#include <math.h>

#include "model_priv.h"

int
model_check_pos(double v, const char *what, char *err, size_t errlen)
{
	if (!isfinite(v) || v <= 0)
		return phub_err(err, errlen, EINVAL, "%s must be a positive number (got %g)",
				what, v);
	return 0;
}

int
model_check_nonneg(double v, const char *what, char *err, size_t errlen)
{
	if (!isfinite(v) || v < 0)
		return phub_err(err, errlen, EINVAL, "%s must be zero or positive (got %g)",
				what, v);
	return 0;
}
