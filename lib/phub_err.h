/* SPDX-License-Identifier: BSD-3-Clause */
/* The libraries' one way of reporting an error to a caller's buffer: a message and -errno. */

#ifndef PHUB_ERR_H
#define PHUB_ERR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/*
 * Writes the message into err (when the caller gave one: err non-NULL, errlen > 0, cut to
 * fit) and returns -code, so that a check reads `return phub_err(err, errlen, EINVAL, "...")`.
 * Header-only: lib/model and lib/layout link none of the other libraries.
 */
static inline int __attribute__((format(printf, 4, 5)))
phub_err(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err != NULL && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -code;
}

#endif /* PHUB_ERR_H */
