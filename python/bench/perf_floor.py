# SPDX-License-Identifier: BSD-3-Clause
"""Where the machine's CPU went during one timed run of scripts/bench-ring, from its system-wide
profile (PHUB_BENCH_RING_PERF_DIR): the run's processes' kernel work for the frames their traffic
makes (sockets, af_packet, veths, bridges, routing, the spine's qdisc), the af_packet PMD, the
PBoxes' own code, the workers' user space, and what else ran, in CPU seconds per iteration.

usage: python3 perf_floor.py DIR TAG [--hz 499] [-v]

DIR/TAG.data is `perf record -a -g -k CLOCK_MONOTONIC -F HZ` (cpu-clock: every CPU is sampled
HZ times a second, idle or not), DIR/TAG.json the run's report with timed_from_monotonic_s and
timed_to_monotonic_s, DIR/TAG.pids the run's process ids. Only samples inside the timed span
count. A kernel sample is network work when any kernel frame of its call chain is one of the
network stack's (NET below); the call chains of the kernel are exact (frame pointers / ORC)."""
import json
import re
import subprocess
import sys
from collections import Counter

# Kernel functions that only the network path runs: a sample with one of them on its stack is
# work the kernel does for a frame (send, forward, deliver) or a socket call.
NET = re.compile(r"^(tpacket_|packet_|__packet_|__dev_direct_xmit|dev_hard_start_xmit|veth_|"
                 r"br_|__br_|nf_|nf_hook|__netif_|netif_|net_rx_action|process_backlog|"
                 r"__napi|napi_|ip_|__ip_|ipv4_|udp|__udp|tcp_|__tcp_|inet_|sock_|__sock_|"
                 r"sk_|skb_|__skb_|kfree_skb|consume_skb|alloc_skb|__alloc_skb|__dev_queue_xmit|"
                 r"dev_queue_xmit|sch_direct_xmit|__qdisc|qdisc_|tbf_|fib_|neigh_|dst_|"
                 r"csum_|__sys_sendto|__sys_recvfrom|__sys_sendmsg|__sys_recvmsg|"
                 r"__sys_sendmmsg|__sys_recvmmsg|__x64_sys_send|__x64_sys_recv|"
                 r"___sys_sendmsg|___sys_recvmsg|dev_forward_skb|__dev_forward_skb)")


# Kernel functions whose share of the run's network samples (with them on the stack) is shown.
MARKS = ("br_nf_", "nf_hook_slow", "br_handle_frame", "tpacket_snd", "skb_copy_ubufs",
         "__dev_direct_xmit", "tbf_", "ip_forward", "udp_sendmsg", "udp_recvmsg",
         "__udp4_lib_rcv", "tpacket_rcv", "csum_partial", "net_rx_action", "tcp_")


def samples(data, t0, t1):
    """(pid, comm, [(sym, dso), ...] innermost first) of every sample in [t0, t1]."""
    out = subprocess.run(["perf", "script", "-i", data, "--time", "%.6f,%.6f" % (t0, t1),
                          "-F", "comm,pid,time,ip,sym,dso"], capture_output=True, text=True,
                         check=True).stdout
    return parse(out)


