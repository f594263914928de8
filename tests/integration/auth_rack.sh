#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# An authenticated job (jobs[].auth "required") on the DPDK PBox with an on-path host: the ToR
# floods every frame (a hub: bridge ageing 0), and worker namespace 3 records the job's frames
# (JOIN included), then replays, reorders, flips bits, forges with the tokens it saw and JOINs
# with what it saw. The job must end bitwise exact, each attempt counted under its drop reason
# exactly, no nonce seen in clear, and a worker without auth refused with the reason.
#
#                      h25a-tor: bridge br0, ageing_time 0 (floods every frame)
#          +--------------+-----------+-----------+
#         tp0            tw1         tw2         tw3
#          |              |           |           |
#   h25a-pbox: phub-pbox h25a-w1     h25a-w2     h25a-w3: auth_attacker.py (AF_PACKET,
#   10.25.0.1            rank 0      rank 1       promiscuous eth0, 10.25.0.103)
#
# With SCENARIO "ring": an authenticated job across two racks (virtual-rack up --racks 2): the
# workers JOIN their rack's PBox with auth, the PBoxes' RING_HELLOs carry a proof of the nonce
# instead of the nonce, and the job ends exact.
#
# usage: auth_rack.sh VIRTUAL_RACK PHUB_PBOX PHUB_BENCH AUTH_ATTACKER [ring]
# Exits 77 with the reason when it cannot run here (not root, no /dev/net/tun).
set -uo pipefail

vrack=$1
pbox_bin=$2
bench_bin=$3
attacker=$4
scenario=${5:-attack}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/rack_lib.sh
. "$here/rack_lib.sh"
lib_init "auth-$scenario"
# This test's own rack and subnet (10.25.0.0/24), whatever lib_init drew.
id=25
rack="h25a"
server="10.$id.0.1"

if [ "$scenario" = ring ]; then
	# The multi-rack h25a: racks h25a.0 (10.25.0.0/24) and h25a.1 (10.26.0.0/24), spine 10.27.
	rack_nonce=0x25a5eed0a11ce001
	"$vrack" down --name "$rack" >/dev/null 2>&1
	"$vrack" up --name "$rack" --racks 2 --id "$id" --workers 2 --lcores 1 --memory-mb 512 \
		--ring-job "ring:$rack_nonce" >"$tmp/up.log" 2>&1 ||
		{ cat "$tmp/up.log"; echo "FAIL: the multi-rack did not come up"; exit 1; }
	for r in 0 1; do
		phubrack config-edit "/run/phub-vrack/$rack.$r/pbox.json" \
			'c["jobs"][0]["auth"] = "required"' || { echo "FAIL: editing rack $r"; exit 1; }
		"$vrack" pbox-start --name "$rack" --rack "$r" --bin "$pbox_bin" \
			>"$tmp/pbox-start-$r.log" 2>&1 ||
			{ cat "$tmp/pbox-start-$r.log"; echo "FAIL: rack $r's PBox did not start"; exit 1; }
	done
	timeout 200 "$bench_bin" --servers "10.$id.0.1:2,10.$((id + 1)).0.1:2" \
		--netns-prefix "$rack.%r-w" --job ring --nonce "$rack_nonce" --auth --json --quiet \
		--timeout 60 --connect-timeout-ms 30000 --keys 8 --key-elems 20000 --iterations 30 \
		>"$tmp/ring.json" 2>"$tmp/ring.err" ||
		{ fail "the authenticated ring job failed"; tail -n 5 "$tmp/ring.err"; }
	exact "$tmp/ring.json"
	summary "authenticated ring job, 2 racks" "$tmp/ring.json"
	grep -q 'ring position 0 of 2 linked' "/run/phub-vrack/$rack.0/pbox.log" ||
		fail "rack 0 never linked its ring (RING_HELLO's proof of the nonce refused?)"
	for r in 0 1; do
		"$vrack" pbox-stop --name "$rack" --rack "$r" >/dev/null 2>&1 ||
			fail "rack $r's PBox did not stop on SIGTERM"
	done
	if [ "$failed" -eq 0 ]; then
		echo "PASS: auth ring"
		exit 0
	fi
	exit 1
fi

nonce=0x25a5eedc0ffee001
job=authjob
layout=(--keys 4 --key-elems 6000 --optimizer sgd --lr 0.01)

