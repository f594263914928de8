/* SPDX-License-Identifier: BSD-3-Clause */
/* §4.9: the rack-scale cost model (cost per worker, throughput per dollar) and Table 5. */

#include <errno.h>
#include <math.h>
#include <string.h>

#include "phub_model.h"
#include "model_priv.h"

void
phub_model_cost_prices_default(struct phub_model_cost_prices *prices)
{
	/* §4.9, with the paper's references in brackets. */
	prices->worker_usd = 4117;		/* W [17], without GPUs */
	prices->gpu_usd = 699;			/* G [14] */
	prices->gpus_per_worker = 4;
	prices->pbox_usd = 8407;		/* H [16] */
	prices->switch_usd = 21077;		/* Arista 7060CX-32S [3] */
	prices->switch_ports = 32;
	prices->breakout = 4;			/* 4-to-1 breakout cables */
	prices->fast_nic_usd = 795;		/* ConnectX-4 EN 100Gb [12] */
	prices->fast_cable_usd = 94;		/* 2 m cable [11] */
	prices->slow_nic_usd = 260;		/* ConnectX-4 Lx EN 25Gb [12] */
	prices->slow_cable_usd = 31.25;		/* breakout, per port [11] */
	prices->pbox_port_usd = 162.5;		/* dual-port ConnectX-4 Lx EN, per port [12] */
	prices->pbox_ports = 20;		/* 10 dual-port cards */
}

static int
check_prices(const struct phub_model_cost_prices *pr, char *err, size_t errlen)
{
	const struct model_num usd[] = {
		MODEL_NUM(pr, worker_usd),
		MODEL_NUM(pr, gpu_usd),
		MODEL_NUM(pr, pbox_usd),
		MODEL_NUM(pr, switch_usd),
		MODEL_NUM(pr, fast_nic_usd),
		MODEL_NUM(pr, fast_cable_usd),
		MODEL_NUM(pr, slow_nic_usd),
		MODEL_NUM(pr, slow_cable_usd),
		MODEL_NUM(pr, pbox_port_usd),
	};
	int rc;

	rc = model_check_nums(NULL, 0, usd, MODEL_DIM(usd), err, errlen);
	if (rc != 0)
		return rc;
	if (pr->switch_ports < 2)
		return phub_err(err, errlen, EINVAL, "switch_ports must be at least 2");
	if (pr->breakout < 1)
		return phub_err(err, errlen, EINVAL, "breakout must be at least 1");
	return 0;
}

/* The text's F for an x:1 oversubscription (see enum phub_model_cost_reading). */
static double
uplink_share(enum phub_model_cost_reading reading, unsigned int x)
{
	return reading == PHUB_MODEL_COST_INVERSE ? 1.0 / x : 1.0 / (x + 1);
}

/* §4.9: "the amortized cost of the network per machine is A = (N+S+C) + F(4S+2C)": the host's
 * NIC port, its ToR port and cable, and F of the four switch ports (ToR up, aggregation down
 * and up, core) and two cables of the path to the core. */
static double
network_usd(double nic, double port, double cable, double f)
{
	return (nic + port + cable) + f * (4 * port + 2 * cable);
}

int
phub_model_cost(const struct phub_model_cost_params *p, struct phub_model_cost *out,
		char *err, size_t errlen)
{
	const struct phub_model_cost_prices *pr;
	unsigned int down, x;
	double f, s, c, nic;
	int rc;

	if (p == NULL || out == NULL)
		return phub_err(err, errlen, EINVAL, "missing parameters");
	pr = &p->prices;
	rc = check_prices(pr, err, errlen);
	if (rc == 0)
		rc = model_check_nonneg(p->samples_per_s, "samples_per_s", err, errlen);
	if (rc != 0)
		return rc;
	if (p->oversub < 1 || p->oversub > 64)
		return phub_err(err, errlen, EINVAL,
				"oversubscription must be between 1 and 64 (x of x:1), got %u",
				p->oversub);
	if (p->reading != PHUB_MODEL_COST_UPLINK_SHARE && p->reading != PHUB_MODEL_COST_INVERSE)
		return phub_err(err, errlen, EINVAL, "unknown reading of F");

	memset(out, 0, sizeof(*out));
	x = p->oversub;
	f = uplink_share(p->reading, x);
	if (!p->phub) {
		/* Baseline: 100G hosts on 100G ports; x:1 leaves x/(x+1) of the ports for hosts
		 * (§4.9: 16 workers per switch at 1:1). */
		s = pr->switch_usd / pr->switch_ports;
		c = pr->fast_cable_usd;
		nic = pr->fast_nic_usd;
		out->workers_per_switch = pr->switch_ports * x / (x + 1);
	} else {
		/* PHub: 25G hosts on broken-out ports, a 25G port costs a quarter of a 100G one.
		 * §4.9: "a PHub and 44 25Gb workers" at 1:1, 65 at 2:1, 76 at 3:1: the host share
		 * of the 128 25G ports, less the PBox's 20. */
		s = pr->switch_usd / (pr->switch_ports * pr->breakout);
		c = pr->slow_cable_usd;
		nic = pr->slow_nic_usd;
		down = pr->switch_ports * pr->breakout * x / (x + 1);
		if (down <= pr->pbox_ports)
			return phub_err(err, errlen, EINVAL,
					"a switch with %u host ports at %u:1 has no room for workers beside a PBox with %u ports",
					down, x, pr->pbox_ports);
		out->workers_per_switch = down - pr->pbox_ports;
	}
	if (out->workers_per_switch == 0)
		return phub_err(err, errlen, EINVAL, "the switch holds no worker at %u:1", x);

	out->uplink_share = f;
	out->switch_port_usd = s;
	out->cable_usd = c;
	out->network_usd = network_usd(nic, s, c, f);
	/* §4.9 writes a worker as W + N + 4G + A with N also inside A; the NIC is counted once. */
	out->worker_usd = pr->worker_usd + pr->gpus_per_worker * pr->gpu_usd + out->network_usd;
	if (p->phub) {
		/* §4.9: P = W + 20N + 20A and KP the worker's share, K the worker-to-PHub
		 * ratio. We read W there as H, the PHub node (the text's own name for it; Table
		 * 5's cheap-CPU column shows that P does not follow W), and 20N + 20A as 20
		 * ports' A, the port's NIC counted once as for workers. */
		out->pbox_usd = pr->pbox_usd +
			pr->pbox_ports * network_usd(pr->pbox_port_usd, s, c, f);
		out->pbox_share_usd = out->pbox_usd / out->workers_per_switch;
		out->worker_usd += out->pbox_share_usd;
	}
	if (p->samples_per_s > 0)
		out->samples_per_kusd = p->samples_per_s / out->worker_usd * 1000;
	return 0;
}

