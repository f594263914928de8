/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The PBox's health: /phub/health (ok, degraded or failing, with the reasons) and the systemd
 * watchdog, both from what the main lcore samples: its own heartbeat, each data lcore's loop
 * counter, each port's link, imissed and rx_nombuf. A wedged control loop or a data lcore
 * that stopped turning is failing and stops the WATCHDOG=1 pings, so systemd restarts it.
 */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rte_cycles.h>
#include <rte_telemetry.h>

#include "pbox.h"

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* Samples every SAMPLE_MS: ethdev counters are register reads on a real NIC. */
#define SAMPLE_MS 100
/* A data lcore whose loop counter stood still this long is failing (at least). */
#define STALL_MS 1000
/* imissed or rx_nombuf that rose within this window: degraded. */
#define RISE_WINDOW_MS 60000

/* A port counter that must not rise (imissed, rx_nombuf): when it last did, and by how much. */
struct counter_rise {
	uint64_t value;
	uint64_t rose_tsc;	/* 0: never rose */
	uint64_t rise;		/* by how much, the last time it rose */
};

struct port_sample {
	struct counter_rise imissed;
	struct counter_rise rx_nombuf;
	bool link_known;
	bool link_up;
};

static struct {
	uint64_t heartbeat_tsc;		/* the control loop's last turn */
	uint64_t next_sample_tsc;
	uint64_t loops[RTE_MAX_LCORE];	/* by data index */
	uint64_t moved_tsc[RTE_MAX_LCORE];
	struct port_sample ports[PBOX_MAX_PORTS];
	/* The watchdog: 0 when systemd asked for none. */
	uint64_t watchdog_usec;
	uint64_t next_ping_tsc;
	uint64_t ping_loops[RTE_MAX_LCORE];	/* each lcore's counter at the last ping */
	uint64_t pings;
	bool withheld;			/* the last ping was withheld (logged once) */
} h;

static uint64_t
ms_to_tsc(uint64_t ms)
{
	return rte_get_tsc_hz() / 1000 * ms;
}

static uint64_t
tsc_to_ms(uint64_t tsc)
{
	return tsc * 1000 / rte_get_tsc_hz();
}

/* How long a data lcore may stand still before it is failing: longer than its idle sleeps. */
static uint64_t
stall_ms(const struct pbox *pb)
{
	uint64_t ms = STALL_MS;

	if (pb->cfg.idle.policy != PHUB_CONFIG_IDLE_POLL && pb->cfg.idle.max_sleep_us / 100 > ms)
		ms = pb->cfg.idle.max_sleep_us / 100;	/* ten sleeps of the longest */
	return ms;
}

void
pbox_health_init(struct pbox *pb)
{
	const char *usec = getenv("WATCHDOG_USEC");
	const char *pid = getenv("WATCHDOG_PID");
	uint64_t now = rte_rdtsc();

	STORE(h.heartbeat_tsc, now);
	for (uint16_t k = 0; k < pb->n_lcores; k++) {
		h.loops[k] = LOAD(pb->lcores[k].stats.loops);
		STORE(h.moved_tsc[k], now);
		h.ping_loops[k] = h.loops[k];
	}
	/* systemd names the process the watchdog is for; another one's is not ours. */
	if (usec == NULL || (pid != NULL && strtol(pid, NULL, 10) != (long)getpid()))
		return;
	h.watchdog_usec = strtoull(usec, NULL, 10);
	if (h.watchdog_usec == 0)
		return;
	/* Twice per period, as sd_watchdog_enabled(3) advises; the first once lcores turned. */
	h.next_ping_tsc = now + rte_get_tsc_hz() / 2000000 * h.watchdog_usec;
	PBOX_LOG(INFO, "watchdog: WATCHDOG=1 every %" PRIu64 " ms while the control loop and "
			"every data lcore make progress", h.watchdog_usec / 2000);
}

static void
counter_sample(struct counter_rise *c, uint64_t value, uint64_t now)
{
	if (value > c->value) {
		STORE(c->rise, value - c->value);
		STORE(c->rose_tsc, now);
	}
	c->value = value;
}

static void
sample(struct pbox *pb, uint64_t now)
{
	for (uint16_t k = 0; k < pb->n_lcores; k++) {
		uint64_t loops = LOAD(pb->lcores[k].stats.loops);

		if (loops != h.loops[k]) {
			h.loops[k] = loops;
			STORE(h.moved_tsc[k], now);
		}
	}
	for (uint16_t i = 0; i < pb->n_ports; i++) {
		struct port_sample *ps = &h.ports[i];
		struct rte_eth_link link;
		struct rte_eth_stats st;

		if (rte_eth_stats_get(pb->ports[i].port_id, &st) == 0) {
			counter_sample(&ps->imissed, st.imissed, now);
			counter_sample(&ps->rx_nombuf, st.rx_nombuf, now);
		}
		memset(&link, 0, sizeof(link));
		if (rte_eth_link_get_nowait(pb->ports[i].port_id, &link) == 0) {
			STORE(ps->link_up, link.link_status == RTE_ETH_LINK_UP);
			STORE(ps->link_known, true);
		}
	}
}

