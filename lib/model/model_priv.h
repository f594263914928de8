/* SPDX-License-Identifier: BSD-3-Clause */
/* Helpers shared by the model sources: error messages and argument checks. */

#ifndef PHUB_MODEL_PRIV_H
#define PHUB_MODEL_PRIV_H

#include <stddef.h>

#include "phub_err.h"	/* phub_err(): a message for the caller and -errno */

/* 0 when v is finite and > 0, else -EINVAL with "<what> must be a positive number". */
int model_check_pos(double v, const char *what, char *err, size_t errlen);
/* 0 when v is finite and >= 0. */
int model_check_nonneg(double v, const char *what, char *err, size_t errlen);

/* A number of the parameters to check and its name in the message: MODEL_NUM(hw, rtt_s). */
struct model_num {
	double v;
	const char *name;
};
#define MODEL_NUM(s, field) { (s)->field, #field }
#define MODEL_DIM(a) (sizeof(a) / sizeof((a)[0]))
/*
 * model_check_pos() of each of the npos numbers of pos, then model_check_nonneg() of each of
 * nonneg, in order: 0, or the first failure's -EINVAL and message.
 */
int model_check_nums(const struct model_num *pos, size_t npos, const struct model_num *nonneg,
		size_t nnonneg, char *err, size_t errlen);

#define MODEL_BITS_PER_BYTE 8.0
#define MODEL_GIGA 1e9

struct phub_model_job;

/* One job cut into chunks of one size (§3.2.3): Q full chunks and the layers' remainders. */
struct model_chunking {
	unsigned int chunk_bytes;
	unsigned int segment_bytes;
	double full;		/* full chunks in all layers */
	double pkts_per_full;	/* segments of a full chunk */
	double total_pkts;	/* segments of the whole model */
	size_t nrem;
	double *rem_bytes;	/* remainders, largest first */
};

int model_chunking_init(struct model_chunking *ck, const struct phub_model_job *job,
		unsigned int chunk_bytes, unsigned int segment_bytes);
void model_chunking_fini(struct model_chunking *ck);
/* What the busiest bin of a placement carries (each field the maximum over bins). */
struct model_bin {
	double bytes;
	double pkts;
	double chunks;
};

/* Largest-first placement of the chunks on `bins` bins (§3.2.4). */
int model_lpt(const struct model_chunking *ck, unsigned int bins, struct model_bin *max);

#endif /* PHUB_MODEL_PRIV_H */
