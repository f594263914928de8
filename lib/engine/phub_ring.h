/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The cross-rack ring of one segment (PHub §3.4, docs/hierarchy.md): which part of the
 * segment a PBox sends and receives at each ring step, and the state machine that turns a
 * rack sum into the sum over every rack by reduce-scatter then all-gather, with ACK,
 * retransmit and duplicate suppression. Plain C over plain buffers, no DPDK, no clock of its
 * own: the caller passes the time, encodes the datagrams and runs the optimizer.
 *
 * R PBoxes sit on a ring at positions 0 .. R-1; PBox pos sends to pos+1 and receives from
 * pos-1. A segment of n elements is cut into R parts (phub_ring_part()). Steps 0 .. R-2 are
 * the reduce-scatter (RING_REDUCE): at step k PBox pos sends its partial sum of part
 * (pos - k) mod R; the receiver adds its own rack sum and sends it on at step k+1. Steps
 * R-1 .. 2R-3 are the all-gather (RING_GATHER): complete parts travel on unchanged. Every
 * part's sum is formed in one fixed order, (((s_p + s_p+1) + s_p+2) + ... + s_p-1) where s_q
 * is rack q's sum, whatever the timing: runs are bit-reproducible.
 *
 * Per segment and iteration each PBox sends 2(R-1) parts, 2(R-1)/R of the segment.
 *
 * Threading: a segment's ring state is touched only by the data lcore that owns its chunk.
 */

#ifndef PHUB_RING_H
#define PHUB_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	PHUB_RING_MAX_RACKS = 16,	/* steps 2R-2 fit the 32-bit step masks */
	PHUB_RING_MAX_STEPS = 2 * (PHUB_RING_MAX_RACKS - 1),
};

/* Steps of one iteration's ring: R-1 reduce then R-1 gather steps. */
static inline unsigned int
phub_ring_steps(unsigned int racks)
{
	return 2 * (racks - 1);
}

/* True when step is a reduce-scatter step (RING_REDUCE), false for all-gather (RING_GATHER). */
static inline bool
phub_ring_step_is_reduce(unsigned int racks, unsigned int step)
{
	return step < racks - 1;
}

/*
 * Part `part` of a segment of `elems` elements cut for `racks` PBoxes: *offset and *count in
 * elements. Parts differ by one element at most; when elems < racks some are empty (count 0):
 * an empty part is never sent, both ends skip its step.
 */
void
phub_ring_part(unsigned int racks, uint32_t elems, unsigned int part, uint32_t *offset,
	       uint32_t *count);

/*
 * A segment's root when it is cut into R parts (phub_ring_part()), the ring's format before
 * whole-segment parts; any other root q < R: the whole segment is part q, every other part
 * is empty (see phub_ring_seg_part()).
 */
#define PHUB_RING_SPLIT 0xffu

/*
 * Part `part` of a segment of `elems` elements as the ring carries it. With root
 * PHUB_RING_SPLIT, phub_ring_part(). Otherwise the segment is not cut: part `root` is all of
 * it and the others are empty, so that each ring datagram carries a whole segment (as large as
 * a PUSH: the path MTU) instead of 1/R of one, R times fewer datagrams and RING_ACKs for the
 * same bytes. The segments' roots take turns over the ring (the engine gives segment s of
 * chunk c the root (c + s) mod R), so each PBox still sends 2(R-1)/R of the model; the steps
 * of the empty parts are skipped by both ends as for any empty part.
 */
static inline void
phub_ring_seg_part(unsigned int racks, uint32_t elems, unsigned int root, unsigned int part,
		   uint32_t *offset, uint32_t *count)
{
	if (root == PHUB_RING_SPLIT) {
		phub_ring_part(racks, elems, part, offset, count);
		return;
	}
	*offset = 0;
	*count = part == root ? elems : 0;
}

/* The part PBox `pos` sends at `step`. */
unsigned int
phub_ring_send_part(unsigned int racks, unsigned int pos, unsigned int step);

/* The part PBox `pos` receives at `step` (what pos-1 sends). */
unsigned int
phub_ring_recv_part(unsigned int racks, unsigned int pos, unsigned int step);

