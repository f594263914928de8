/* SPDX-License-Identifier: BSD-3-Clause */
/* The strict parse of an unsigned number from a command line, shared by the programs and tools. */

#ifndef PHUB_PARSE_H
#define PHUB_PARSE_H

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/*
 * Parses all of s as an unsigned number (decimal, 0x hexadecimal or 0 octal, as strtoull) from
 * min to max into *out. Returns 0, or -EINVAL for an empty string, anything after the digits,
 * a value outside min..max or past UINT64_MAX; *out is then left as it was. strtoull alone
 * skips white space and takes a sign, so "-1" would be UINT64_MAX: only a digit may start s.
 */
static inline int
phub_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

#endif /* PHUB_PARSE_H */