/* Table 5 as printed: throughput per $1000. */
static const double table5[PHUB_MODEL_TABLE5_ROWS][PHUB_MODEL_TABLE5_COLS] = {
	{ 46.11, 14.57, 60.41 },	/* 100Gb sharded 1:1 */
	{ 55.19, 15.30, 77.21 },	/* 25Gb PHub 1:1 */
	{ 57.71, 15.49, 82.24 },	/* 25Gb PHub 2:1 */
	{ 59.03, 15.58, 84.95 },	/* 25Gb PHub 3:1 */
};

static int
worker_cost(const struct phub_model_cost_prices *pr, enum phub_model_cost_reading reading,
		unsigned int row, double *usd, char *err, size_t errlen)
{
	struct phub_model_cost_params p;
	struct phub_model_cost c;
	int rc;

	memset(&p, 0, sizeof(p));
	p.prices = *pr;
	p.phub = row > 0;
	p.oversub = row > 0 ? row : 1;
	p.reading = reading;
	rc = phub_model_cost(&p, &c, err, errlen);
	if (rc == 0)
		*usd = c.worker_usd;
	return rc;
}

/*
 * The text gives neither the measured throughputs nor the prices of the spendy GPU (V100) and
 * of the cheap-CPU worker. They are derived from as few cells as possible, and every other
 * cell is a prediction of the model:
 *  - baseline throughput per worker from the baseline future-GPU cell;
 *  - the spendy GPU price from the baseline spendy cell, the cheap worker price from the
 *    baseline cheap cell (the worker cost is affine in both);
 *  - the PHub/baseline throughput ratio from one PHub cell of the future-GPU column.
 * The eight remaining cells test the model.
 */
int
phub_model_table5(enum phub_model_cost_reading reading, unsigned int ratio_row,
		struct phub_model_table5 *out, char *err, size_t errlen)
{
	struct phub_model_cost_prices pr, col[PHUB_MODEL_TABLE5_COLS];
	double base, zero, usd, tb, tp;
	int rc;

	if (out == NULL)
		return phub_err(err, errlen, EINVAL, "missing output");
	if (ratio_row < 1 || ratio_row >= PHUB_MODEL_TABLE5_ROWS)
		return phub_err(err, errlen, EINVAL,
				"ratio row must be 1, 2 or 3 (PHub 1:1, 2:1, 3:1)");
	memset(out, 0, sizeof(*out));
	out->reading = reading;
	out->ratio_row = ratio_row;
	phub_model_cost_prices_default(&pr);

	rc = worker_cost(&pr, reading, 0, &base, err, errlen);
	if (rc != 0)
		return rc;
	tb = table5[0][0] * base / 1000;
	out->baseline_samples_per_s = tb;

	col[0] = pr;
	col[1] = pr;
	col[1].gpu_usd = 0;
	rc = worker_cost(&col[1], reading, 0, &zero, err, errlen);
	if (rc != 0)
		return rc;
	col[1].gpu_usd = (1000 * tb / table5[0][1] - zero) / pr.gpus_per_worker;
	col[2] = pr;
	col[2].worker_usd = 0;
	rc = worker_cost(&col[2], reading, 0, &zero, err, errlen);
	if (rc != 0)
		return rc;
	col[2].worker_usd = 1000 * tb / table5[0][2] - zero;
	out->spendy_gpu_usd = col[1].gpu_usd;
	out->cheap_worker_usd = col[2].worker_usd;
	if (col[1].gpu_usd <= 0 || col[2].worker_usd <= 0)
		return phub_err(err, errlen, EINVAL,
				"this reading needs a non-positive price to fit the baseline cells");

	rc = worker_cost(&pr, reading, ratio_row, &usd, err, errlen);
	if (rc != 0)
		return rc;
	tp = table5[ratio_row][0] * usd / 1000;
	out->phub_ratio = tp / tb;

	for (unsigned int r = 0; r < PHUB_MODEL_TABLE5_ROWS; r++) {
		for (unsigned int c = 0; c < PHUB_MODEL_TABLE5_COLS; c++) {
			rc = worker_cost(&col[c], reading, r, &usd, err, errlen);
			if (rc != 0)
				return rc;
			out->paper[r][c] = table5[r][c];
			out->model[r][c] = (r == 0 ? tb : tp) / usd * 1000;
			out->residual[r][c] = out->model[r][c] / table5[r][c] - 1;
			out->derived[r][c] = r == 0 || (r == ratio_row && c == 0);
		}
	}
	return 0;
}
