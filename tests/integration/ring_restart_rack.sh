#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A ring job survives a PBox restart (issue 25 item 3, docs/hierarchy.md "Failure behaviour"): a
# virtual multi-rack of 3 racks of 1 worker under 2% loss on every spine link, one ring job
# with a checkpoint every 2 iterations; rack 1's PBox is killed (SIGKILL) mid-training once a
# checkpoint of iteration >= 6 is on its disk, and started again on the same config. It restores
# the job from its newest checkpoint K and says so in its RING_HELLO; racks 0 and 2 go back to
# their own checkpoints of K (or, lacking it, to their newest before it, and rack 1 follows);
# every rank JOINs again, resumes after that checkpoint and ends with the model of an
# uninterrupted run, bit for bit (phub-bench's reference).
#
# usage: ring_restart_rack.sh VIRTUAL_RACK PHUB_PBOX PHUB_BENCH
# Exits 77 with the reason when it cannot run here (not root, no netns, no /dev/net/tun).
set -uo pipefail

vrack=$1
pbox_bin=$2
bench_bin=$3

if ! ip netns list >/dev/null 2>&1; then
	echo "SKIP: no network namespaces here (ip netns)"
	exit 77
fi
# shellcheck source=tests/integration/rack_lib.sh
. "$(dirname "$0")/rack_lib.sh"
lib_init ring-restart
# Its own name and ids (10.26 .. 10.29), apart from the other ring tests' (lib_init's).
rack=h25r
id=26
nonce=0x25c0ffee5eed4b31
state_root=${PHUB_VRACK_STATE_DIR:-/run/phub-vrack}
racks_spec="10.26.0.1:1,10.27.0.1:1,10.28.0.1:1"
ckpt_dir=$state_root/$rack.1/checkpoints

# rack_pbox R: start rack R's PBox on its config (again after a kill).
rack_pbox()
{
	"$vrack" pbox-start --name "$rack" --rack "$1" --bin "$pbox_bin" \
		>"$tmp/pbox-start-$1.log" 2>&1 ||
		{ cat "$tmp/pbox-start-$1.log"; echo "FAIL: rack $1's PBox did not start"; exit 1; }
}

# newest_ckpt: the iteration of rack 1's newest checkpoint of the job, -1 when none (the names
# are ring.<10 digits>.ckpt: the last in order is the newest).
newest_ckpt()
{
	local last
	last=$(find "$ckpt_dir" -maxdepth 1 -name 'ring.*.ckpt' 2>/dev/null | sort | tail -n 1)
	if [ -z "$last" ]; then
		echo -1
	else
		last=${last%.ckpt}
		echo $((10#${last##*.}))
	fi
}

"$vrack" down --name "$rack" >/dev/null 2>&1
"$vrack" up --name "$rack" --racks 3 --id "$id" --workers 1 --lcores 1 --memory-mb 512 \
	--ring-job "ring:$nonce" --spine-netem "loss 2%" >"$tmp/up.log" 2>&1 ||
	{ cat "$tmp/up.log"; echo "FAIL: the multi-rack did not come up"; exit 1; }
for r in 0 1 2; do
	phubrack config-edit "$state_root/$rack.$r/pbox.json" \
		"c['checkpoint']['interval_iterations'] = 2; c.setdefault('timeouts', {})['worker_dead_ms'] = 15000" ||
		{ echo "FAIL: editing rack $r's config"; exit 1; }
done
for r in 0 1 2; do
	rack_pbox "$r"
done
echo "[${SECONDS}s] 3 racks up, --servers $racks_spec"

timeout 150 "$bench_bin" --servers "$racks_spec" --netns-prefix "$rack.%r-w" --job ring \
	--nonce "$nonce" --json --quiet --timeout 100 --connect-timeout-ms 30000 --dead-ms 30000 \
	--keys 6 --key-elems 12000 --iterations 24 --optimizer sgd \
	>"$tmp/r.json" 2>"$tmp/r.err" &
bench_pid=$!
bench_pids+=("$bench_pid")
# Mid-training: once rack 1 has a checkpoint of iteration 6 or later (a minute at most).
until [ "$(newest_ckpt)" -ge 6 ] || ! kill -0 "$bench_pid" 2>/dev/null || [ "$SECONDS" -gt 60 ]; do
	sleep 0.05
done
kill -0 "$bench_pid" 2>/dev/null || fail "phub-bench ended before rack 1's PBox was killed"
killed_at=$(newest_ckpt)
pid=$(cat "$state_root/$rack.1/pbox.pid")
kill -KILL "$pid"
until ! kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
echo "[${SECONDS}s] rack 1's PBox killed; its newest checkpoint: iteration $killed_at"
cp "$state_root/$rack.1/pbox.log" "$tmp/pbox-1-before.log"
rack_pbox 1
wait "$bench_pid"
rc=$?
bench_pids=()
echo "[${SECONDS}s] phub-bench: exit $rc, $(phubrack brief ring "$tmp/r.json" 2>/dev/null)"
if [ "$rc" -ne 0 ]; then
	fail "phub-bench exited $rc"
	tail -n 5 "$tmp/r.err"
fi
phubrack expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]' 'r["reconnects"] >= 3' ||
	fail "the report does not hold: verified, bitwise, every rank JOINed again"
phubrack query '"workers went back to %s, rollbacks %s" % ([w["resumed_at"]
	for w in t["per_worker"]], t["rollbacks"])' "$tmp/r.json" 2>/dev/null
# Every rack went back to one checkpoint: the newest restore in each log names the same one.
bases=
for r in 0 1 2; do
	b=$(sed -nE 's/.*job ring \(id [0-9]+\) restored from .* ms: iteration ([0-9]+).*/\1/p' \
		"$state_root/$rack.$r/pbox.log" | tail -n 1)
	bases+="${bases:+ }${b:-none}"
done
echo "each rack's job restored at: $bases"
grep -h "ring peer rack1 is at its checkpoint" "$state_root/$rack".[02]/pbox.log
read -r b0 b1 b2 <<<"$bases"
[ "$b1" != none ] || fail "rack 1's PBox did not restore the ring job"
if [ "$b0" != "$b1" ] || [ "$b2" != "$b1" ]; then
	fail "the racks did not go back to one checkpoint: $bases"
fi
for r in 0 1 2; do
	"$vrack" pbox-stop --name "$rack" --rack "$r" >/dev/null 2>&1 ||
		fail "rack $r's PBox did not stop on SIGTERM"
done

if [ "$failed" -ne 0 ]; then
	# The racks' logs, each line named by its file.
	grep -H -v 'lcore [0-9]*: serving' "$state_root/$rack".*/pbox.log | tail -n 60
	exit 1
fi
echo "PASS: ring-restart"
exit 0
