#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Soak: jobs join and leave one PBox again and again (two phub-bench jobs at a time, a new job
# name each round), and after every round, once nothing is in flight: every model exact, no job
# left on the PBox, its DPDK heap back to the bytes and blocks it had before the first job, its
# resident memory flat after the first round, and its counters consistent (pushes = workers x
# segments optimized; segments optimized and pushes grown by exactly what the round's jobs did).
#
#                      R-tor: bridge br0
#          +--------------+-----------+-----------+-----------+
#         tp0            tw1         tw2         tw3         tw4
#          |              |           |           |           |
#   R-pbox: phub-pbox    R-w1        R-w2        R-w3        R-w4
#                        job "a" of each round    job "b" of each round
#
# usage: soak.sh VIRTUAL_RACK PHUB_PBOX PHUB_BENCH [--rounds N | --duration SECONDS]
# The default, 6 rounds, is the CI variant (about half a minute); the long one is
#   sudo tests/integration/soak.sh scripts/virtual-rack build/app/pbox/phub-pbox \
#        build/app/phub-bench/phub-bench --duration 180
# Exits 77 with the reason when it cannot run here (not root, no /dev/net/tun).
set -uo pipefail

vrack=$1
pbox_bin=$2
bench_bin=$3
shift 3
rounds=6
duration=0
while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--duration) duration=$2; rounds=1000000; shift 2 ;;
	*)
		echo "usage: soak.sh VIRTUAL_RACK PHUB_PBOX PHUB_BENCH [--rounds N | --duration S]"
		exit 2
		;;
	esac
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/rack_lib.sh
. "$here/rack_lib.sh"
lib_init soak

# Both jobs: 2 workers, SGD; a, 6 keys of 20,000 elements (342 segments); b, the mixed layout
# of odd key sizes (200 segments). 5 iterations each, plus the initial-model round.
mixed_layout=$tmp/mixed.json
printf '[1, 3, 7, 351, 353, 1000, 8096, 8097, 50000, 17]\n' >"$mixed_layout"
iterations=5

# state OUT: what the PBox says now: stats, jobs, heap, and its resident set in kB.
state()
{
	telemetry "$1" /phub/stats /phub/jobs /eal/heap_info,0 || fail "dpdk-telemetry.py failed"
	local rss
	rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$(cat "/run/phub-vrack/$rack/pbox.pid")/status")
	phubrack json-edit "$1" "c[\"rss_kb\"] = int(\"$rss\")"
}

rack_up 4
netns_alias "$rack-jb" 3 4
state "$tmp/s0.json"
start=$SECONDS
round=0
while [ "$round" -lt "$rounds" ]; do
	if [ "$duration" -gt 0 ] && [ $((SECONDS - start)) -ge "$duration" ]; then
		break
	fi
	round=$((round + 1))
	bench_bg "$tmp/a$round.json" 2 "$rack-w" --job "soak-$round-a" --nonce "$((round * 7919))" \
		--keys 6 --key-elems 20000 --optimizer sgd --iterations "$iterations"
	bench_bg "$tmp/b$round.json" 2 "$rack-jb" --job "soak-$round-b" \
		--nonce "$((round * 104729))" --layout "$mixed_layout" --optimizer sgd \
		--iterations "$iterations"
	bench_wait
	exact "$tmp/a$round.json" "$tmp/b$round.json"
	# LEAVE is answered before the job is freed: give the main lcore a moment.
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		state "$tmp/s$round.json"
		phubrack holds 't["/phub/jobs"] == {}' "$tmp/s$round.json" && break
		sleep 0.2
	done
	python3 - "$tmp/s0.json" "$tmp/s$((round - 1)).json" "$tmp/s$round.json" "$round" \
		"$iterations" <<'PY' || fail "round $round: the PBox is not back where it was"
import json, sys
first, prev, now = (json.load(open(f)) for f in sys.argv[1:4])
rnd, iters = int(sys.argv[4]), int(sys.argv[5])
st, h0, h = now["/phub/stats"], first["/eal/heap_info"], now["/eal/heap_info"]
# docs/layout.md at MTU 1500, fp32: segments of 352 elements, chunks of 23 segments.
def key_segments(n, seg=352, chunk=23 * 352):
    return sum(-(-min(chunk, n - o) // seg) for o in range(0, n, chunk))
mixed = [1, 3, 7, 351, 353, 1000, 8096, 8097, 50000, 17]
segments = (6 * key_segments(20000) + sum(map(key_segments, mixed))) * (iters + 1)
grown = st["segments_optimized"] - prev["/phub/stats"]["segments_optimized"]
pushed = st["pushes"] - prev["/phub/stats"]["pushes"]
checks = {
    "no job left": now["/phub/jobs"] == {},
    "heap bytes as at start": h["Alloc_size"] == h0["Alloc_size"],
    "heap blocks as at start": h["Alloc_count"] == h0["Alloc_count"],
    "pushes = 2 x segments optimized": st["pushes"] == 2 * st["segments_optimized"],
    f"segments optimized grew by {segments}": grown == segments,
    f"pushes grew by {2 * segments}": pushed == 2 * segments,
    "nothing lost in the PBox": st["tx_dropped"] == 0 and st["encode_errors"] == 0,
}
# Resident memory: pages of the EAL's memory and of the pools are touched once; after the
# first round it must not keep growing (1 MB of slack for the allocator and telemetry).
if rnd > 1:
    checks["resident memory flat"] = now["rss_kb"] <= prev["rss_kb"] + 1024
bad = [k for k, ok in checks.items() if not ok]
print("round %d: heap %d B in %d blocks (start %d B in %d), RSS %d kB (start %d), "
      "segments optimized %d (+%d), pushes %d (+%d)%s" % (
          rnd, h["Alloc_size"], h["Alloc_count"], h0["Alloc_size"], h0["Alloc_count"],
          now["rss_kb"], first["rss_kb"], st["segments_optimized"], grown, st["pushes"],
          pushed, "" if not bad else "  WRONG: " + ", ".join(bad)))
sys.exit(1 if bad else 0)
PY
	[ $failed -eq 0 ] || break
done
echo "soak: $round rounds, $((round * 2)) jobs in $((SECONDS - start)) s"
[ "$round" -ge 2 ] || fail "fewer than 2 rounds ran"

rack_down_check
[ $failed -eq 0 ] && echo "PASS: soak"
exit $failed
