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

int
model_check_nums(const struct model_num *pos, size_t npos, const struct model_num *nonneg,
		size_t nnonneg, char *err, size_t errlen)
{
	int rc = 0;

	for (size_t i = 0; i < npos && rc == 0; i++)
		rc = model_check_pos(pos[i].v, pos[i].name, err, errlen);
	for (size_t i = 0; i < nnonneg && rc == 0; i++)
		rc = model_check_nonneg(nonneg[i].v, nonneg[i].name, err, errlen);
	return rc;
}
