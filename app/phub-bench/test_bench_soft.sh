#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# End-to-end checks of phub-bench against the soft PBox (kernel UDP, no DPDK, no root).
#
#   phub-bench (parent: forks, supervises, reports)
#     |-- rank 0 --.
#     |-- rank 1 --+-- UDP on 127.0.0.1 --> phub-soft-pbox  control :P, data :P+1, :P+2
#     '-- rank N --'        (libphub)        (started here on ephemeral ports, killed by PID)
#
# usage: test_bench_soft.sh CASE PHUB_BENCH SOFT_PBOX [phub-bench options]
#   run          run with the options; pass when it exits 0 with "verified": true
#   json-shape   stdout is exactly one JSON object with the documented fields
#   unreachable  no PBox: a clear error and exit 1 within a bounded time
#   wrong-nonce  rank 1 joins rank 0's job with another nonce: refused, exit 1
#   worker-dies  a worker is killed mid-run: the parent says so and exits 1, no hang
#   elastic      an elastic job of 4 ranks, one phub-bench per rank: rank 3 dies (SIGKILL, no
#                LEAVE) after iteration 4, the soft PBox removes it after --worker-dead-ms (1.5 s:
#                above libphub's 1 s keep-alive, or the waiting ranks look silent too) and
#                the three others finish with the model their membership reference computes,
#                bit for bit, and report 3 ranks left
#   elastic-rejoin  the same, then rank 3 is started again once removed: the PBox takes it back
#                at an iteration boundary, and all four finish with the model of that history
#   pbox-dies    the PBox is killed mid-run: the workers fail and the parent exits 1
#   fault        PHUB_BENCH_FAULT=ulp (rank 0's model one ulp off): SGD fails the check with
#                the key and element named; Nesterov accepts it as rounding (not bitwise)
#   model-names  --model takes phub-plan's names in any case and the paper's abbreviations, or a
#                layout file; --list-models lists them; an unknown one is a usage error (no PBox)
#   racks        --servers with two "racks" on the one soft PBox (a flat job there: this checks the
#                ranks' placement, the world size, verification and the digest, not the ring);
#                the option's refusals (with --server, --workers that differ, prefixes)
#   netns        the worker (rank 0) enters /run/netns/<prefix>1, where the soft PBox listens on its
#                own loopback (root only; skipped otherwise); a missing namespace is an error
# Exit 77 (skipped) when the soft PBox has not been built.

set -u

case_name=$1
bench=$2
soft=$3
shift 3

[ -x "$soft" ] || { echo "SKIP: $soft not built"; exit 77; }

tmp=$(mktemp -d /tmp/phub-bench-test.XXXXXX)
pbox_pid=
bg_pid=
netns=
pbox_wrap=

cleanup() {
	[ -n "$bg_pid" ] && kill -KILL "$bg_pid" 2>/dev/null
	[ -n "$pbox_pid" ] && kill -TERM "$pbox_pid" 2>/dev/null && wait "$pbox_pid" 2>/dev/null
	[ -n "$netns" ] && ip netns del "$netns"
	rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
	echo "FAIL ($case_name): $*"
	for f in "$tmp"/*; do
		[ -f "$f" ] && { echo "--- $(basename "$f")"; tail -n 40 "$f"; }
	done
	exit 1
}

# Start the soft PBox on ephemeral ports and learn its control port from its first line.
start_pbox() {
	$pbox_wrap "$soft" --port 0 --lcores 2 "$@" >"$tmp/pbox.out" 2>"$tmp/pbox.err" &
	pbox_pid=$!
	for _ in $(seq 100); do
		port=$(sed -n 's/.*control 127\.0\.0\.1:\([0-9]*\),.*/\1/p' "$tmp/pbox.out")
		[ -n "$port" ] && return 0
		kill -0 "$pbox_pid" 2>/dev/null || fail "the soft PBox did not start"
		sleep 0.05
	done
	fail "the soft PBox did not print its port"
}

