#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Debian's real prometheus scrapes phub-exporter of a running PBox: a phub-bench job's pushes
# rise in prometheus while the job runs and end at the exact count; bad datagrams sent to the
# PBox show as a drop reason; the job's series are labelled by phub_job, the lcores' by lcore;
# the tap's link down shows as phub_port_link_up 0 and /phub/health failing.
#
#                      R-tor: bridge br0
#          +--------------+-----------+
#         tp0            tw1         tw2
#          |              |           |
#   R-pbox: pt0 - phub-pbox           R-w1, R-w2: phub-bench ranks; R-w1: udp_send (bad datagrams)
#           lo: phub-exporter 127.0.0.1:9470 <-- prometheus 127.0.0.1:9090 (scrape 0.5 s)
#                 | /run/dpdk/phub-R/dpdk_telemetry.v2      ^ this script: its HTTP API
#
# usage: exporter_rack.sh VIRTUAL_RACK PHUB_PBOX PHUB_BENCH UDP_SEND SOURCE_DIR [RACK_NAME]
# Exits 77 with the reason when it cannot run here.
set -uo pipefail

vrack=$1
pbox_bin=$2
bench_bin=$3
udp_send=$4
src=$(realpath "$5")
rack=${6:-pmx97}
id=97
server="10.$id.0.1"
exporter=$src/app/phub-exporter/phub-exporter
tmp=$(mktemp -d)
failed=0
exporter_pid=
prom_pid=
bench_pid=
bench_pid1=

if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: the virtual rack needs root (network namespaces)"
	exit 77
fi
if [ ! -c /dev/net/tun ]; then
	echo "SKIP: no /dev/net/tun for net_tap"
	exit 77
fi
if ! command -v prometheus >/dev/null; then
	echo "SKIP: no prometheus (Debian's prometheus package)"
	exit 77
fi
if ! /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null; then
	echo "SKIP: no python3-prometheus-client"
	exit 77