/*
 * The part at elem_offset within a segment, or -1 when elem_offset/elem_count is not exactly
 * one non-empty part. Used to check a received datagram's placement.
 */
int
phub_ring_part_at(unsigned int racks, uint32_t elems, uint32_t elem_offset, uint32_t elem_count);

/* One iteration's progress; a segment holds two (by iteration parity), see below. */
struct phub_ring_round {
	uint32_t iteration;
	bool active;		/* this round holds `iteration` */
	bool local;		/* the rack sum is in sum[] */
	bool complete;		/* every part of sum[] is the sum over all racks */
	uint8_t retries;	/* retransmissions since the last ACK, for the back-off */
	uint32_t received;	/* steps whose part came from pos-1 (reduce: in inbox until applied) */
	uint32_t applied;	/* reduce steps added to sum[]; gather steps stored in sum[] */
	uint32_t sent;		/* steps sent at least once */
	uint32_t acked;		/* steps pos+1 acknowledged */
	uint32_t held;		/* steps ready to go, held back by the link's window */
	uint32_t resent;	/* sent steps retransmitted since, not yet acknowledged */
	uint64_t rto_deadline_ns;	/* retransmit the unacknowledged sent steps after this */
	uint64_t timer_ns;	/* when that timer (re)started: an ACK's round-trip sample */
	/* Each step's place in the link's send order at its last transmission (window.tx_seq). */
	uint32_t tx_seq[PHUB_RING_MAX_STEPS];
};

/*
 * One segment's ring state. Two rounds, by iteration parity, because pos+1 may still need a
 * retransmission of iteration i's parts after this PBox's own rack has moved on to i+1 (pos
 * finishes i when it has every gather part, not when pos+1 does); by the time a round is
 * reused for i+2, pos+1 has provably received all of i (it finished i+1), so unacknowledged
 * sends of i are dropped then. For each round, sum holds the rack sum, then the partial and
 * complete sums of the parts; inbox holds reduce parts that arrived before the rack sum.
 */
struct phub_ring_seg {
	uint32_t next_iteration;	/* the rack sum phub_ring_local() expects next */
	uint32_t elems;			/* the segment's size, from its first round */
	/* PHUB_RING_SPLIT (phub_ring_seg_init()'s) or the part that is the whole segment. */
	uint8_t root;
	struct phub_ring_round round[2];
	float *sum[2];		/* elems floats each */
	float *inbox[2];	/* elems floats each */
};

/*
 * The send window of one ring link (this PBox to pos+1), shared by every segment of the job:
 * payload bytes sent once and not yet acknowledged may not exceed cwnd, so that a rack sum's
 * burst of steps cannot overflow the uplink's queue (a NIC ring, a rate-limited spine) and be
 * lost and sent again. A step that does not fit is held back (phub_ring_round.held) and goes
 * out when ACKs open the window (phub_ring_release() or phub_ring_poll()); a held step is not
 * sent, so it runs no timer and is never counted as a loss. One step always fits an empty
 * window, so the ring cannot stall. cwnd grows like TCP's (doubling per round trip below
 * ssthresh, then one step's bytes per window) up to max_bytes, and a retransmission timeout
 * halves it (once per RTO: the timeouts of one loss come together) down to min_bytes.
 * Atomic: every data lcore that owns chunks of the job sends on the link; a lost cwnd update
 * only skews the window, the in-flight and held counts stay exact.
 */
/* Send times kept by a window: a power of two above its datagrams in flight and resends. */
#define PHUB_RING_WINDOW_TIMES 1024

