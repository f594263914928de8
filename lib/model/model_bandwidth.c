/* SPDX-License-Identifier: BSD-3-Clause */
/* §2.3.1 and Figure 4: per-host bandwidth that hides communication; Table 3 presets; Table 2. */

#include <errno.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "phub_model.h"
#include "model_priv.h"

/* Table 3 of §4.2, in its order. Sizes are MXNet's reported sizes ("MB"); times are the
 * forward + backward time of one batch on one GTX 1080 Ti. */
static const struct phub_model_preset presets[] = {
	{ "AN", "alexnet", "AlexNet", 194, 16, 32 },
	{ "V11", "vgg11", "VGG 11", 505, 121, 32 },
	{ "V19", "vgg19", "VGG 19", 548, 268, 32 },
	{ "GN", "googlenet", "GoogleNet", 38, 100, 32 },
	{ "I3", "inception3", "Inception V3", 91, 225, 32 },
	{ "RN18", "resnet18", "ResNet 18", 45, 54, 32 },
	{ "RN50", "resnet50", "ResNet 50", 97, 161, 32 },
	{ "RN269", "resnet269", "ResNet 269", 390, 350, 16 },
	{ "RX269", "resnext269", "ResNext 269", 390, 386, 8 },
};

#define PRESET_COUNT (sizeof(presets) / sizeof(presets[0]))

double
phub_model_units_mb_bytes(enum phub_model_units units)
{
	return units == PHUB_MODEL_UNITS_PAPER ? 1048576.0 : 1e6;
}

double
phub_model_units_gbit_bits(enum phub_model_units units)
{
	return units == PHUB_MODEL_UNITS_PAPER ? 1073741824.0 : 1e9;
}

const char *
phub_model_units_name(enum phub_model_units units)
{
	switch (units) {
	case PHUB_MODEL_UNITS_SI:
		return "si";
	case PHUB_MODEL_UNITS_PAPER:
		return "paper";
	}
	return NULL;
}

int
phub_model_units_parse(const char *s, enum phub_model_units *units)
{
	if (s == NULL)
		return -EINVAL;
	if (strcmp(s, "si") == 0)
		*units = PHUB_MODEL_UNITS_SI;
	else if (strcmp(s, "paper") == 0)
		*units = PHUB_MODEL_UNITS_PAPER;
	else
		return -EINVAL;
	return 0;
}

size_t
phub_model_preset_count(void)
{
	return PRESET_COUNT;
}

const struct phub_model_preset *
phub_model_preset_at(size_t i)
{
	if (i >= PRESET_COUNT) {
		errno = ERANGE;
		return NULL;
	}
	return &presets[i];
}

const struct phub_model_preset *
phub_model_preset_find(const char *name)
{
	size_t i;

	if (name == NULL) {
		errno = EINVAL;
		return NULL;
	}
	for (i = 0; i < PRESET_COUNT; i++) {
		if (strcasecmp(name, presets[i].abbr) == 0 ||
				strcasecmp(name, presets[i].name) == 0)
			return &presets[i];
	}
	errno = ENOENT;
	return NULL;
}

double
phub_model_preset_bytes(const struct phub_model_preset *p, enum phub_model_units units)
{
	return p->model_mb * phub_model_units_mb_bytes(units);
}

const char *
phub_model_ps_name(enum phub_model_ps ps)
{
	static const char *const names[PHUB_MODEL_PS_COUNT] = {
		[PHUB_MODEL_PS_CC] = "CC",
		[PHUB_MODEL_PS_CS] = "CS",
		[PHUB_MODEL_PS_NCC] = "NCC",
		[PHUB_MODEL_PS_NCS] = "NCS",
		[PHUB_MODEL_PS_PBOX] = "PBOX",
	};

	if ((unsigned int)ps >= PHUB_MODEL_PS_COUNT)
		return NULL;
	return names[ps];
}

/*
 * Figure 4, last row ("per machine bidirectional bandwidth"): every worker sends its gradients
 * (M bytes) and receives the new weights (M bytes) within T, with infinitely fast servers and
 * sending overlapped with receiving (§2.3.1). Counting bytes per host per direction:
 *   CC   the host of the one server also runs a worker; it exchanges M with N-1 remote
 *        workers: (N-1)M each way                          -> 2(N-1)M/T
 *   CS   every host runs a worker and a 1/N shard: its worker sends (N-1)/N M away, its shard
 *        receives M/N from N-1 remote workers: 2(N-1)/N M each way   -> 4(N-1)M/(NT)
 *   NCC  the server host exchanges M with all N workers: NM each way -> 2NM/T
 *   NCS  each of S servers exchanges M/S with N workers: NM/S each way; a worker M each way
 *                                                         -> 2 max(N/S, 1) M/T
 *   PBOX NCC's host, its bytes spread over its interfaces (§3.3 balances chunks over them).
 * With S = N the ratios are CC/CS = N/2, NCC/NCS = N, CC/NCC = (N-1)/N, as in Table 2.
 */
