/* SPDX-License-Identifier: BSD-3-Clause */
/* The papers' models: bandwidth need, hierarchy, rack cost, configuration search, calibration. */

#ifndef PHUB_MODEL_H
#define PHUB_MODEL_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Conventions of every function below: inputs carry their unit in their name (model_bytes,
 * compute_s, worker_gbps, gpu_usd); bandwidths are in Gbit/s where one Gbit is 10^9 bits unless
 * a phub_model_units says otherwise; an int function returns 0 or -EINVAL (-ENOMEM, -ENOENT, -EIO
 * where said) and then writes one sentence into err (errlen bytes, may be NULL). Nothing here
 * prints or exits. Section numbers (§) are those of the PHub paper (SoCC 2018, seed 000) unless
 * another paper is named.
 */

/* Error messages fit in this many bytes; callers may pass a smaller buffer. */
#define PHUB_MODEL_ERR_LEN 256

/* ---------------------------------------------------------------------------------------------
 * Units. Table 3 gives model sizes in "MB" and Table 2 bandwidths in "Gbps" without saying
 * which prefixes; the two readings below differ by exactly 1000/1024 in every bandwidth.
 */
enum phub_model_units {
	PHUB_MODEL_UNITS_SI = 0,	/* MB = 10^6 bytes, Gbit = 10^9 bits */
	PHUB_MODEL_UNITS_PAPER,		/* MB = 2^20 bytes, Gbit = 2^30 bits: fits Table 2 best */
};

/* Bytes in one Table 3 "MB" under a reading. */
double phub_model_units_mb_bytes(enum phub_model_units units);
/* Bits in one output "Gbit" under a reading. */
double phub_model_units_gbit_bits(enum phub_model_units units);
/* "si" or "paper"; NULL for an unknown value. */
const char *phub_model_units_name(enum phub_model_units units);
/* Parses "si" or "paper"; -EINVAL otherwise. */
int phub_model_units_parse(const char *s, enum phub_model_units *units);

/* ---------------------------------------------------------------------------------------------
 * Table 3 of §4.2: the networks of the evaluation, as presets.
 */
struct phub_model_preset {
	const char *abbr;	/* the paper's abbreviation: "RN269" */
	const char *name;	/* lower-case name: "resnet269" */
	const char *title;	/* as printed in Table 3: "ResNet 269" */
	double model_mb;	/* Table 3 "Model Size", in the paper's MB (see phub_model_units) */
	double compute_ms;	/* Table 3 "Time/batch": forward + backward of one batch, ms */
	unsigned int batch;	/* Table 3 "Batch": samples per GPU batch */
};

size_t phub_model_preset_count(void);
/* The i-th preset in Table 3's order; NULL and errno ERANGE past the end. */
const struct phub_model_preset *phub_model_preset_at(size_t i);
/* Finds a preset by abbreviation or lower-case name (case-insensitive); NULL + errno ENOENT. */
const struct phub_model_preset *phub_model_preset_find(const char *name);
/* The preset's model size in bytes under a reading of "MB". */
double phub_model_preset_bytes(const struct phub_model_preset *p, enum phub_model_units units);

/* ---------------------------------------------------------------------------------------------
 * §2.3.1 and Figure 4: minimum per-host bandwidth that fully hides communication.
 */
enum phub_model_ps {
	PHUB_MODEL_PS_CC = 0,	/* colocated centralized */
	PHUB_MODEL_PS_CS,	/* colocated sharded */
	PHUB_MODEL_PS_NCC,	/* non-colocated centralized */
	PHUB_MODEL_PS_NCS,	/* non-colocated sharded */
	PHUB_MODEL_PS_PBOX,	/* a PBox: NCC, its traffic spread over its interfaces (§3.3) */
	PHUB_MODEL_PS_COUNT,
};

/* "CC", "CS", "NCC", "NCS", "PBOX". */
const char *phub_model_ps_name(enum phub_model_ps ps);

