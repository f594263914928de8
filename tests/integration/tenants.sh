#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Bad input and tenants on one DPDK PBox: a hostile client beside real jobs (every bad datagram
# counted under its drop reason, the jobs exact, nothing crashes; a JOIN claiming a huge
# layout refused without the memory it claims), JOINs refused for a wrong
# nonce or for memory limits while a job runs on, and eight jobs at once with a hostile client
# guessing their ids and tokens. One scenario per run; the rack is always torn down.
#
#                      R-tor: bridge br0
#          +--------------+-----------+-----------+-----------+
#         tp0            tw1         tw2         tw3         tw4
#          |              |           |           |           |
#   R-pbox: phub-pbox    R-w1        R-w2        R-w3        R-w4
#                        ranks of several jobs per namespace (phub-bench --netns-prefix with
#                        /run/netns aliases), phub-hostile in R-w1 beside them
#
# usage: tenants.sh VIRTUAL_RACK PHUB_PBOX PHUB_BENCH PHUB_HOSTILE SCENARIO
# SCENARIO: hostile, limits, eight-jobs.
# Exits 77 with the reason when it cannot run here (not root, no /dev/net/tun).
set -uo pipefail

vrack=$1
pbox_bin=$2
bench_bin=$3
hostile_bin=$4
scenario=$5
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/rack_lib.sh
. "$here/rack_lib.sh"
lib_init "tenants-$scenario"

mixed_layout=$tmp/mixed.json
printf '[1, 3, 7, 351, 353, 1000, 8096, 8097, 50000, 17]\n' >"$mixed_layout"

# wait_jobs N: until N jobs have all their ranks but the held last one joined (up to 60 s);
# their ids in $tmp/ids.
wait_jobs()
{
	local n=$1 deadline=$((SECONDS + 60))
	while [ $SECONDS -lt $deadline ]; do
		telemetry "$tmp/jobs.json" /phub/jobs
		if python3 - "$tmp/jobs.json" "$n" "$tmp/ids" <<'PY'; then
import json, sys
jobs = json.load(open(sys.argv[1])).get("/phub/jobs", {})
ready = [j for j in jobs.values() if j["joined"] == j["world_size"] - 1]
if len(ready) < int(sys.argv[2]):
    sys.exit(1)
open(sys.argv[3], "w").write(" ".join(str(j["id"]) for j in ready))
PY
			return 0
		fi
		sleep 0.1
	done
	fail "fewer than $n jobs joined within 60 s"
	return 1
}

# A job whose last rank is held back: its other ranks join and wait in the initial-model
# round (pushing, pulling, their partial sums in the PBox's slots) for as long as the test
# needs, whatever the machine's speed; once the last rank comes, the job runs to the end.
#
# job_start NAME WORLD PREFIX [phub-bench options...]: ranks 0 .. WORLD-2 in the background.
# job_release NAME: the last rank; the job's reports are $tmp/NAME-<rank>.json.
job_start()
{
	local name=$1 world=$2 prefix=$3 r
	shift 3
	printf '%s\n' "$world $prefix $*" >"$tmp/$name.job"
	for ((r = 0; r < world - 1; r++)); do
		bench_bg "$tmp/$name-$r.json" "$world" "$prefix" --rank "$r" --job "$name" "$@"
	done
}

job_release()
{
	local name=$1 world prefix
	local -a args
	read -r world prefix _ <"$tmp/$name.job"
	read -ra args <<<"$(cut -d' ' -f3- "$tmp/$name.job")"
	bench_bg "$tmp/$name-$((world - 1)).json" "$world" "$prefix" --rank $((world - 1)) \
		--job "$name" "${args[@]}"
}

# job_exact NAME: every rank's model exact; one line of figures (the last rank's).
job_exact()
{
	local name=$1 world r
	read -r world _ <"$tmp/$name.job"
	for ((r = 0; r < world; r++)); do
		exact "$tmp/$name-$r.json"
	done
	summary "$name (rank $((world - 1)) of $world)" "$tmp/$name-$((world - 1)).json"
}

# hostile VICTIM_NAME VICTIM_WORLD IDS...: phub-hostile from worker 1's namespace against the
# jobs IDS; the PBox's drop counters must have risen by exactly what it sent of each kind (its
# bad LEAVEs included), and every JOIN of VICTIM_NAME with a guessed nonce must get bad_nonce
# with a text that says nothing of the job's shape, whatever shape the JOIN declared.
hostile()
{
	local name=$1 world=$2 args=() v
	shift 2
	for v in "$@"; do
		args+=(--victim "$v")
	done
	telemetry "$tmp/before.json" /phub/stats
	ip netns exec "$rack-w1" "$hostile_bin" --server "$server" --victim-name "$name" \
		--victim-world "$world" "${args[@]}" >"$tmp/hostile.json" 2>"$tmp/hostile.err" ||
		{ fail "phub-hostile failed"; cat "$tmp/hostile.err"; return 1; }
	sleep 0.3
	telemetry "$tmp/after.json" /phub/stats /phub/jobs
	python3 - "$tmp/before.json" "$tmp/after.json" "$tmp/hostile.json" "$#" "$name" <<'PY' ||
import json, sys
before, after = (json.load(open(f)) for f in sys.argv[1:3])
h = json.load(open(sys.argv[3]))
n_victims = int(sys.argv[4])
victim_name = sys.argv[5]
a, b = before["/phub/stats"]["drops"], after["/phub/stats"]["drops"]
delta = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}
delta = {k: v for k, v in delta.items() if v}
bad = []
for reason, n in h["expect"].items():
    if delta.get(reason, 0) != n:
        bad.append(f"{reason}: sent {n}, counted {delta.get(reason, 0)}")