/* A ping only when every data lcore turned its loop since the last one (and we run). */
static void
watchdog(struct pbox *pb, uint64_t now)
{
	uint16_t stuck = UINT16_MAX;

	if (h.watchdog_usec == 0 || now < h.next_ping_tsc)
		return;
	h.next_ping_tsc = now + rte_get_tsc_hz() / 2000000 * h.watchdog_usec;
	for (uint16_t k = 0; k < pb->n_lcores; k++) {
		uint64_t loops = LOAD(pb->lcores[k].stats.loops);

		if (loops == h.ping_loops[k] && stuck == UINT16_MAX)
			stuck = k;
		h.ping_loops[k] = loops;
	}
	if (stuck != UINT16_MAX) {
		if (!h.withheld)
			PBOX_LOG(ERR, "watchdog: lcore %u made no progress for %" PRIu64 " ms: "
					"WATCHDOG=1 withheld (systemd restarts the PBox after "
					"WatchdogSec)", pb->lcores[stuck].lcore_id,
					h.watchdog_usec / 2000);
		h.withheld = true;
		return;
	}
	if (h.withheld)
		PBOX_LOG(NOTICE, "watchdog: every data lcore makes progress again: WATCHDOG=1 "
				"resumed");
	h.withheld = false;
	if (pbox_notify("WATCHDOG=1") == 0)
		STORE(h.pings, h.pings + 1);
}

void
pbox_health_poll(struct pbox *pb)
{
	uint64_t now = rte_rdtsc();

	STORE(h.heartbeat_tsc, now);
	if (now >= h.next_sample_tsc) {
		h.next_sample_tsc = now + ms_to_tsc(SAMPLE_MS);
		sample(pb, now);
	}
	watchdog(pb, now);
}

/* The worst level so far and one more reason. */
static void
reason(struct rte_tel_data *list, enum pbox_health_level *level, enum pbox_health_level l,
		const char *fmt, ...) __rte_format_printf(4, 5);