# A UDP port on 127.0.0.1 that nothing listens on (free when asked; nobody else binds it here).
free_port() {
	python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Run phub-bench with a hard bound; sets rc.
bench() {
	timeout 150 "$bench" --server 127.0.0.1 --port "$port" --quiet "$@" \
		>"$tmp/bench.out" 2>"$tmp/bench.err"
	rc=$?
}

# Wait for background PID at most SECONDS, then kill it; sets rc (124 when it had to be killed).
wait_bounded() {
	local pid=$1 deadline=$(($(date +%s) + $2))

	while kill -0 "$pid" 2>/dev/null; do
		if [ "$(date +%s)" -ge "$deadline" ]; then
			kill -KILL "$pid"
			wait "$pid" 2>/dev/null
			rc=124
			return
		fi
		sleep 0.1
	done
	wait "$pid"
	rc=$?
}

json_check() {
	python3 - "$tmp/bench.out" "$@" <<'EOF' || fail "JSON check failed"
import json, sys
with open(sys.argv[1]) as f:
    r = json.load(f)           # exactly one JSON document, or this raises
checks = sys.argv[2:]
env = {"r": r}
for c in checks:
    if not eval(c, env):
        sys.exit("not true: %s\nreport: %s" % (c, json.dumps(r)[:2000]))
EOF
}

case $case_name in
run)
	start_pbox
	bench --job "run-$$" --iterations 5 --json "$@"
	[ "$rc" = 0 ] || fail "phub-bench exited $rc"
	json_check 'r["verified"] is True' 'r["exchanges_per_s"] > 0' \
		'all(w["verified"] for w in r["per_worker"])' \
		'len(r["per_worker"]) == r["workers"]'
	;;
json-shape)
	start_pbox
	bench --job "shape-$$" --workers 2 --keys 5 --key-elems 3000 --iterations 6 \
		--warmup 2 --json
	[ "$rc" = 0 ] || fail "phub-bench exited $rc"
	json_check 'r["workers"] == 2' 'r["model_bytes"] == 5 * 3000 * 4' \
		'r["iterations"] == 6' 'r["warmup"] == 2' 'r["keys"] == 5' \
		'r["verified"] is True and r["bitwise"] is True' \
		'r["dtype"] == "fp32" and r["optimizer"] == "sgd" and r["model"] == "synthetic"' \
		'isinstance(r["exchanges_per_s"], float) and r["exchanges_per_s"] > 0' \
		'r["goodput_gbps"] > 0 and r["wire_gbps"] > 0' \
		'0 < r["p50_ms"] <= r["p99_ms"]' \
		'isinstance(r["retransmits"], int) and isinstance(r["pulls"], int)' \
		'r["max_abs_error"] == 0' \
		'[w["rank"] for w in r["per_worker"]] == [0, 1]' \
		'all(w["timed_iterations"] == 4 for w in r["per_worker"])' \
		'all(w["iterations"] == 6 for w in r["per_worker"])' \
		'abs(sum(w["exchanges_per_s"] for w in r["per_worker"])
		     - r["exchanges_per_s"]) <= 1e-8 * max(1.0, r["exchanges_per_s"])'
	# Without --json: a table on stdout, the same verdict.
	bench --job "table-$$" --workers 1 --keys 2 --key-elems 100 --iterations 3
	[ "$rc" = 0 ] || fail "phub-bench (table) exited $rc"
	grep -q '^  all ' "$tmp/bench.out" || fail "no total line in the table"
	;;
unreachable)
	port=$(free_port)
	start=$(date +%s)
	bench --job "unreach-$$" --workers 2 --keys 2 --key-elems 100 \
		--connect-timeout-ms 1500 --json
	took=$(($(date +%s) - start))
	[ "$rc" = 1 ] || fail "exit $rc, expected 1"
	[ "$took" -le 20 ] || fail "took ${took}s to give up"
	grep -q "cannot join" "$tmp/bench.err" || fail "no clear error on stderr"
	json_check 'r["verified"] is False' '"cannot join" in r["error"]' \
		'not any(w["ok"] for w in r["per_worker"])'
	;;
wrong-nonce)
	start_pbox
	# Rank 0 creates the job with nonce 1 and waits for rank 1 in the initial round.
	"$bench" --server 127.0.0.1 --port "$port" --quiet --job "nonce-$$" \
		--workers 2 --rank 0 --nonce 0x1 --keys 2 --key-elems 100 \
		--connect-timeout-ms 20000 >"$tmp/rank0.out" 2>"$tmp/rank0.err" &
	bg_pid=$!
	sleep 1
	bench --job "nonce-$$" --workers 2 --rank 1 --nonce 0x2 --keys 2 --key-elems 100 \
		--connect-timeout-ms 5000 --json
	[ "$rc" = 1 ] || fail "exit $rc, expected 1"
	grep -qi "nonce\|permission" "$tmp/bench.err" || fail "the refusal does not say why"
	json_check 'r["verified"] is False' 'r["per_worker"][0]["rank"] == 1'
	;;