struct phub_ring_window {
	_Atomic uint64_t cwnd;		/* bytes allowed in flight */
	_Atomic uint64_t ssthresh;	/* slow start below it */
	/* Sent and not acknowledged: steps << PHUB_RING_WINDOW_STEP_SHIFT | payload bytes. */
	_Atomic uint64_t inflight;
	_Atomic uint64_t held;		/* steps held back, over every segment */
	_Atomic uint64_t cut_ns;	/* when cwnd was last halved */
	_Atomic uint64_t cuts;		/* how often */
	_Atomic uint64_t held_total;	/* steps ever held back */
	/*
	 * Loss detection by the order of ACKs (RACK, RFC 8985, counted in datagrams): every
	 * transmission on the link takes the next tx_seq; acked_seq is the highest one a RING_ACK
	 * answered (first transmissions only: a retransmitted step's ACK may answer either copy).
	 * The link is FIFO, so a step still unacknowledged while one sent PHUB_RING_REORDER
	 * datagrams after it was acknowledged is lost: it goes again at the next scan, without
	 * waiting for a timeout. The timeout then only covers a link that fell silent (a lost
	 * tail, a stalled neighbour), and a neighbour slowed down (a descheduled lcore, a queue)
	 * is no loss as long as its ACKs come in send order.
	 */
	_Atomic uint32_t tx_seq;
	_Atomic uint32_t acked_seq;
	_Atomic uint64_t fast_resends;	/* steps resent because later ones were acknowledged */
	_Atomic uint64_t timeouts;	/* rounds resent because the link fell silent */
	/*
	 * After a timeout, recovery as TCP's (RFC 5681 3.1, RFC 5682): the link resends one step,
	 * the oldest unacknowledged one of the round whose timer fired first (the probe), not all
	 * it holds in flight; no other round's timer resends before probe_ns, which backs off
	 * (probe_retries) until an ACK comes. The other steps sent before the timeout (tx_seq at
	 * most rto_seq) follow by the ACK clock: each ACK of a resent step gives credits for two
	 * more (slow start over what is missing). An ACK of a step sent once before the timeout
	 * shows the timeout spurious (a neighbour descheduled, its queue intact): recovery ends,
	 * the rest is acknowledged as it comes, nothing more is resent for that timeout. One sent
	 * after the timeout and acknowledged ends it as well (the ACKs' order finds the rest).
	 */
	_Atomic uint64_t probe_ns;	/* no probe before this */
	_Atomic uint32_t probe_retries;	/* probes since the last ACK: the back-off */
	_Atomic uint32_t rto_seq;	/* the send order at the last timeout */
	_Atomic bool recovering;	/* steps up to rto_seq are resent by credits */
	_Atomic int64_t credits;	/* resends the ACK clock allows now */
	_Atomic uint64_t spurious;	/* timeouts found spurious */
	/* What the probe's cut took (undone when the timeout proves spurious and no cut followed). */
	_Atomic uint64_t undo_cwnd, undo_ssthresh, undo_ceil, undo_hold_ns, undo_cuts;
	uint64_t min_bytes, max_bytes;	/* cwnd's bounds; max_bytes: the ceiling's floor */
	/*
	 * The ceiling the path allows (phub_ring_window_adapt(); max_bytes .. top_bytes, or
	 * max_bytes when not adapted). A queue that absorbs a descheduled sender's absence wants a
	 * deep window; a descheduled receiver or a shallow queue loses a deep one's bursts. So the
	 * ceiling is probed: after each ceiling's worth of bytes acknowledged with cwnd at it, it
	 * grows by an eighth while the least round trip of those bytes stayed within
	 * PHUB_RING_QDELAY_TARGET_NS of the link's least (no standing queue of the window's own
	 * making), and shrinks by an eighth past twice that; a loss takes it back to max_bytes
	 * and holds it there for PHUB_RING_CEIL_HOLD_NS (the delay rule of TCP Vegas and Swift,
	 * on the window's ceiling rather than the window itself, and one strike for a loss).
	 */
	_Atomic uint64_t ceil;
	uint64_t top_bytes;
	_Atomic uint64_t ceil_hold_ns;	/* no growth of ceil before this (a loss) */
	_Atomic uint64_t epoch_bytes;	/* acknowledged with cwnd at ceil, this epoch */
	_Atomic uint64_t epoch_rtt_ns;	/* the least round trip this epoch (UINT64_MAX: none) */
	_Atomic uint64_t min_rtt_ns;	/* the least round trip of the link (UINT64_MAX: none) */
	_Atomic uint64_t ceil_ups, ceil_downs;	/* how often ceil grew, shrank */
	_Atomic uint64_t epochs;	/* the ceiling's epochs so far */
	/* Each first transmission's send time, by tx_seq: a round trip per acknowledged datagram. */
	_Atomic uint64_t sent_ns[PHUB_RING_WINDOW_TIMES];
	_Atomic uint32_t sent_seq[PHUB_RING_WINDOW_TIMES];
};