for reason, n in h["at_least"].items():
    if delta.get(reason, 0) < n:
        bad.append(f"{reason}: sent {n}, counted only {delta.get(reason, 0)}")
# What real workers beside may cause on their own (PULLs while a MODEL is not ready yet,
# late retransmits), what is only handed to another lcore, and ARP for other hosts.
# A MODEL or ACK that reaches a worker after its socket closed comes back as ICMP (not_udp).
background = {"future_iteration", "stale_iteration", "duplicate", "wrong_lcore", "not_for_us",
              "not_udp"}
extra = set(delta) - set(h["expect"]) - set(h["at_least"]) - background
if extra:
    bad.append(f"counted without a cause: { {k: delta[k] for k in extra} }")
if h["foreign_models"]:
    bad.append(f"{h['foreign_models']} MODELs of other jobs reached the hostile client")
# Half of the JOINs declare the job's own shape, half another one: before the nonce was
# checked first, the latter got layout_mismatch, which told that the job exists and its shape.
answers = [e for e in h["errors"] if e["victim_join"]]
if h["victim_joins"] == 0 or len(answers) != h["victim_joins"]:
    bad.append(f"{h['victim_joins']} JOINs with a guessed nonce, {len(answers)} refusals")
if any((e["code"], e["text"]) != ("bad_nonce", f"job {victim_name}: wrong nonce")
       for e in answers):
    bad.append(f"a JOIN with a guessed nonce got another refusal: {answers}")
# A LEAVE sent again (its LEAVE_ACK lost) is ACKed again, not counted as a drop.
if h["leave_acks"] != 3:
    bad.append(f"{h['leave_acks']} LEAVE_ACKs for our 3 LEAVEs")
alive = [j for j in after["/phub/jobs"].values() if not j["name"].startswith("hostile")]
if len(alive) < n_victims:
    bad.append(f"only {len(alive)} of the {n_victims} jobs were still running after the attack")
print("hostile: %d datagrams, %d reasons counted exactly:" % (h["sent"], len(h["expect"])))
print("  ", ", ".join(f"{k} {v}" for k, v in sorted(h["expect"].items())))
print("   at least:", h["at_least"], " refusals:", sorted({e["code"] for e in h["errors"]}))
print("   JOINs with a guessed nonce:", h["victim_joins"], "answers:",
      sorted({(e["code"], e["text"]) for e in answers}))
print("   beside:", {k: v for k, v in delta.items() if k in background})
if bad:
    print("  wrong:", *bad, sep="\n    ")
    sys.exit(1)
PY
		fail "the PBox's counters do not match what the hostile client sent"
}

case $scenario in
hostile)
	# Job A: mixed layout, ranks 0, 1 in w1, w2 and the held rank 2 in w3. Job B: one key of
	# 1000 elements, the shape of half of phub-hostile's JOINs with a guessed nonce (the other
	# half declares another: both must get bad_nonce); ranks in w3, w4 and w1.
	rack_up 4
	netns_alias "$rack-ja" 1 2 3
	netns_alias "$rack-jb" 3 4 1
	job_start job-a 3 "$rack-ja" --nonce 0x5ad1c0ffee7e4b31 --layout "$mixed_layout" \
		--optimizer sgd --iterations 20
	job_start job-b 3 "$rack-jb" --nonce 0x7e11d00d2b9a4c63 --keys 1 --key-elems 1000 \
		--optimizer sgd --iterations 200
	if wait_jobs 2; then
		# shellcheck disable=SC2046 # one argument per id
		hostile job-b 3 $(cat "$tmp/ids")
		phubrack query '"   refusal texts: %s" % sorted({e["text"] for e in t["errors"]})' \
			"$tmp/hostile.json"
	fi
	# One JOIN datagram that claims 10^8 keys: refused at once, and the PBox's memory does
	# not grow by what the claim would cost (800 MB before MAX_JOB_KEYS in control.c).
	rss0=$(awk '/^VmRSS:/ { print $2 }' "/proc/$(cat "/run/phub-vrack/$rack/pbox.pid")/status")
	ip netns exec "$rack-w1" "$hostile_bin" --server "$server" --join-keys 100000000 \
		>"$tmp/claim.json" 2>&1 || fail "phub-hostile --join-keys failed"
	rss1=$(awk '/^VmRSS:/ { print $2 }' "/proc/$(cat "/run/phub-vrack/$rack/pbox.pid")/status")
	echo "a JOIN claiming 10^8 keys: $(cat "$tmp/claim.json"), PBox RSS $rss0 -> $rss1 kB"
	grep -q '"code": "bad_request".*at most 65536 keys' "$tmp/claim.json" ||
		fail "the JOIN claiming 10^8 keys was not refused"
	[ $((rss1 - rss0)) -lt 16384 ] || fail "the PBox grew by $((rss1 - rss0)) kB for one JOIN"
	job_release job-a
	job_release job-b
	bench_wait
	job_exact job-a
	job_exact job-b
	;;