elastic)
	start_pbox --worker-dead-ms 1500
	common=(--server 127.0.0.1 --port "$port" --quiet --json --job "elastic-$$"
		--workers 4 --keys 5 --key-elems 3000 --iterations 8 --gradients random
		--deterministic --elastic)
	pids=()
	for r in 0 1 2 3; do
		extra=()
		[ "$r" = 3 ] && extra=(--die-at 4)
		timeout 120 "$bench" "${common[@]}" --rank "$r" "${extra[@]}" \
			>"$tmp/bench$r.out" 2>"$tmp/bench$r.err" &
		pids+=($!)
	done
	for r in 0 1 2 3; do
		wait "${pids[$r]}"
		rcs[$r]=$?
	done
	[ "${rcs[3]}" != 0 ] || fail "rank 3 did not die"
	grep -q "dies after iteration 4" "$tmp/bench3.err" || fail "rank 3 did not die at 4"
	for r in 0 1 2; do
		[ "${rcs[$r]}" = 0 ] || fail "rank $r exited ${rcs[$r]}"
		cp "$tmp/bench$r.out" "$tmp/bench.out"
		json_check 'r["verified"] is True' 'r["verify_mode"] == "exact"' \
			'all(w["bitwise"] for w in r["per_worker"])' \
			'all(w["world_end"] == 3 and w["removed"] == 1 for w in r["per_worker"])' \
			'r["per_worker"][0]["iterations"] == 8'
	done
	echo "PASS: three ranks finished without the fourth, models exact to their reference"
	;;
elastic-rejoin)
	start_pbox --worker-dead-ms 1500 --log
	common=(--server 127.0.0.1 --port "$port" --quiet --json --job "rejoin-$$"
		--workers 4 --keys 5 --key-elems 3000 --iterations 12 --gradients random
		--deterministic --elastic)
	pids=()
	for r in 0 1 2 3; do
		extra=()
		# The others wait after iteration 6 (PINGing: worker_dead_ms is above libphub's 1 s
	# keep-alive), so that rank 3 is back before the end.
		if [ "$r" = 3 ]; then extra=(--die-at 4); else extra=(--pause-at 6:3000); fi
		timeout 120 "$bench" "${common[@]}" --rank "$r" "${extra[@]}" \
			>"$tmp/bench$r.out" 2>"$tmp/bench$r.err" &
		pids+=($!)
	done
	wait "${pids[3]}" && fail "rank 3 did not die"
	for _ in $(seq 100); do
		grep -q 'removed from iteration' "$tmp/pbox.err" && break
		sleep 0.05
	done
	grep -q 'rank 3 silent .*removed from iteration 5 on' "$tmp/pbox.err" ||
		fail "the PBox did not remove rank 3"
	timeout 120 "$bench" "${common[@]}" --rank 3 >"$tmp/again3.out" 2>"$tmp/again3.err"
	rc3=$?
	for r in 0 1 2; do
		wait "${pids[$r]}"
		rcs[$r]=$?
	done
	back=$(sed -n 's/.*rank 3, removed from iteration 5, joins again from iteration \([0-9]*\).*/\1/p' \
		"$tmp/pbox.err")
	[ -n "$back" ] || fail "the PBox did not take rank 3 back"
	echo "rank 3: out from iteration 5, back from iteration $back"
	grep -q "resumes job 'rejoin-$$' at iteration $back" "$tmp/again3.err" ||
		fail "rank 3 did not resume at $back"
	[ "$rc3" = 0 ] || fail "rank 3 (again) exited $rc3"
	for r in 0 1 2 again3; do
		f=$tmp/bench$r.out
		[ "$r" = again3 ] && f=$tmp/again3.out
		[ "$r" = again3 ] || [ "${rcs[$r]}" = 0 ] || fail "rank $r exited ${rcs[$r]}"
		cp "$f" "$tmp/bench.out"
		json_check 'r["verified"] is True' 'r["verify_mode"] == "exact"' \
			'all(w["bitwise"] for w in r["per_worker"])' \
			'all(w["world_end"] == 4 and w["removed"] == 0 for w in r["per_worker"])'
	done
	echo "PASS: rank 3 died, was removed, came back; four models exact to that history"
	;;