struct phub_model_bw_params {
	double model_bytes;		/* M: bytes of gradients (and of weights) per iteration */
	double compute_s;		/* T: compute time of one batch (forward + backward), s */
	unsigned int workers;		/* N: worker machines (Table 2: 8) */
	unsigned int servers;		/* NCS server processes; 0 = as many as workers (Table 2) */
	unsigned int pbox_interfaces;	/* PBOX interfaces; 0 = 10 (§3.3) */
	enum phub_model_units units;	/* which Gbit the results are in */
};

struct phub_model_bw {
	double host_gbps;	/* busiest host, send + receive within T: Table 2's quantity */
	double send_gbps;	/* busiest host, send direction only (what full duplex carries) */
	double worker_gbps;	/* a worker machine's need, send + receive */
	double interface_gbps;	/* PBOX: each interface's share of host_gbps; else host_gbps */
};

int phub_model_bandwidth(const struct phub_model_bw_params *p,
		struct phub_model_bw out[PHUB_MODEL_PS_COUNT], char *err, size_t errlen);

/* Table 2 (§2.3.1) as printed, and the model's cells beside it. */
#define PHUB_MODEL_TABLE2_ROWS 4
struct phub_model_table2_row {
	const char *abbr;			/* preset abbreviation of the row */
	double paper_gbps[4];			/* CC, CS, NCC, NCS as printed */
	double model_gbps[4];			/* the model under the chosen reading */
	double residual[4];			/* model / paper - 1 */
};
/* Fills the four rows for 8 workers (Table 2's setup) from the Table 3 presets. */
int phub_model_table2(enum phub_model_units units,
		struct phub_model_table2_row rows[PHUB_MODEL_TABLE2_ROWS], char *err,
		size_t errlen);

/* ---------------------------------------------------------------------------------------------
 * §3.4: should a job that spans R racks reduce hierarchically? Two versions of the condition:
 * the SoCC text (seed 000) and the earlier arXiv text (seed 001).
 */
enum phub_model_hier_version {
	PHUB_MODEL_HIER_000 = 0,
	PHUB_MODEL_HIER_001,
};

struct phub_model_hier_params {
	double model_bytes;		/* M: the condition is linear in M; times below are for M */
	unsigned int workers_per_rack;	/* N */
	unsigned int racks;		/* R (the text's r), at least 2 */
	double pbox_gbps;		/* B_PBox: one PBox's bandwidth */
	double core_gbps;		/* B_Core: the network core's bandwidth (per rack uplink) */
	double worker_gbps;		/* B_Wkr: one worker's bandwidth */
	enum phub_model_hier_version version;
};

struct phub_model_hier {
	double flat_s;		/* left side: cross-rack transfer of the flat reduction */
	double local_s;		/* right side without C: the per-rack aggregation */
	double bn_gbps;		/* B_bn */
	double c_sharded_s;	/* C when the PBoxes reduce as sharded PSs */
	double c_ring_s;	/* C when the PBoxes reduce in a ring */
	bool hier_sharded;	/* the condition holds with C = c_sharded_s */
	bool hier_ring;		/* the condition holds with C = c_ring_s */
	/* Bytes that cross one rack's uplink per iteration, each direction (not from the text:
	 * counted from the traffic pattern of §3.4; the ratio is the text's 1/N). */
	double flat_cross_bytes;
	double hier_cross_bytes;
	double saved_fraction;	/* 1 - hier / flat */
};

int phub_model_hierarchy(const struct phub_model_hier_params *p, struct phub_model_hier *out,
		char *err, size_t errlen);

/*
 * The iteration times of a job across R racks, calibrated by the measured rack-local sum time
 * (a one-rack job of the same N workers and model on one PBox: PUSH, sum, MODEL). Not from the
 * text: a store-and-forward estimate for a 2-CPU or CPU-bound PBox, where the rack's sum and the
 * ring do not overlap. The ring of PBoxes: rack_sum_s + 2(R-1)/R M / B_Core. A flat ring
 * allreduce of the R N workers (ranks of a rack contiguous, so that it crosses each rack's
 * uplink once each way): 2(RN-1)/(RN) M / B_Core, its intra-rack links not limiting.
 */