enum {
	PHUB_RING_WINDOW_INIT = 64 * 1024,	/* a first window: 45 full datagrams */
	/*
	 * The ceiling: below the 512 frames of af_packet's ring and the 50 ms of a 100 Mbit/s
	 * tbf (625 kB) of the virtual multi-rack, above the bandwidth-delay product of a
	 * 10 Gbit/s link with a 200 us round trip.
	 */
	PHUB_RING_WINDOW_MAX = 256 * 1024,
	PHUB_RING_WINDOW_MIN = 32 * 1024,	/* 22 datagrams: a spurious timeout cannot starve it */
	/*
	 * Datagrams in flight at most, whatever their size: a queue counts frames (af_packet's
	 * ring holds 512), and with R = 3 and more a 256 kB window is more frames than that.
	 */
	PHUB_RING_WINDOW_MAX_STEPS = 256,
	PHUB_RING_WINDOW_STEP_SHIFT = 40,	/* inflight's packing */
	/*
	 * Datagrams sent after an unacknowledged one whose ACKs make it lost: the slack for the
	 * reordering of several data lcores sending on one link and handing received ones off
	 * (a burst each). At most half the datagrams of the step's size the window's ceiling
	 * holds (at least 3), so that a window of whole-MTU datagrams still finds losses by it.
	 */
	PHUB_RING_REORDER = 32,
	/*
	 * The adapted ceiling's top: 2 MiB, 236 whole-MTU datagrams (below the 256 a window
	 * holds), 17 ms at 1 Gbit/s (a third of the virtual spine's 50 ms tbf queue), 1.7 ms at
	 * 10 Gbit/s.
	 */
	PHUB_RING_WINDOW_TOP = 2048 * 1024,
};

/* Queueing delay the ring's window may add to the link's least round trip and still grow. */
#define PHUB_RING_QDELAY_TARGET_NS 5000000ull
/* After a loss, how long the window's ceiling stays at its floor: longer than a job's warm-up. */
#define PHUB_RING_CEIL_HOLD_NS 10000000000ull

/* A window of init_bytes within min_bytes .. max_bytes, nothing in flight or held. */
void
phub_ring_window_init(struct phub_ring_window *w, uint64_t init_bytes, uint64_t min_bytes,
		      uint64_t max_bytes);

/*
 * Let the window's ceiling adapt between its max_bytes and top_bytes by the round trips and
 * losses it sees (see phub_ring_window.ceil); top_bytes <= max_bytes keeps it constant.
 */
void
phub_ring_window_adapt(struct phub_ring_window *w, uint64_t top_bytes);

/* Payload bytes in flight; *steps (may be NULL) gets the datagrams. */
uint64_t
phub_ring_window_inflight(struct phub_ring_window *w, uint64_t *steps);

/* The ring of a job as one PBox sees it; constant over the job. */
struct phub_ring_params {
	uint16_t racks;		/* R, 2 .. PHUB_RING_MAX_RACKS */
	uint16_t pos;		/* this PBox's position, 0 .. R-1 */
	uint64_t rto_ns;	/* first retransmission timeout */
	uint64_t rto_max_ns;	/* ceiling of the exponential back-off */
	struct phub_ring_window *win;	/* the link's window; NULL: none, every step goes */
	bool unlinked;		/* no link to pos+1 yet: every ready step is held back */
	/*
	 * The newest RING_ACK from pos+1 (0: none yet). With a window, a round's timeout fires
	 * only once the link has also been silent for rto_ns: while ACKs come, a lost step is
	 * found by their order (phub_ring_window.acked_seq), and one not yet overtaken is queued.
	 */
	uint64_t heard_ns;
};