int
phub_model_bandwidth(const struct phub_model_bw_params *p,
		struct phub_model_bw out[PHUB_MODEL_PS_COUNT], char *err, size_t errlen)
{
	double n, s, bits, rate, worker;
	unsigned int ifaces;
	int rc;

	if (p == NULL || out == NULL)
		return phub_err(err, errlen, EINVAL, "missing parameters");
	rc = model_check_pos(p->model_bytes, "model_bytes", err, errlen);
	if (rc == 0)
		rc = model_check_pos(p->compute_s, "compute_s", err, errlen);
	if (rc != 0)
		return rc;
	if (p->workers < 2)
		return phub_err(err, errlen, EINVAL,
				"workers must be at least 2 (one worker exchanges nothing)");
	if (phub_model_units_name(p->units) == NULL)
		return phub_err(err, errlen, EINVAL, "unknown units");

	n = p->workers;
	s = p->servers == 0 ? n : p->servers;
	ifaces = p->pbox_interfaces == 0 ? 10 : p->pbox_interfaces;
	bits = p->model_bytes * MODEL_BITS_PER_BYTE;
	/* One model each way within T, in output Gbit/s. */
	rate = bits / p->compute_s / phub_model_units_gbit_bits(p->units);
	worker = 2 * rate;

	out[PHUB_MODEL_PS_CC].host_gbps = 2 * (n - 1) * rate;
	out[PHUB_MODEL_PS_CS].host_gbps = 4 * (n - 1) / n * rate;
	out[PHUB_MODEL_PS_NCC].host_gbps = 2 * n * rate;
	out[PHUB_MODEL_PS_NCS].host_gbps = 2 * fmax(n / s, 1.0) * rate;
	out[PHUB_MODEL_PS_PBOX].host_gbps = 2 * n * rate;

	/* Colocated hosts carry a worker too: the worker's own share is already in the counts. */
	out[PHUB_MODEL_PS_CC].worker_gbps = worker;
	out[PHUB_MODEL_PS_CS].worker_gbps = out[PHUB_MODEL_PS_CS].host_gbps;
	out[PHUB_MODEL_PS_NCC].worker_gbps = worker;
	out[PHUB_MODEL_PS_NCS].worker_gbps = worker;
	out[PHUB_MODEL_PS_PBOX].worker_gbps = worker;

	for (unsigned int i = 0; i < PHUB_MODEL_PS_COUNT; i++) {
		out[i].send_gbps = out[i].host_gbps / 2;
		out[i].interface_gbps = out[i].host_gbps;
	}
	out[PHUB_MODEL_PS_PBOX].interface_gbps = out[PHUB_MODEL_PS_PBOX].host_gbps / ifaces;
	return 0;
}

/* Table 2 of §2.3.1 as printed: CC, CS, NCC, NCS in Gbps, 8 workers. */
static const struct {
	const char *abbr;
	double gbps[4];
} table2[PHUB_MODEL_TABLE2_ROWS] = {
	{ "RN269", { 122, 31, 140, 17 } },
	{ "I3", { 44, 11, 50, 6 } },
	{ "GN", { 40, 10, 46, 6 } },
	{ "AN", { 1232, 308, 1408, 176 } },
};

int
phub_model_table2(enum phub_model_units units,
		struct phub_model_table2_row rows[PHUB_MODEL_TABLE2_ROWS], char *err, size_t errlen)
{
	struct phub_model_bw bw[PHUB_MODEL_PS_COUNT];
	struct phub_model_bw_params p;
	const struct phub_model_preset *preset;
	int rc;

	for (unsigned int r = 0; r < PHUB_MODEL_TABLE2_ROWS; r++) {
		preset = phub_model_preset_find(table2[r].abbr);
		if (preset == NULL)
			return phub_err(err, errlen, ENOENT, "no preset %s", table2[r].abbr);
		memset(&p, 0, sizeof(p));
		p.model_bytes = phub_model_preset_bytes(preset, units);
		p.compute_s = preset->compute_ms / 1e3;
		p.workers = 8;	/* §2.3.1: "8 workers and 8 CS PSs" */
		p.units = units;
		rc = phub_model_bandwidth(&p, bw, err, errlen);
		if (rc != 0)
			return rc;
		rows[r].abbr = table2[r].abbr;
		for (unsigned int c = 0; c < 4; c++) {
			rows[r].paper_gbps[c] = table2[r].gbps[c];
			rows[r].model_gbps[c] = bw[c].host_gbps;
			rows[r].residual[c] = bw[c].host_gbps / table2[r].gbps[c] - 1;
		}
	}
	return 0;
}
