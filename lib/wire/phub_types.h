/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The element types and optimizers that a JOIN names: the one definition of enum phub_dtype and
 * enum phub_opt_type, with their names, shared by wire, kernels, config, engine and the tools.
 */

#ifndef PHUB_TYPES_H
#define PHUB_TYPES_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Element types of gradient and model payloads: _(NAME, wire value, bytes per element, name).
 * The values are the dtype byte of the wire header: never renumber them. The installed
 * lib/client/phub.h must stand alone and repeats enum phub_dtype under the same guard;
 * lib/client/client_priv.h ties its values to this table with static_asserts.
 */
#define PHUB_FOREACH_DTYPE(_) \
	_(FP32, 0, 4, "fp32") \
	_(FP16, 1, 2, "fp16")	/* IEEE 754 binary16 */ \
	_(BF16, 2, 2, "bf16")	/* bfloat16: the upper half of a binary32 */

#ifndef PHUB_DTYPE_DEFINED
#define PHUB_DTYPE_DEFINED
enum phub_dtype {
#define PHUB_DTYPE_ENUM_(n, v, sz, s) PHUB_DTYPE_##n = (v),
	PHUB_FOREACH_DTYPE(PHUB_DTYPE_ENUM_)
#undef PHUB_DTYPE_ENUM_
};

#define PHUB_DTYPE_COUNT 3

/* Bytes per element of a dtype, or 0 for a value that is not a dtype. */
static inline size_t
phub_dtype_size(enum phub_dtype dtype)
{
	switch ((int)dtype) {
#define PHUB_DTYPE_SIZE_(n, v, sz, s) case (v): return (sz);
	PHUB_FOREACH_DTYPE(PHUB_DTYPE_SIZE_)
#undef PHUB_DTYPE_SIZE_
	}
	return 0;
}
#endif /* PHUB_DTYPE_DEFINED */

/* "fp32", "fp16", "bf16"; NULL for a value that is not a dtype. */
static inline const char *
phub_dtype_name(enum phub_dtype dtype)
{
	switch ((int)dtype) {
#define PHUB_DTYPE_NAME_(n, v, sz, s) case (v): return (s);
	PHUB_FOREACH_DTYPE(PHUB_DTYPE_NAME_)
#undef PHUB_DTYPE_NAME_
	}
	return NULL;
}

/* Parse a name of phub_dtype_name(); -EINVAL if unknown (and *dtype untouched). */
static inline int
phub_dtype_parse(const char *name, enum phub_dtype *dtype)
{
	if (name == NULL)
		return -EINVAL;
#define PHUB_DTYPE_PARSE_(n, v, sz, s) \
	if (strcmp(name, (s)) == 0) { \
		*dtype = PHUB_DTYPE_##n; \
		return 0; \
	}
	PHUB_FOREACH_DTYPE(PHUB_DTYPE_PARSE_)
#undef PHUB_DTYPE_PARSE_
	return -EINVAL;
}

/*
 * Optimizers a job may run on the PBox: _(NAME, wire value, name). NONE: the PBox sums, the
 * workers update. The values are the optimizer byte of the JOIN body; lib/kernels/phub_kernels.h
 * has the formulas.
 */
#define PHUB_FOREACH_OPT(_) \
	_(NONE, 0, "none") \
	_(SGD, 1, "sgd") \
	_(MOMENTUM, 2, "momentum") \
	_(NESTEROV, 3, "nesterov") \
	_(ADAM, 4, "adam") \
	_(ADAMW, 5, "adamw")

enum phub_opt_type {
#define PHUB_OPT_ENUM_(n, v, s) PHUB_OPT_##n = (v),
	PHUB_FOREACH_OPT(PHUB_OPT_ENUM_)
#undef PHUB_OPT_ENUM_
};

#define PHUB_OPT_COUNT 6

/* "sgd", "adamw", ...; NULL for a value that is not an optimizer. */
static inline const char *
phub_opt_type_name(enum phub_opt_type type)
{
	switch ((int)type) {
#define PHUB_OPT_NAME_(n, v, s) case (v): return (s);
	PHUB_FOREACH_OPT(PHUB_OPT_NAME_)
#undef PHUB_OPT_NAME_
	}
	return NULL;
}

/* Parse a name of phub_opt_type_name(); -EINVAL if unknown (and *type untouched). */
static inline int
phub_opt_type_parse(const char *name, enum phub_opt_type *type)
{
	if (name == NULL)
		return -EINVAL;
#define PHUB_OPT_PARSE_(n, v, s) \
	if (strcmp(name, (s)) == 0) { \
		*type = PHUB_OPT_##n; \
		return 0; \
	}
	PHUB_FOREACH_OPT(PHUB_OPT_PARSE_)
#undef PHUB_OPT_PARSE_
	return -EINVAL;
}

/*
 * The bits of an fp32 value, and the value of fp32 bits: the one way the tree reads a float as
 * an integer (memcpy, since C forbids reading it through a pointer of another type).
 */
static inline uint32_t
phub_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float
phub_f32_from_bits(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

#ifdef __cplusplus
}
#endif

#endif /* PHUB_TYPES_H */
