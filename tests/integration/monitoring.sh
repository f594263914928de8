#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The monitoring files agree with the exporter: promtool checks the alerting rules and runs
# their unit tests (monitoring/phub-alerts.test.yml); the Grafana dashboard is valid JSON and
# every metric its queries and the rules name is one phub-exporter serves (--list-metrics).
# Then phub-exporter --once against a fake PBox (a telemetry socket with canned answers):
# each counter as name_total, gauges, labels and units as docs/operations.md lists them.
#
# Usage: monitoring.sh SOURCE_DIR

set -euo pipefail

src=$(realpath "$1")
exporter=$src/app/phub-exporter/phub-exporter

if ! command -v promtool >/dev/null; then
	echo "SKIP: no promtool (Debian's prometheus)"
	exit 77
fi
if ! /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null; then
	echo "SKIP: no python3-prometheus-client"
	exit 77
fi

promtool check rules "$src/monitoring/phub-alerts.yml"
(cd "$src/monitoring" && promtool test rules phub-alerts.test.yml)
"$exporter" --version | grep -q '^phub-exporter ' || { echo "FAIL: phub-exporter --version"; exit 1; }

"$exporter" --list-metrics | /usr/bin/python3 -c '
import json, re, sys
served = set(sys.stdin.read().split())
src = sys.argv[1]

def metrics(expr):
    """The metric names of a PromQL expression: label matchers, groupings and legends out."""
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    return set(re.findall(r"\bphub_[a-z0-9_]+", expr))

dash = json.load(open(src + "/monitoring/phub-dashboard.json"))
exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
assert len(dash["panels"]) >= 10 and all(p.get("targets") for p in dash["panels"]), \
    "a panel without a query"
for v in dash["templating"]["list"]:
    exprs.append(v["query"].replace("label_values(", "").split(",")[0])
rules = open(src + "/monitoring/phub-alerts.yml").read()
rule_exprs = re.findall(r"expr: >-\n((?:\s{10}.*\n)+)|expr: (.*)", rules)
rule_exprs = [a or b for a, b in rule_exprs]
bad = {}
for where, es in (("dashboard", exprs), ("alerts", rule_exprs)):
    named = set().union(*(metrics(e) for e in es))
    if not named:
        bad[where] = "names no metric"
    unknown = sorted(named - served)
    if unknown:
        bad[where] = unknown
    print("%s: %d queries, %d metrics, all served: %s" % (where, len(es), len(named),
                                                         not unknown))
if bad:
    print("FAIL: not served by phub-exporter:", bad)
    sys.exit(1)
' "$src"
# The exporter against a fake PBox: a SOCK_SEQPACKET socket that speaks DPDK's telemetry
# protocol (a JSON greeting, then one answer per command) with canned answers.
work=$(mktemp -d /tmp/phub-monitoring.XXXXXX)
fake=
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	if [ -n "$fake" ]; then kill "$fake" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
/usr/bin/python3 - "$work/sock" <<'PY' &
import json, os, socket, sys, threading
answers = {
    "/phub/stats": {"version": "0.1.0", "kernels": "avx2", "uptime_ms": 18635,
                    "rx_packets": 975137, "pushes": 974148, "aggregation_ns": 1045306652,
                    "jobs_failed": 2, "model_payloads_inline": 7,
                    "drops": {"future_iteration": 649, "bad_magic": 20}},
    "/phub/lcores": {"1": {"pushes": 487032, "busy_ns": 2106457112, "loops": 1476298},
                     "2": {"pushes": 487116, "busy_ns": 5, "loops": 9}},
    "/phub/ports": {"p0": {"device": "net_tap0", "ipv4": "10.1.0.1", "steering": "tap_bpf",
                           "mtu": 1500, "link_up": 0, "imissed": 3, "rx_nombuf": 4}},
    "/phub/jobs": {"7": {"id": 7, "name": "bert large", "world_size": 4, "joined": 4,
                         "pushes": 1234, "iterations_done": 5}},
    "/phub/ring": {"jobs": {"7": {"name": "bert large", "linked": 0,
                                  "prev": {"rack": "r1", "last_heard_ms": 2500},
                                  "next": {"rack": "r2", "last_heard_ms": 10}}},
                   "to_next_bytes": 99},
    "/phub/health": {"status": "degraded", "level": 1, "reasons": ["port p0: link down"],
                     "watchdog_pings": 3},
}
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(sys.argv[1])
s.listen(4)
def serve(c):
    c.send(json.dumps({"version": "DPDK 22.11", "pid": os.getpid(),
                       "max_output_len": 16384}).encode())
    while True:
        cmd = c.recv(1024).decode()
        if not cmd:
            return
        c.send(json.dumps({cmd: answers.get(cmd)}).encode())
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
PY
fake=$!
for _ in $(seq 50); do [ -S "$work/sock" ] && break; sleep 0.1; done
"$exporter" --socket "$work/sock" --once >"$work/metrics" ||
	{ cat "$work/metrics"; echo "FAIL: --once against the fake PBox"; exit 1; }
missing=0
while IFS= read -r want; do
	grep -qxF "$want" "$work/metrics" || { echo "FAIL: no line: $want"; missing=1; }
done <<'LINES'
phub_up 1.0
phub_pushes_total 974148.0
phub_aggregation_seconds_total 1.045306652
phub_jobs_failed_total 2.0
phub_drops_total{reason="bad_magic"} 20.0
phub_drops_total{reason="future_iteration"} 649.0
phub_model_payloads_total{how="inline"} 7.0
phub_lcore_busy_seconds_total{lcore="1"} 2.106457112
phub_lcore_loops_total{lcore="2"} 9.0
phub_port_imissed_total{port="p0"} 3.0
phub_port_rx_nombuf_total{port="p0"} 4.0
phub_port_link_up{port="p0"} 0.0
phub_port_info{device="net_tap0",ipv4="10.1.0.1",port="p0",steering="tap_bpf"} 1.0
phub_job_pushes_total{phub_job="bert large"} 1234.0
phub_job_iterations_total{phub_job="bert large"} 5.0
phub_job_world_size{phub_job="bert large"} 4.0
phub_ring_linked{phub_job="bert large"} 0.0
phub_ring_peer_silence_seconds{phub_job="bert large",rack="r1",side="prev"} 2.5
phub_ring_to_next_bytes_total 99.0
phub_health_status 1.0
phub_watchdog_pings_total 3.0
# TYPE phub_pushes_total counter
# TYPE phub_port_link_up gauge
LINES
[ "$missing" = 0 ] || { cat "$work/metrics"; exit 1; }
echo "phub-exporter against a fake telemetry socket: $(grep -vc '^#' "$work/metrics") samples as expected"
# A PBox that does not answer: phub_up 0 and exit 1.
kill "$fake"
wait "$fake" 2>/dev/null || true
fake=
rc=0
"$exporter" --socket "$work/sock" --once >"$work/down" || rc=$?
if [ "$rc" != 1 ] || ! grep -qx "phub_up 0.0" "$work/down"; then
	echo "FAIL: without a PBox: exit $rc, $(cat "$work/down")"
	exit 1
fi
echo "without a PBox: phub_up 0, exit 1"
echo PASS