static void
reason(struct rte_tel_data *list, enum pbox_health_level *level, enum pbox_health_level l,
		const char *fmt, ...)
{
	char text[RTE_TEL_MAX_STRING_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	rte_tel_data_add_array_string(list, text);
	if (l > *level)
		*level = l;
}

/* Ring jobs whose neighbours are not linked, or silent for half of what ends the job. */
static void
ring_reasons(struct pbox *pb, struct rte_tel_data *list, enum pbox_health_level *level)
{
	uint64_t quiet_ms = pb->cfg.timeouts.worker_dead_ms / 2;
	uint64_t now = phub_engine_monotonic_ns();

	pthread_mutex_lock(&pb->jobs_lock);
	for (struct phub_engine_job *job = pb->engine == NULL ? NULL :
	     phub_engine_job_next(pb->engine, NULL); job != NULL;
	     job = phub_engine_job_next(pb->engine, job)) {
		struct phub_engine_ring_link prev, next;
		struct phub_engine_ring_params ring;
		struct phub_engine_job_info info;
		uint64_t prev_ns, next_ns;

		if (!phub_engine_job_ring(job, &ring, &prev, &next))
			continue;
		phub_engine_job_get_info(job, &info);
		if (prev.token == 0 || next.token == 0) {
			reason(list, level, PBOX_HEALTH_DEGRADED, "job %s: ring not linked (%s)",
					info.name, prev.token == 0 && next.token == 0 ? "both" :
					prev.token == 0 ? "prev" : "next");
			continue;
		}
		phub_engine_job_ring_silence(job, now, &prev_ns, &next_ns);
		if (prev_ns / 1000000 > quiet_ms || next_ns / 1000000 > quiet_ms)
			reason(list, level, PBOX_HEALTH_DEGRADED, "job %s: ring %s silent for %"
					PRIu64 " ms", info.name, prev_ns > next_ns ? "prev" : "next",
					RTE_MAX(prev_ns, next_ns) / 1000000);
	}
	pthread_mutex_unlock(&pb->jobs_lock);
}

/* Degraded while port i's counter has risen within RISE_WINDOW_MS; why says what that means. */
static void
counter_reason(struct rte_tel_data *list, enum pbox_health_level *level, uint64_t now,
		uint16_t i, const char *what, const struct counter_rise *c, const char *why)
{
	uint64_t rose = LOAD(c->rose_tsc);

	if (rose != 0 && tsc_to_ms(now - rose) < RISE_WINDOW_MS)
		reason(list, level, PBOX_HEALTH_DEGRADED, "port %s: %s rose by %" PRIu64 " %" PRIu64
				" ms ago (%s)", pbox.ports[i].name, what, LOAD(c->rise),
				tsc_to_ms(now - rose), why);
}

static int
cmd_health(const char *cmd, const char *params, struct rte_tel_data *d)
{
	static const char *const names[] = { "ok", "degraded", "failing" };
	struct rte_tel_data *list = rte_tel_data_alloc();
	enum pbox_health_level level = PBOX_HEALTH_OK;
	uint64_t now = rte_rdtsc(), stall = stall_ms(&pbox), ms;
	unsigned int links_down = 0;

	(void)cmd;
	(void)params;
	if (list == NULL)
		return -ENOMEM;
	rte_tel_data_start_array(list, RTE_TEL_STRING_VAL);
	ms = tsc_to_ms(now - LOAD(h.heartbeat_tsc));
	if (ms > STALL_MS)
		reason(list, &level, PBOX_HEALTH_FAILING, "control loop: no turn for %" PRIu64
				" ms", ms);
	for (uint16_t k = 0; k < pbox.n_lcores; k++) {
		ms = tsc_to_ms(now - LOAD(h.moved_tsc[k]));
		if (ms > stall)
			reason(list, &level, PBOX_HEALTH_FAILING, "lcore %u: no loop turn for %"
					PRIu64 " ms", pbox.lcores[k].lcore_id, ms);
	}
	for (uint16_t i = 0; i < pbox.n_ports; i++) {
		const struct port_sample *ps = &h.ports[i];

		if (LOAD(ps->link_known) && !LOAD(ps->link_up)) {
			links_down++;
			reason(list, &level, PBOX_HEALTH_DEGRADED, "port %s: link down",
					pbox.ports[i].name);
		}
		counter_reason(list, &level, now, i, "imissed", &ps->imissed,
				"the lcores do not keep up");
		counter_reason(list, &level, now, i, "rx_nombuf", &ps->rx_nombuf,
				"mbuf pool empty");
	}
	/* No port to serve on: nothing works. */
	if (pbox.n_ports != 0 && links_down == pbox.n_ports)
		level = PBOX_HEALTH_FAILING;
	ring_reasons(&pbox, list, &level);
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_string(d, "status", names[level]);
	rte_tel_data_add_dict_u64(d, "level", level);
	rte_tel_data_add_dict_container(d, "reasons", list, 0);
	rte_tel_data_add_dict_u64(d, "watchdog_usec", h.watchdog_usec);
	rte_tel_data_add_dict_u64(d, "watchdog_pings", LOAD(h.pings));
	return 0;
}

/* /phub/test/stall,<lcore>,<ms>: that data lcore stands still for ms (tests only). */
static int
cmd_test_stall(const char *cmd, const char *params, struct rte_tel_data *d)
{
	unsigned int lcore, ms;

	(void)cmd;
	if (params == NULL || sscanf(params, "%u,%u", &lcore, &ms) != 2 || lcore >= RTE_MAX_LCORE ||
	    pbox.lcore_index[lcore] < 0 || ms == 0 || ms > 600000)
		return -EINVAL;
	PBOX_LOG(WARNING, "test hook: lcore %u stands still for %u ms", lcore, ms);
	STORE(pbox.lcores[pbox.lcore_index[lcore]].test_stall_ms, ms);
	rte_tel_data_start_dict(d);
	rte_tel_data_add_dict_u64(d, "lcore", lcore);
	rte_tel_data_add_dict_u64(d, "stall_ms", ms);
	return 0;
}

void
pbox_health_test_stall(struct pbox_lcore *lc)
{
	uint64_t end = rte_rdtsc() + ms_to_tsc(LOAD(lc->test_stall_ms));

	/* No loop turn, no quiescent state: what a wedged lcore looks like from outside. */
	while (rte_rdtsc() < end && !pbox.quit)
		rte_delay_us_sleep(1000);
	STORE(lc->test_stall_ms, 0);
}

void
pbox_health_telemetry_init(struct pbox *pb)
{
	uint64_t now = rte_rdtsc();

	/* Until the control loop's first turn: nothing has stood still yet. */
	STORE(h.heartbeat_tsc, now);
	for (uint16_t k = 0; k < pb->n_lcores; k++)
		STORE(h.moved_tsc[k], now);
	rte_telemetry_register_cmd("/phub/health", cmd_health,
			"ok, degraded or failing, with the reasons. No parameters");
	if (!pb->test_hooks)
		return;
	PBOX_LOG(WARNING, "test hooks on (PHUB_PBOX_TEST_HOOKS): /phub/test/stall can stop an "
			"lcore; never in production");
	rte_telemetry_register_cmd("/phub/test/stall", cmd_test_stall,
			"Tests only: a data lcore stands still. Parameters: lcore,ms");
}