edit_config()
{
	phubrack config-edit "$1" "c['jobs'] = [{'name': '$job', 'nonce': '$nonce', \
'workers': 2, 'auth': 'required', 'optimizer': {'type': 'sgd', 'lr': 0.01}}]"
}

rack_up 3
# The on-path host: the bridge forwards every frame to every port, worker 3 listens to all.
ip -n "$rack-tor" link set br0 type bridge ageing_time 0 ||
	{ echo "FAIL: cannot make the ToR flood"; exit 1; }
ip -n "$rack-w3" link set eth0 promisc on

telemetry "$tmp/before.json" /phub/stats
ATTACKER_IP="10.$id.0.103" ip netns exec "$rack-w3" python3 "$attacker" eth0 "$server" 5000 \
	"$tmp/attack.json" 2>"$tmp/attack.err" &
attacker_pid=$!
sleep 1
bench_bg "$tmp/auth.json" 2 "$rack-w" --auth --job "$job" --nonce "$nonce" "${layout[@]}" \
	--iterations 6000
wait "$attacker_pid" || { fail "the attacker failed"; cat "$tmp/attack.err"; }
# Still running when the attack ends: the attempts met a live session.
telemetry "$tmp/during.json" /phub/jobs
phubrack query '"   jobs when the attack ended: %s" % [(j["name"], j["joined"]) for j in
	t.get("/phub/jobs", {}).values()]' "$tmp/during.json"
bench_wait
exact "$tmp/auth.json"
summary "authenticated job under attack" "$tmp/auth.json"
sleep 1.5	# the control plane's counters reach telemetry within a second
telemetry "$tmp/after.json" /phub/stats

python3 - "$tmp/before.json" "$tmp/after.json" "$tmp/attack.json" "$tmp/during.json" \
	"$job" <<'PY' || fail "the PBox's counters do not match the attack"
import json, sys
before, after, attack, during = (json.load(open(f)) for f in sys.argv[1:5])
job = sys.argv[5]
a, b = before["/phub/stats"].get("drops", {}), after["/phub/stats"].get("drops", {})
delta = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}
delta = {k: v for k, v in delta.items() if v}
bad = []
print("attacker: recorded %d frames (%d JOIN, %d authenticated PUSH), sent %d:" %
      (attack["recorded"], attack["joins_seen"], attack["pushes_seen"], attack["sent"]))
print("  ", ", ".join(f"{k} {v}" for k, v in attack.get("attempts", {}).items()))
print("   PBox counted:", {k: v for k, v in sorted(delta.items())})
if attack["join_nonces_in_clear"] != 0:
    bad.append(f"{attack['join_nonces_in_clear']} JOINs carried the nonce in clear")
if attack["plain_pushes_seen"] != 0:
    bad.append(f"{attack['plain_pushes_seen']} PUSHes of the job without a MAC")
if not attack.get("expect"):
    bad.append("the attacker recorded nothing to attack with")
for reason, n in attack.get("expect", {}).items():
    if delta.get(reason, 0) != n:
        bad.append(f"{reason}: sent {n}, counted {delta.get(reason, 0)}")
# Nothing else under an auth reason: the job's own datagrams all passed.
for reason in ("auth_unexpected", "auth_wrong_channel", "bad_auth_ext"):
    if delta.get(reason, 0):
        bad.append(f"{reason}: {delta[reason]} without a cause")
if job not in [j["name"] for j in during.get("/phub/jobs", {}).values()]:
    bad.append("the job had ended before the attack did: the attempts met no session")
if bad:
    print("  wrong:", *bad, sep="\n    ")
    sys.exit(1)
PY

# A worker without auth: refused at JOIN, told why.
if timeout 60 "$bench_bin" --server "$server" --workers 1 --netns-prefix "$rack-w" --job "$job" \
	--nonce "$nonce" "${layout[@]}" --iterations 2 --connect-timeout-ms 5000 --quiet \
	>"$tmp/plain.json" 2>"$tmp/plain.err"; then
	fail "a worker without auth joined the authenticated job"
fi
grep -q 'requires authenticated JOIN' "$tmp/plain.err" ||
	{ fail "the plain JOIN was not refused with the reason"; cat "$tmp/plain.err"; }

rack_down_check
if [ "$failed" -eq 0 ]; then
	echo "PASS: auth rack"
	exit 0
fi
exit 1