fi

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup()
{
	local pid
	for pid in $bench_pid $bench_pid1 $prom_pid $exporter_pid; do
		kill -TERM "$pid" 2>/dev/null
	done
	for pid in $bench_pid $bench_pid1 $prom_pid $exporter_pid; do
		wait "$pid" 2>/dev/null
	done
	"$vrack" down --name "$rack" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT

fail()
{
	echo "FAIL: $*"
	failed=1
}

in_pbox() { ip netns exec "$rack-pbox" "$@"; }

# query PROMQL: the first sample's value of an instant query ("" when there is none).
query()
{
	in_pbox /usr/bin/python3 - "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url = "http://127.0.0.1:9090/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[1]})
r = json.load(urllib.request.urlopen(url, timeout=5))
res = r["data"]["result"]
print(res[0]["value"][1] if res else "")
PY
}

# wait_for PROMQL SECONDS: until the query has a sample of value > 0.
wait_for()
{
	local v
	for _ in $(seq $(($2 * 4))); do
		v=$(query "$1" 2>/dev/null)
		[ -n "$v" ] && awk -v v="$v" 'BEGIN { exit !(v > 0) }' && return 0
		sleep 0.25
	done
	return 1
}

"$vrack" down --name "$rack" >/dev/null 2>&1
"$vrack" up --name "$rack" --id "$id" --workers 2 >"$tmp/up.log" 2>&1 ||
	{ cat "$tmp/up.log"; echo "FAIL: the rack did not come up"; exit 1; }
"$vrack" pbox-start --name "$rack" --bin "$pbox_bin" >"$tmp/pbox-start.log" 2>&1 ||
	{ cat "$tmp/pbox-start.log"; echo "FAIL: the PBox did not start"; exit 1; }
in_pbox ip link set lo up

# The exporter and prometheus on the PBox namespace's loopback: no port another test holds.
in_pbox "$exporter" --file-prefix "phub-$rack" --listen 127.0.0.1:9470 \
	>"$tmp/exporter.log" 2>&1 &
exporter_pid=$!
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
  evaluation_interval: 1s
rule_files:
  - $src/monitoring/phub-alerts.yml
scrape_configs:
  - job_name: phub
    static_configs:
      - targets: ['127.0.0.1:9470']
EOF
in_pbox prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
	--web.listen-address=127.0.0.1:9090 >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!
if ! wait_for 'phub_up{job="phub"}' 30; then
	tail -n 5 "$tmp/prometheus.log" "$tmp/exporter.log"
	echo "FAIL: prometheus never saw phub_up 1 from the exporter"
	exit 1
fi
pushes0=$(query 'phub_pushes_total')
echo "prometheus scrapes the exporter: phub_up 1, phub_pushes_total $pushes0"

# The job: 2 ranks, 4 keys of one segment, 300 iterations (301 rounds with the initial one),
# one process per rank: rank 0 holds still 2 s after iteration 2 and rank 1 2 s after
# iteration 150, so that scrapes see the job's count twice, well apart, whatever the speed.
ranks=2 keys=4 rounds=301
bench_rank()
{
	timeout 120 "$bench_bin" --server "$server" --workers "$ranks" --rank "$1" \
		--netns-prefix "$rack-w" --job promjob --keys "$keys" --key-elems 300 \
		--iterations $((rounds - 1)) --pause-at "$2" --json --quiet --timeout 60 \
		>"$tmp/r$1.json" 2>"$tmp/r$1.err"
}
bench_rank 0 2:2000 &
bench_pid=$!
bench_rank 1 150:2000 &
bench_pid1=$!
wait_for 'phub_job_pushes_total{phub_job="promjob"}' 20 ||
	fail "no phub_job_pushes_total{phub_job=\"promjob\"} while the job ran"
for r in 0 1; do
	rc=0
	if [ "$r" = 0 ]; then wait "$bench_pid" || rc=$?; else wait "$bench_pid1" || rc=$?; fi
	[ "$rc" = 0 ] || { tail -n 5 "$tmp/r$r.err"; fail "phub-bench rank $r exited $rc"; }
done
bench_pid=
bench_pid1=
sleep 1.5
# What prometheus stored of the job: its pushes rose between scrapes, and the PBox's total
# moved by exactly what the ranks sent (ranks x keys x rounds).
first=$(query 'min_over_time(phub_job_pushes_total{phub_job="promjob"}[2m])')
most=$(query 'max_over_time(phub_job_pushes_total{phub_job="promjob"}[2m])')
samples=$(query 'count_over_time(phub_job_pushes_total{phub_job="promjob"}[2m])')
pushes1=$(query 'phub_pushes_total')
echo "job promjob in prometheus: $samples scrapes, from $first to $most pushes; phub_pushes_total" \
	"$pushes0 -> $pushes1"
awk -v a="$first" -v b="$most" 'BEGIN { exit !(a > 0 && b > a) }' ||
	fail "the job's pushes did not rise in prometheus ($first, then at most $most)"
awk -v a="$pushes0" -v b="$pushes1" -v n=$((ranks * keys * rounds)) 'BEGIN { exit !(b - a == n) }' ||
	fail "phub_pushes_total moved by $pushes1 - $pushes0, want $((ranks * keys * rounds))"
jobs_ended=$(query 'phub_jobs_ended_total')
[ "${jobs_ended%.*}" -ge 1 ] 2>/dev/null || fail "phub_jobs_ended_total $jobs_ended after the job"
lcores=$(query 'count(phub_lcore_loops_total)')
[ "$lcores" = 2 ] || fail "phub_lcore_loops_total has $lcores lcores, want 2"

# Bad datagrams: 64 bytes of zeros to a data lcore's UDP port are no PHub header.
drops0=$(query 'sum(phub_drops_total)')
ip netns exec "$rack-w1" "$udp_send" -d "$server" -p 47001 -n 20 -s 64 >"$tmp/udp.log" 2>&1 ||
	fail "udp_send: $(cat "$tmp/udp.log")"
sleep 1.5
drops=$(in_pbox /usr/bin/python3 -c '
import json, urllib.request
r = json.load(urllib.request.urlopen("http://127.0.0.1:9090/api/v1/query?query=phub_drops_total", timeout=5))
print(" ".join("%s=%s" % (s["metric"]["reason"], s["value"][1]) for s in r["data"]["result"]))')
drops1=$(query 'sum(phub_drops_total)')
echo "drops by reason in prometheus after 20 bad datagrams: $drops"
awk -v a="${drops0:-0}" -v b="$drops1" 'BEGIN { exit !(b - a >= 20) }' ||
	fail "phub_drops_total rose by $drops1 - ${drops0:-0} after 20 bad datagrams, want >= 20"
# No PHub magic number: the reason says so.
[ "$(query 'phub_drops_total{reason="bad_magic"}')" = 20 ] ||
	fail "phub_drops_total{reason=\"bad_magic\"} is not 20"
# The tap's link down (its kernel side): the port's link down and /phub/health failing (the
# PBox's only port), in prometheus; up again, ok.
ip -n "$rack-pbox" link set pt0 down
if wait_for 'phub_port_link_up == bool 0' 15 && wait_for 'phub_health_status == bool 2' 10; then
	echo "link down: phub_port_link_up 0, phub_health_status 2 (failing: no port up)"
else
	fail "a port's link down is not seen as phub_port_link_up 0 and health failing"
fi
ip -n "$rack-pbox" link set pt0 up
{ wait_for 'phub_port_link_up' 15 && wait_for 'phub_health_status == bool 0' 10; } ||
	fail "the link up again is not seen as health ok"
# The alerting rules load in this prometheus too.
in_pbox /usr/bin/python3 -c '
import json, sys, urllib.request
r = json.load(urllib.request.urlopen("http://127.0.0.1:9090/api/v1/rules", timeout=5))
n = sum(len(g["rules"]) for g in r["data"]["groups"])
print("prometheus loaded %d alerting rules" % n)
sys.exit(0 if n >= 10 else 1)' || fail "prometheus did not load monitoring/phub-alerts.yml"

[ "$failed" = 0 ] && echo PASS
exit "$failed"