worker-dies)
	start_pbox
	"$bench" --server 127.0.0.1 --port "$port" --quiet --job "dies-$$" \
		--workers 2 --keys 4 --key-elems 2000 --iterations 1000000 --json \
		>"$tmp/bench.out" 2>"$tmp/bench.err" &
	bg_pid=$!
	victim=
	for _ in $(seq 100); do
		victim=$(pgrep -P "$bg_pid" -n)
		[ -n "$victim" ] && break
		sleep 0.05
	done
	[ -n "$victim" ] || fail "no worker process found"
	sleep 1
	kill -KILL "$victim"
	wait_bounded "$bg_pid" 30
	bg_pid=
	[ "$rc" = 1 ] || fail "exit $rc, expected 1 (124: the parent hung)"
	grep -q "died\|killed by signal 9" "$tmp/bench.err" || fail "the death is not reported"
	json_check 'r["verified"] is False' 'any(not w["ok"] for w in r["per_worker"])'
	;;
pbox-dies)
	start_pbox
	"$bench" --server 127.0.0.1 --port "$port" --quiet --job "pdies-$$" \
		--workers 2 --keys 4 --key-elems 2000 --iterations 1000000 --dead-ms 2000 --json \
		>"$tmp/bench.out" 2>"$tmp/bench.err" &
	bg_pid=$!
	sleep 2
	kill -KILL "$pbox_pid"
	wait "$pbox_pid" 2>/dev/null
	pbox_pid=
	wait_bounded "$bg_pid" 60
	bg_pid=
	[ "$rc" = 1 ] || fail "exit $rc, expected 1 (124: the parent hung)"
	json_check 'r["verified"] is False' 'all(not w["ok"] for w in r["per_worker"])' \
		'r["per_worker"][0]["iterations"] > 0'
	;;
fault)
	start_pbox
	PHUB_BENCH_FAULT=ulp bench --job "fault-$$" --workers 2 --keys 5 --key-elems 1000 --json
	[ "$rc" = 1 ] || fail "exit $rc with a wrong model, expected 1"
	grep -q "model differs from the reference in 1 of 5000 elements; first: key 2 element 0" \
		"$tmp/bench.err" || fail "the mismatch is not described"
	json_check 'r["verified"] is False' 'r["failed_workers"] == 0' \
		'r["per_worker"][0]["mismatches"] == 1 and r["per_worker"][1]["mismatches"] == 0' \
		'r["per_worker"][1]["verified"] is True' '0 < r["max_abs_error"] < 1e-6'
	PHUB_BENCH_FAULT=ulp bench --job "fault2-$$" --workers 2 --keys 5 --key-elems 1000 \
		--optimizer nesterov --json
	[ "$rc" = 0 ] || fail "exit $rc for a one-ulp difference with Nesterov, expected 0"
	json_check 'r["verified"] is True' 'r["bitwise"] is False' 'r["max_abs_error"] > 0'
	;;
racks)
	start_pbox
	racks_bench()
	{
		timeout 150 "$bench" --port "$port" --quiet "$@" >"$tmp/bench.out" 2>"$tmp/bench.err"
		rc=$?
	}
	racks_bench --job "racks-$$" --servers "127.0.0.1:1,127.0.0.1:2" --keys 4 --key-elems 3000 \
		--iterations 3 --json
	[ "$rc" = 0 ] || fail "phub-bench --servers exited $rc"
	json_check 'r["verified"] is True' 'r["workers"] == 3' 'len(r["per_worker"]) == 3' \
		'[k["first_rank"] for k in r["racks"]] == [0, 1]' \
		'[k["ranks"] for k in r["racks"]] == [1, 2]' 'r["verify_mode"] == "exact"' \
		'len(r["model_digest"]) == 16' \
		'all(w["model_digest"] == r["model_digest"] for w in r["per_worker"])'
	digest=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["model_digest"])' \
		<"$tmp/bench.out")
	# The same run again: the same model, the same digest.
	# The same run again, by the deprecated spelling --racks: it still works, and says so.
	racks_bench --job "racks2-$$" --racks "127.0.0.1:2,127.0.0.1:1" --keys 4 --key-elems 3000 \
		--iterations 3 --json
	[ "$rc" = 0 ] || fail "the second phub-bench (--racks) exited $rc"
	grep -q -- "--racks is deprecated: use --servers" "$tmp/bench.err" ||
		fail "phub-bench --racks does not say it is deprecated"
	json_check "r['model_digest'] == '$digest'"
	# Random gradients across racks: within tolerance, whatever --deterministic says.
	racks_bench --job "racks3-$$" --servers "127.0.0.1:1,127.0.0.1:1" --keys 2 --key-elems 3000 \
		--iterations 3 --gradients random --deterministic --json
	[ "$rc" = 0 ] || fail "phub-bench --servers --gradients random exited $rc"
	json_check 'r["verify_mode"] == "tolerance"'
	for bad in "--server 127.0.0.1" "--workers 4" "--netns-prefixes a,b,c" \
		"--netns-prefix a --netns-prefixes a,b"; do
		# shellcheck disable=SC2086 # the options as words
		racks_bench --servers "127.0.0.1:1,127.0.0.1:2" --keys 1 --key-elems 10 $bad
		[ "$rc" = 2 ] || fail "--servers with $bad: exit $rc, expected 2"
	done
	racks_bench --server 127.0.0.1 --workers 2 --netns-prefixes a,b --keys 1 --key-elems 10
	[ "$rc" = 2 ] || fail "--netns-prefixes without --servers: exit $rc, expected 2"
	racks_bench --servers "127.0.0.1:0" --keys 1 --key-elems 10
	[ "$rc" = 2 ] || fail "--servers 127.0.0.1:0: exit $rc, expected 2"
	grep -q -- "--servers: rack 0: ranks '0'" "$tmp/bench.err" ||
		fail "--servers 127.0.0.1:0: the reason is not said"
	;;
