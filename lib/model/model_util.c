/* SPDX-License-Identifier: BSD-3-Clause */
/* Error messages and argument checks shared by the model sources. */

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "model_priv.h"

int
model_err(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err != NULL && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -code;
}

int
model_check_pos(double v, const char *what, char *err, size_t errlen)
{
	if (!isfinite(v) || v <= 0)
		return model_err(err, errlen, EINVAL, "%s must be a positive number (got %g)",
				what, v);
	return 0;
}

int
model_check_nonneg(double v, const char *what, char *err, size_t errlen)
{
	if (!isfinite(v) || v < 0)
		return model_err(err, errlen, EINVAL, "%s must be zero or positive (got %g)",
				what, v);
	return 0;
}