/* What the caller must do after an event: send these steps' parts, ACK, use the sum. */
struct phub_ring_out {
	uint32_t iteration;	/* the round the sends and `complete` belong to */
	uint32_t send_steps;	/* bit k: send step k's part (phub_ring_send_part) from sum */
	uint32_t resent_steps;	/* those of send_steps sent before (a retransmission) */
	const float *sum;	/* the round's sum buffer: parts to send, then the complete sum */
	bool complete;		/* sum holds the all-rack sum now: run the optimizer, once */
};

/* What a received RING_REDUCE or RING_GATHER calls for. */
enum phub_ring_verdict {
	PHUB_RING_TAKEN = 0,	/* new data, taken in: ACK it */
	PHUB_RING_DUPLICATE,	/* seen before (or an older iteration): ACK it again, nothing else */
	PHUB_RING_STEP,		/* step out of range, wrong opcode for it, or wrong part: drop */
	PHUB_RING_FUTURE,	/* beyond the next iteration: drop, the sender retransmits */
	PHUB_RING_STALE,	/* older than the previous iteration: drop (no sender can need it) */
};

/*
 * Start a segment at first_iteration (0, or the iteration a restored job resumes at). The
 * buffers are the caller's, elems floats each, never overlapping. Its root is PHUB_RING_SPLIT;
 * the caller may set seg->root before the segment's first event.
 */
void
phub_ring_seg_init(struct phub_ring_seg *seg, uint32_t first_iteration, float *sum0,
		   float *sum1, float *inbox0, float *inbox1);

/*
 * The rack sum of `iteration` is complete (rack_sum, elems floats): start the ring. Returns
 * 0, or -EALREADY when this iteration's rack sum was given before, -EINVAL when iteration is
 * not the segment's next one.
 */
int
phub_ring_local(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint32_t elems,
		uint32_t iteration, const float *rack_sum, uint64_t now_ns, struct phub_ring_out *out);

/*
 * A RING_REDUCE (reduce true) or RING_GATHER from pos-1 for `iteration` and `step`, carrying
 * elem_count little-endian floats (any alignment) at elem_offset of the segment.
 */
enum phub_ring_verdict
phub_ring_receive(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint32_t elems,
		  bool reduce, uint32_t iteration, uint32_t step, uint32_t elem_offset,
		  uint32_t elem_count, const void *payload, uint64_t now_ns,
		  struct phub_ring_out *out);

/*
 * A RING_ACK from pos+1. Returns true when it acknowledged a step sent and not acknowledged
 * before; the retransmission timer then restarts for what is still unacknowledged. rtt_ns
 * (may be NULL) gets a round-trip sample, or 0: the time since the timer started, when
 * nothing of the round was retransmitted since (Karn's rule: a retransmitted step's ACK
 * could answer either copy).
 */
bool
phub_ring_ack(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint32_t iteration,
	      uint32_t step, uint64_t now_ns, uint64_t *rtt_ns);

/*
 * Retransmissions due at now_ns: for each round whose timer expired (with a window: and the
 * link silent for an RTO), out[] gets the steps sent but not acknowledged (resent_steps), the
 * timer backs off and the window is halved; for a round whose steps later sends overtook
 * (phub_ring_window.acked_seq), those steps, and the window is halved (once per RTO); with
 * them, the held steps the window has room for now. Returns how many rounds have
 * something to send (0, 1 or 2); out must have room for 2.
 */
unsigned int
phub_ring_poll(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint32_t elems,
	       uint64_t now_ns, struct phub_ring_out out[2]);

/*
 * The held steps the window has room for now, without the retransmissions: as
 * phub_ring_poll(). Returns how many rounds have something to send.
 */
unsigned int
phub_ring_release(struct phub_ring_seg *seg, const struct phub_ring_params *p, uint64_t now_ns,
		  struct phub_ring_out out[2]);

/* True when a round of the segment holds steps back. */
static inline bool
phub_ring_holds(const struct phub_ring_seg *seg)
{
	return (seg->round[0].held | seg->round[1].held) != 0;
}

/* True when every round's sends are acknowledged (nothing to retransmit). */
bool
phub_ring_idle(const struct phub_ring_seg *seg);

#endif /* PHUB_RING_H */