def parse(out):
    """The samples of `perf script -F comm,pid,time,ip,sym,dso` output, as samples() says."""
    cur = None
    for line in out.splitlines():
        if not line.strip():
            if cur:
                yield cur
            cur = None
            continue
        if not line.startswith(("\t", " ")) or cur is None:
            m = re.match(r"^(.*?)\s+(\d+)\s+[\d.]+:", line)
            if m:
                if cur:
                    yield cur
                cur = (int(m.group(2)), m.group(1).strip(), [])
                continue
        if cur is not None:
            m = re.match(r"^\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
            if m:
                cur[2].append((re.sub(r"\+0x[0-9a-f]+$", "", m.group(1)), m.group(2)))
    if cur:
        yield cur


def classify(pid, comm, chain, mine, pboxes):
    """The category of one sample."""
    kernel = chain and chain[0][1].startswith("[kernel")
    net = kernel and any(d.startswith("[kernel") and NET.match(s) for s, d in chain)
    if pid == 0 or comm.startswith("ksoftirqd"):
        # Softirqs run in the idle task or ksoftirqd: whose frames they carry is not known.
        return "kernel net, softirq in idle or ksoftirqd" if net else "idle or ksoftirqd"
    who = "pbox" if pid in pboxes else "worker" if pid in mine else "other"
    if kernel:
        if who == "other":
            return "kernel net, other processes" if net else "other processes"
        return ("kernel net, %s" % who) if net else ("kernel other, %s" % who)
    if who == "other":
        return "other processes"
    dso = chain[0][1] if chain else ""
    if who == "pbox":
        if "af_packet" in dso:
            return "pbox: af_packet PMD"
        if "libc" in dso and re.match(r"__mem(move|cpy)", chain[0][0]):
            return "pbox: memcpy (PMD copies and PHub's)"
        if "phub-pbox" in dso:
            return "pbox: PHub's own code"
        return "pbox: other user (DPDK, libc, vdso)"
    return "workers: user"


def usage(code):
    print("usage: python3 perf_floor.py DIR TAG [--hz HZ] [-v]\n"
          "  DIR: a bench-ring PHUB_BENCH_RING_PERF_DIR; TAG: one run's name in it (its\n"
          "  TAG.data, TAG.json and TAG.pids); --hz: perf's sampling rate (default 499);\n"
          "  -v: the top leaf functions of each category",
          file=sys.stderr if code else sys.stdout)
    sys.exit(code)


def main():
    args = sys.argv[1:]
    hz = 499
    if "-h" in args or "--help" in args:
        usage(0)
    if "-v" in args:
        args.remove("-v")
    if "--hz" in args:
        i = args.index("--hz")
        hz = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        usage(2)
    d, tag = args[0], args[1]
    text = open("%s/%s.json" % (d, tag)).read()
    try:
        rep = json.loads(text)  # phub-bench: one object
    except ValueError:
        rep = {}
        for line in text.splitlines():  # gloo_allreduce.py: rank 0's lines
            if line.startswith("{"):
                rep.update(json.loads(line))
    if rep.get("per_worker"):  # phub-bench: the span of every worker's timed iterations
        w = rep["per_worker"]
        t0 = min(x["timed_from_monotonic_s"] for x in w)
        t1 = max(x["timed_to_monotonic_s"] for x in w)
        iterations = min(x["timed_iterations"] for x in w)
    else:
        t0, t1 = rep["timed_from_monotonic_s"], rep["timed_to_monotonic_s"]
        iterations = rep["iterations"]
    mine, pboxes = set(), set()
    for line in open("%s/%s.pids" % (d, tag)):
        if line.strip().isdigit():
            mine.add(int(line))
    # The PBoxes: the processes of the run whose samples are in phub-pbox.
    c = Counter()
    total = 0
    rows = list(samples("%s/%s.data" % (d, tag), t0, t1))
    for pid, comm, chain in rows:
        if pid in mine and any("phub-pbox" in dso for _, dso in chain):
            pboxes.add(pid)
    leaves = {}
    marks = Counter()
    for pid, comm, chain in rows:
        k = classify(pid, comm, chain, mine, pboxes)
        c[k] += 1
        total += 1
        leaves.setdefault(k, Counter())[chain[0][0] if chain else "?"] += 1
        if k.startswith("kernel net, ") and k != "kernel net, other processes":
            syms = {f for f, _ in chain}
            for m in MARKS:
                if any(f.startswith(m) for f in syms):
                    marks[m] += 1
    span = t1 - t0
    ncpu = total / (hz * span) if span > 0 else 0
    print("%s: timed span %.3f s, %d iterations, %d samples (%.2f CPUs sampled at %d Hz)" % (
        tag, span, iterations, total, ncpu, hz))
    for k, n in sorted(c.items(), key=lambda kv: -kv[1]):
        print("  %-42s %6d samples %6.1f%%  %.3f CPU s an iteration" % (
            k, n, 100.0 * n / total, n / hz / iterations))
    if "-v" in sys.argv:
        for k, lc in leaves.items():
            print("  %s: %s" % (k, ", ".join("%s %d" % kv for kv in lc.most_common(8))))
    print("  the run's kernel network samples with these on the stack (CPU s an iteration): " +
          ", ".join("%s %.3f" % (m, marks[m] / hz / iterations) for m in MARKS))
    net = sum(n for k, n in c.items() if k in ("kernel net, pbox", "kernel net, worker"))
    pmd = c["pbox: af_packet PMD"]
    mem = c["pbox: memcpy (PMD copies and PHub's)"]
    soft = c["kernel net, softirq in idle or ksoftirqd"]
    mine_all = sum(n for k, n in c.items() if not k.startswith(("other", "idle", "kernel net, o")))
    print("  floor (the run's kernel network work): %.3f CPU s an iteration; with the PMD's "
          "own code %.3f; with every memcpy of the PBoxes %.3f; with softirqs in idle or "
          "ksoftirqd %.3f" % (net / hz / iterations, (net + pmd) / hz / iterations,
                              (net + pmd + mem) / hz / iterations,
                              (net + pmd + mem + soft) / hz / iterations))
    print("  the run's processes in all (with softirqs in idle or ksoftirqd): %.3f CPU s an "
          "iteration; the span %.3f s an iteration" % (mine_all / hz / iterations,
                                                       span / iterations))


if __name__ == "__main__":
    main()