struct phub_model_hier_pred {
	double rack_sum_s;	/* the calibration: measured rack-local sum time of the model */
	double ring_cross_s;	/* 2(R-1)/R M / B_Core */
	double ring_s;		/* rack_sum_s + ring_cross_s */
	double flat_ring_s;	/* 2(RN-1)/(RN) M / B_Core */
	double ratio;		/* flat_ring_s / ring_s: the ring's iterations/s over the flat ring's */
};

int phub_model_hier_predict(const struct phub_model_hier_params *p, double rack_sum_s,
		struct phub_model_hier_pred *out, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------------
 * §4.9: rack-scale cost model.
 */
struct phub_model_cost_prices {
	double worker_usd;		/* W: worker without GPUs */
	double gpu_usd;			/* G: one GPU */
	unsigned int gpus_per_worker;	/* 4 */
	double pbox_usd;		/* H: the PHub node without its NICs */
	double switch_usd;		/* one ToR/aggregation/core switch (all identical) */
	unsigned int switch_ports;	/* its 100G ports */
	unsigned int breakout;		/* 25G hosts per 100G port with breakout cables */
	double fast_nic_usd;		/* baseline (100G) worker NIC */
	double fast_cable_usd;		/* baseline cable */
	double slow_nic_usd;		/* PHub deployment (25G) worker NIC */
	double slow_cable_usd;		/* breakout cable, per 25G port */
	double pbox_port_usd;		/* PBox NIC, per 25G port */
	unsigned int pbox_ports;	/* PBox 25G ports */
};

/* The prices of §4.9 (the paper's defaults). */
void phub_model_cost_prices_default(struct phub_model_cost_prices *prices);

/* How the oversubscription x:1 becomes the text's fraction F in A = (N+S+C) + F(4S+2C). */
enum phub_model_cost_reading {
	PHUB_MODEL_COST_UPLINK_SHARE = 0,	/* F = 1/(x+1), the ToR's share of uplink ports */
	PHUB_MODEL_COST_INVERSE,		/* F = 1/x, uplink capacity per host */
};

struct phub_model_cost_params {
	struct phub_model_cost_prices prices;
	bool phub;			/* false: 100G sharded baseline; true: 25G PHub rack */
	unsigned int oversub;		/* x of an x:1 ToR oversubscription, at least 1 */
	double samples_per_s;		/* per-worker training throughput; 0 = cost only */
	enum phub_model_cost_reading reading;
};

struct phub_model_cost {
	unsigned int workers_per_switch;	/* workers one ToR holds (with the PBox, if any) */
	double uplink_share;			/* F */
	double switch_port_usd;			/* S: one host port of the ToR */
	double cable_usd;			/* C */
	double network_usd;			/* A */
	double pbox_usd;			/* P: PBox with its network share (0: baseline) */
	double pbox_share_usd;			/* K P: one worker's share of P */
	double worker_usd;			/* total cost charged to one worker */
	double samples_per_kusd;		/* samples/s per $1000, if samples_per_s given */
};

int phub_model_cost(const struct phub_model_cost_params *p, struct phub_model_cost *out,
		char *err, size_t errlen);

/* Table 5 of §4.9 reproduced. Rows: baseline 1:1, PHub 1:1, 2:1, 3:1; columns: future GPUs,
 * spendy (V100), cheap (cheap CPUs). */
#define PHUB_MODEL_TABLE5_ROWS 4
#define PHUB_MODEL_TABLE5_COLS 3
struct phub_model_table5 {
	enum phub_model_cost_reading reading;
	double baseline_samples_per_s;	/* derived from the baseline future-GPU cell */
	double phub_ratio;		/* PHub / baseline throughput, derived from one cell */
	unsigned int ratio_row;		/* the cell the ratio comes from (row, column 0) */
	double spendy_gpu_usd;		/* derived from the baseline spendy cell */
	double cheap_worker_usd;	/* derived from the baseline cheap cell */
	double paper[PHUB_MODEL_TABLE5_ROWS][PHUB_MODEL_TABLE5_COLS];
	double model[PHUB_MODEL_TABLE5_ROWS][PHUB_MODEL_TABLE5_COLS];
	double residual[PHUB_MODEL_TABLE5_ROWS][PHUB_MODEL_TABLE5_COLS];
	/* Cells used to fit, not predicted. */
	bool derived[PHUB_MODEL_TABLE5_ROWS][PHUB_MODEL_TABLE5_COLS];
};

/* ratio_row: 1, 2 or 3, the PHub row of the future-GPU column that fixes the ratio. */
int phub_model_table5(enum phub_model_cost_reading reading, unsigned int ratio_row,
		struct phub_model_table5 *out, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------------
 * Iteration-time model of a PHub deployment and the configuration search of Yan et al. (seed
 * 004, §5) adapted to it.
 */
struct phub_model_job {
	double *layer_bytes;		/* the keys (layers), in bytes; owned by the job */
	size_t layers;
	double compute_s;		/* forward + backward of one batch on one worker, s */
	double overlap;			/* fraction of compute_s that communication overlaps */
	unsigned int batch;		/* samples per worker batch, for samples/s */
};

/* Loads {"layer_bytes": [...], "compute_s": x, "batch": n, "overlap": f} ("compute_ms" may
 * replace compute_s); unknown keys are errors. -EINVAL/-EIO/-ENOMEM with file:line:col or path. */
int phub_model_job_load(const char *path, struct phub_model_job *job, char *err, size_t errlen);
/* A one-layer job of a preset. */
int phub_model_job_from_preset(const struct phub_model_preset *p, enum phub_model_units units,
		struct phub_model_job *job, char *err, size_t errlen);
void phub_model_job_free(struct phub_model_job *job);
/* Total bytes of the job's layers. */
double phub_model_job_bytes(const struct phub_model_job *job);

struct phub_model_hw {
	double worker_gbps;		/* worker NIC, achievable, each direction */
	double port_gbps;		/* one PBox interface, achievable, each direction */
	double core_gbps;		/* one rack's uplink to the core, each direction */
	double pbox_mem_gbps;		/* PBox memory/PCIe ceiling, in + out (§4.7: 80 GB/s) */
	double per_packet_s;		/* PBox lcore time per received segment */
	double per_chunk_s;		/* PBox lcore time per chunk and worker, beyond segments */
	double rtt_s;			/* fixed time of one round trip (network + software) */
	unsigned int pbox_lcores;	/* PBox lcores that aggregate */
	unsigned int segment_bytes;	/* payload bytes per datagram */
};

void phub_model_hw_default(struct phub_model_hw *hw);

enum phub_model_reduction {
	PHUB_MODEL_FLAT = 0,		/* the PBoxes of all racks act as one sharded PS */
	PHUB_MODEL_HIERARCHICAL,	/* rack PBox aggregates, then a ring of PBoxes (§3.4) */
};

enum phub_model_bottleneck {
	PHUB_MODEL_BN_COMPUTE = 0,
	PHUB_MODEL_BN_WORKER_NIC,
	PHUB_MODEL_BN_PBOX_PORT,
	PHUB_MODEL_BN_PBOX_CPU,
	PHUB_MODEL_BN_PBOX_MEMORY,
	PHUB_MODEL_BN_CORE,
	PHUB_MODEL_BN_COUNT,
};

const char *phub_model_bottleneck_name(enum phub_model_bottleneck bn);
const char *phub_model_reduction_name(enum phub_model_reduction r);

/* One deployment: racks may hold different worker counts (rack_workers[i], i < racks). */
struct phub_model_deploy {
	unsigned int racks;
	const unsigned int *rack_workers;
	unsigned int pbox_per_rack;
	unsigned int interfaces;	/* per PBox */
	unsigned int chunk_bytes;
	enum phub_model_reduction reduction;
};

struct phub_model_estimate {
	unsigned int racks;
	unsigned int workers;			/* all racks */
	unsigned int rack_workers_max;		/* the fullest rack */
	unsigned int pbox_per_rack;
	unsigned int interfaces;
	unsigned int chunk_bytes;
	enum phub_model_reduction reduction;
	unsigned int machines;			/* workers + PBoxes */
	double resource_s[PHUB_MODEL_BN_COUNT];	/* time each resource is busy per iteration */
	double exchange_s;			/* the busiest communication resource */
	double tail_s;				/* last chunk's round trip after compute */
	double iteration_s;
	double samples_per_s;			/* workers * batch / iteration_s */
	enum phub_model_bottleneck bottleneck;
};

int phub_model_evaluate(const struct phub_model_job *job, const struct phub_model_hw *hw,
		const struct phub_model_deploy *d, struct phub_model_estimate *out,
		char *err, size_t errlen);

struct phub_model_search_params {
	unsigned int machine_budget;	/* workers + PBoxes, at most */
	unsigned int rack_machines_max;	/* machines one ToR holds */
	unsigned int pbox_per_rack_max;	/* >= 1 */
	unsigned int interfaces_max;	/* per PBox, >= 1 */
	const unsigned int *chunk_bytes;	/* candidate chunk sizes; NULL = 4 KB .. 4 MB */
	size_t chunk_count;
};

void phub_model_search_default(struct phub_model_search_params *s);

/* Fills best[0..*n) with the best configurations (most samples/s first); *n in: capacity. */
int phub_model_optimize(const struct phub_model_job *job, const struct phub_model_hw *hw,
		const struct phub_model_search_params *s, struct phub_model_estimate *best,
		size_t *n, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------------
 * Calibration from phub-bench runs: exchange time = rtt + bits per PBox port / achievable rate
 * + segments per lcore * per-packet cost, fitted by least squares.
 */
struct phub_model_run {
	char source[128];		/* file (and array index) the run came from */
	unsigned int workers;
	double model_bytes;
	unsigned long iterations;
	double exchanges_per_s;
	double goodput_gbps;
	double p50_ms;
	double p99_ms;
	unsigned long retransmits;
	/* optional fields, 0 when absent */
	unsigned int mtu;
	unsigned int segment_bytes;
	unsigned int chunk_bytes;
	double packets_per_exchange;
	unsigned int ports;
	unsigned int lcores;
};

/* Appends the runs of one file (an object or an array of objects) to *runs (realloc'ed). */
int phub_model_runs_load(const char *path, struct phub_model_run **runs, size_t *n,
		char *err, size_t errlen);

/* The two regressors of a run and its observed exchange time; -EINVAL if the run is unusable. */
int phub_model_run_terms(const struct phub_model_run *r, double *port_bits, double *lcore_packets,
		double *exchange_s, char *err, size_t errlen);

#define PHUB_MODEL_FIT_MAX_POINTS 4096

struct phub_model_fit {
	size_t points;
	double rtt_s;			/* fixed time per exchange */
	double achievable_gbps;		/* per PBox port */
	double per_packet_s;		/* per segment per lcore */
	bool rtt_fitted;		/* false: constrained to 0 (non-negative least squares) */
	bool per_packet_fitted;		/* false: not identifiable or constrained to 0 */
	bool identifiable;		/* runs separate bandwidth from per-packet cost */
	double residual_rms_s;
	double residual_rel_rms;	/* RMS of residual / observed */
	double residual_s[PHUB_MODEL_FIT_MAX_POINTS];
};

int phub_model_calibrate(const struct phub_model_run *runs, size_t n, struct phub_model_fit *fit,
		char *err, size_t errlen);

/* Reads the JSON that `phub-plan calibrate --json` prints into hw (achievable rate, per-packet
 * cost, rtt); fields absent or null keep hw's value. */
int phub_model_hw_load_calibration(const char *path, struct phub_model_hw *hw,
		char *err, size_t errlen);

#endif /* PHUB_MODEL_H */