limits)
	# Small limits written into the rack's config: 6 MB per job, 9 MB in all.
	edit_config()
	{
		phubrack config-edit "$1" 'c["limits"] = {"job_memory_mb": 6, "total_memory_mb": 9}'
	}
	rack_up 4
	# Job A: 400,000 fp32 elements with SGD, 4.9 MB (model, sums, the checkpoint snapshot
	# buffer, slots); its last rank held until the others have been refused.
	netns_alias "$rack-ja" 1 2 3
	job_start job-a 3 "$rack-ja" --nonce 0x5ad1c0ffee7e4b31 --keys 4 --key-elems 100000 \
		--optimizer sgd --iterations 8
	wait_jobs 1
	netns_alias "$rack-jx" 3 4
	# refused LABEL PATTERN [phub-bench options]: exit 1 and an error that matches.
	refused()
	{
		local label=$1 pattern=$2
		shift 2
		timeout 60 "$bench_bin" --server "$server" --netns-prefix "$rack-jx" --json \
			--quiet \
			--timeout 30 --connect-timeout-ms 5000 "$@" >"$tmp/$label.json" \
			2>"$tmp/$label.err"
		local rc=$?
		if [ $rc -ne 1 ] || ! grep -Eq "$pattern" "$tmp/$label.err"; then
			fail "$label: exit $rc, no error matching '$pattern'"
			tail -n 3 "$tmp/$label.err"
		else
			echo "$label refused: $(grep -Eo "refused.*" "$tmp/$label.err" | head -n 1)"
		fi
	}
	# 600,000 elements: 7.3 MB, above the per-job limit.
	refused too-big 'no_memory.*limits\.job_memory_mb' --workers 1 --job too-big \
		--keys 6 --key-elems 100000 --optimizer sgd --iterations 2
	# 4.9 MB more would make 9.8 MB: within the per-job limit, above the total.
	refused over-total 'no_memory.* 4 MB left of 9 MB \(limits\.total_memory_mb\)' \
		--workers 1 --job over-total --keys 4 --key-elems 100000 --optimizer sgd \
		--iterations 2
	# Rank 1 of job A again with a guessed nonce, from another namespace.
	refused wrong-nonce 'bad_nonce' --workers 3 --rank 1 --job job-a \
		--nonce 0x1111111111111111 --keys 4 --key-elems 100000 --optimizer sgd \
		--iterations 2
	job_release job-a
	bench_wait
	job_exact job-a
	# Job A left: its memory is free again, and the job refused for the total now fits.
	netns_alias "$rack-jy" 3
	bench "$tmp/later.json" 1 "$rack-jy" --job over-total --keys 4 --key-elems 100000 \
		--optimizer sgd --iterations 2 && exact "$tmp/later.json"
	summary "over-total after job A left" "$tmp/later.json"
	;;
eight-jobs)
	# Eight jobs, each its own name, nonce and layout; odd ones with two workers, even ones
	# with one (each plus its held rank); their ranks spread over the four namespaces.
	rack_up 4
	for k in 1 2 3 4 5 6 7 8; do
		netns_alias "$rack-j$k-" $((k % 4 + 1)) $(((k + 1) % 4 + 1)) $(((k + 2) % 4 + 1))
		job_start "tenant-$k" $((k % 2 + 2)) "$rack-j$k-" \
			--nonce "$(printf '0x%08x%08x' $((k * 2654435761 % 4294967296)) \
				$((k * 40503)))" \
			--keys 6 --key-elems $((3000 + 500 * k)) --optimizer sgd --iterations 10
	done
	if wait_jobs 8; then
		# shellcheck disable=SC2046 # one argument per id
		hostile tenant-2 2 $(cat "$tmp/ids")
	fi
	for k in 1 2 3 4 5 6 7 8; do
		job_release "tenant-$k"
	done
	bench_wait
	for k in 1 2 3 4 5 6 7 8; do
		job_exact "tenant-$k"
		expect "$tmp/tenant-$k-0.json" "r['job'] == 'tenant-$k'"
	done
	;;
*)
	echo "FAIL: unknown scenario $scenario"
	exit 1
	;;
esac

rack_down_check
[ $failed -eq 0 ] && echo "PASS: $scenario"
exit $failed