netns)
	if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
		echo "SKIP: needs root and ip(8)"
		exit 77
	fi
	prefix="phb$$-w"
	ip netns add "${prefix}1" || fail "cannot create a network namespace"
	netns="${prefix}1"
	ip -n "$netns" link set lo up || fail "cannot bring lo up in $netns"
	# ip netns exec execs the program: $! is the soft PBox itself.
	pbox_wrap="ip netns exec $netns"
	start_pbox
	bench --job "netns-$$" --workers 1 --netns-prefix "$prefix" --keys 4 \
		--key-elems 1000 --json
	[ "$rc" = 0 ] || fail "phub-bench exited $rc"
	json_check 'r["verified"] is True'
	bench --job "netns2-$$" --workers 1 --netns-prefix "nonexistent-$$-" --keys 1 \
		--key-elems 10 --json
	[ "$rc" = 1 ] || fail "exit $rc with a missing namespace, expected 1"
	grep -q "cannot open network namespace /run/netns/nonexistent-$$-1" "$tmp/bench.err" ||
		fail "the missing namespace is not named"
	;;
model-names)
	layout_file=$(dirname "$0")/test_layout.json
	for m in resnet50 RN50 Resnet50 rn50; do
		"$bench" --model "$m" --print-layout >"$tmp/layout.out" 2>&1 ||
			fail "--model $m: exit $?"
		[ "$(tail -n 1 "$tmp/layout.out")" = "# resnet50: 161 keys, 25557032 elements" ] ||
			fail "--model $m: $(tail -n 1 "$tmp/layout.out")"
	done
	# A network of phub-plan's table without a layer list here: its Table 3 size.
	"$bench" --model GN --print-layout >"$tmp/layout.out" 2>&1 || fail "--model GN: exit $?"
	[ "$(tail -n 1 "$tmp/layout.out")" = "# googlenet: 3 keys, 9961472 elements" ] ||
		fail "--model GN: $(tail -n 1 "$tmp/layout.out")"
	# A file: --model FILE as --layout FILE.
	for o in --model --layout; do
		"$bench" "$o" "$layout_file" --print-layout >"$tmp/layout.out" 2>&1 ||
			fail "$o FILE: exit $?"
		want="# test_layout.json: 12 keys, 596521 elements"
		[ "$(tail -n 1 "$tmp/layout.out")" = "$want" ] ||
			fail "$o FILE: $(tail -n 1 "$tmp/layout.out")"
	done
	"$bench" --model resnet9000 --print-layout >"$tmp/layout.out" 2>&1
	rc=$?
	[ "$rc" = 2 ] || fail "--model resnet9000: exit $rc, expected 2"
	grep -q "unknown model 'resnet9000'" "$tmp/layout.out" || fail "no clear error"
	"$bench" --list-models >"$tmp/list.out" || fail "--list-models: exit $?"
	[ "$(wc -l <"$tmp/list.out")" = 10 ] || fail "--list-models: not 9 models and a header"
	grep -q "^resnet50	RN50	161	25557032	torchvision tensors$" \
		"$tmp/list.out" || fail "--list-models: no resnet50 row"
	;;
*)
	fail "unknown case"
	;;
esac
echo "PASS ($case_name)"
