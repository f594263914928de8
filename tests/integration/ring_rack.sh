#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Jobs across racks (issue "Racks of PBoxes", docs/hierarchy.md): a virtual multi-rack of R racks,
# each with its own ToR, PBox (one data lcore, adaptive idle) and workers, the PBoxes' uplinks on
# one spine; phub-bench puts a job's ranks across the racks (--servers), each rank joining its own
# rack's PBox with its global rank and the total world size, and verifies every model.
#
#                          R-spine: bridge br0 (--spine-rate, --spine-netem)
#              +-------------------+-------------------+
#             up0                 up1                 up2
#   R.0-pbox: uplink       R.1-pbox: uplink     R.2-pbox: uplink    10.(I+Q).0.(q+1)
#             p0 (ToR R.0-tor)     p0 (R.1-tor)        p0 (R.2-tor)  10.(I+q).0.1
#             workers R.0-w*       workers R.1-w*      workers R.2-w*
#
# Scenarios:
#   ring-topology       runs on any PBox: the multi-rack's namespaces, addresses, spine links
#                       (rate and impairment), the ring keys of every config, datagrams across
#                       the spine, each rack's PBox serving a single-rack job verified with the
#                       multi-rack up (configs stripped of the ring keys), a flat job across the
#                       routed spine (--routed), refusals, down.
#   ring-2x2            2 racks x 2 workers, exact (fp32, sgd), /phub/ring answers
#   ring-3x123          3 racks of 1, 2, 3 workers; odd key sizes and a key over 1M elements
#   ring-fp16-adam      fp16 and Adam, within the tolerance of the dtype
#   ring-loss           5% loss and 5% duplication on every spine link (both ways): exact
#   ring-deterministic  random gradients, deterministic sums: two runs, the same model bits
#   ring-pbox-killed    kill -9 of rack 1's PBox mid-training: every rank of every rack fails
#                       within the bound, rack 0's naming rack1
#   ring-hostile        a job across the racks and a job local to rack 0 on the same PBoxes,
#                       while a host on the spine sends ring datagrams with guessed tokens to
#                       rack 0's uplink: each dropped as bad_token, both jobs exact
# All but ring-topology need the PBox's ring (name, peers[].port, jobs[].racks): until it is
# there the PBox refuses their configs and they fail, saying so.
#
# usage: ring_rack.sh VIRTUAL_RACK PHUB_PBOX PHUB_BENCH SCENARIO [PHUB_HOSTILE]
# (PHUB_HOSTILE, tests/integration/phub_hostile.c: for ring-hostile.)
# Like the other rack tests, run one at a time on a machine: flock /tmp/phub-rack.lock meson test
# -C build ring-2x2 (the script takes no lock itself, so that it never waits on its own runner).
# Exits 77 with the reason when it cannot run here (not root, no netns, no /dev/net/tun).
set -uo pipefail

vrack=$1
pbox_bin=$2
bench_bin=$3
scenario=$4
hostile_bin=${5:-}

if ! ip netns list >/dev/null 2>&1; then
	echo "SKIP: no network namespaces here (ip netns)"
	exit 77
fi
# shellcheck source=tests/integration/rack_lib.sh
. "$(dirname "$0")/rack_lib.sh"
# rack_lib: root and /dev/net/tun or 77; the name and id of this scenario's (multi-)rack (ids
# 150 .. 249: its racks and spine take I .. I+3 at most), $tmp, cleanup on exit (the bench_pids,
# the multi-rack, $tmp); phubrack, fail, expect.
lib_init "$scenario"
name=$rack
nonce=0x5ad1c0ffee7e4b31
nonce_b=0x7e11d00d2b9a4c63
state_root=${PHUB_VRACK_STATE_DIR:-/run/phub-vrack}

# step WHAT: a line in the log with the seconds since the start.
step()
{
	echo "[${SECONDS}s] $*"
}

# check WHAT CMD...: CMD must succeed.
check()
{
	local what=$1
	shift
	"$@" >/dev/null 2>&1 || fail "$what"
}

# multi_up RACKS WORKERS [virtual-rack up options...]: the multi-rack, one data lcore per PBox;
# racks_spec is phub-bench's --servers for it (every worker of every rack a rank).
multi_up()
{
	local racks=$1 workers=$2 r
	local -a counts
	shift 2
	"$vrack" down --name "$name" >/dev/null 2>&1
	"$vrack" up --name "$name" --racks "$racks" --id "$id" --workers "$workers" --lcores 1 \
		--memory-mb 512 "$@" >"$tmp/up.log" 2>&1 ||
		{ cat "$tmp/up.log"; echo "FAIL: the multi-rack did not come up"; exit 1; }
	IFS=, read -ra counts <<<"$workers"
	racks_spec=
	for ((r = 0; r < racks; r++)); do
		racks_spec+="${racks_spec:+,}10.$((id + r)).0.1:${counts[r]:-${counts[0]}}"
	done
	n_racks=$racks
	step "multi-rack $name up: $racks racks, --servers $racks_spec"
}

# config Q: rack Q's PBox config.
config()
{
	echo "$state_root/$name.$1/pbox.json"
}

# edit_configs STATEMENTS: Python statements on every rack's config c.
edit_configs()
{
	local r
	for ((r = 0; r < n_racks; r++)); do
		phubrack config-edit "$(config "$r")" "$1" ||
			{ echo "FAIL: editing $(config "$r")"; exit 1; }
	done
}

# start_pboxes: every rack's PBox; a PBox that refuses its config (no ring yet) ends the test.
start_pboxes()
{
	local r
	for ((r = 0; r < n_racks; r++)); do
		if ! "$vrack" pbox-start --name "$name" --rack "$r" --bin "$pbox_bin" \
			>"$tmp/pbox-start-$r.log" 2>&1; then
			cat "$tmp/pbox-start-$r.log"
			echo "FAIL: rack $r's PBox did not start on its config (ring keys: name, peers," \
				"jobs[].racks; is the PBox's ring there?)"
			exit 1
		fi
	done
	step "PBoxes started"
}

# ring_bench OUT [phub-bench options...]: every rank of the ring job, each from its rack.
ring_bench()
{
	local out=$1
	shift
	timeout 200 "$bench_bin" --servers "$racks_spec" --netns-prefix "$name.%r-w" --job ring \
		--nonce "$nonce" --json --quiet --timeout 60 --connect-timeout-ms 30000 "$@" \
		>"$out" 2>"$out.err"
	local rc=$?
	step "phub-bench $out: exit $rc, $(phubrack brief ring "$out" 2>/dev/null)"
	if [ $rc -ne 0 ]; then
		fail "phub-bench --servers $racks_spec $* exited $rc"
		tail -n 5 "$out.err"
	fi
	return $rc
}

expect()
{
	phubrack expect "$@" || fail "report $1 does not hold: ${*:2}"
}

# rack_telemetry Q COMMAND...: rack Q's PBox's answers, merged.
rack_telemetry()
{
	local r=$1
	shift
	printf '%s\n' "$@" | ip netns exec "$name.$r-pbox" dpdk-telemetry.py -f "phub-$name.$r" \
		2>/dev/null | phubrack merge
}

# pboxes_stop: each PBox stops on SIGTERM and logged no error.
pboxes_stop()
{
	local r
	for ((r = 0; r < n_racks; r++)); do
		"$vrack" pbox-stop --name "$name" --rack "$r" >/dev/null 2>&1 ||
			fail "rack $r's PBox did not stop on SIGTERM"
		grep -q 'phub.pbox: stopped:' "$state_root/$name.$r/pbox.log" ||
			fail "rack $r's PBox did not log its clean stop"
	done
}

# A layout of odd keys, a key over 1M elements among them (4.4 MB in fp32).
odd_layout=$tmp/odd.json
printf '[1, 3, 7, 351, 353, 1000, 8097, 50000, 1048577, 17]\n' >"$odd_layout"

case $scenario in
ring-topology)
	step "refusals"
	# Refusals first: nothing is made. Options separated by |.
	for bad in "--ring-job|ring:$nonce" "--racks|2|--ring-job|ring:0x1" \
		"--racks|2|--config|/tmp/x.json" "--racks|17" "--racks|2|--id|253" \
		"--racks|2|--workers|1,2,3" "--racks|2|--spine-netem|r2:loss 1%" \
		"--racks|2|--netem|r0:w3:loss 1%" "--racks|2|--spine-rate|1gbit|--lcores|x"; do
		IFS='|' read -ra args <<<"$bad"
		if "$vrack" up --name "$name" --id "$id" "${args[@]}" >"$tmp/refused.log" 2>&1; then
			fail "up ${args[*]} was accepted"
			"$vrack" down --name "$name" >/dev/null 2>&1
		fi
	done
	check "a refused up left something behind" test -z "$(ip netns list | grep "^$name")"

	step "multi-rack up"
	multi_up 2 2 --spine-rate 100mbit --spine-netem "r1:tx:loss 5% duplicate 5%" --routed \
		--ring-job "ring:$nonce" --ring-job "local2:$nonce_b:1,2:fp16:adam:deterministic"
	spine_net=10.$((id + 2)).0
	for ns in "$name-spine" "$name.0-tor" "$name.0-pbox" "$name.0-w1" "$name.0-w2" \
		"$name.1-tor" "$name.1-pbox" "$name.1-w1" "$name.1-w2"; do
		check "no namespace $ns" test -e "/run/netns/$ns"
	done
	check "no uplink up0 in the spine's bridge" \
		sh -c "ip -n $name-spine -br link show master br0 | grep -q '^up0@'"
	check "no uplink up1 in the spine's bridge" \
		sh -c "ip -n $name-spine -br link show master br0 | grep -q '^up1@'"
	check "worker 2 of rack 1 is not 10.$((id + 1)).0.102" \
		sh -c "ip -n $name.1-w2 -br -4 addr show eth0 | grep -q '10.$((id + 1)).0.102/24'"
	check "no tbf on rack 0's spine link (spine side)" \
		sh -c "tc -n $name-spine qdisc show dev up0 | grep -q 'tbf.*rate 100Mbit'"
	check "no tbf on rack 1's uplink (PBox side)" \
		sh -c "tc -n $name.1-pbox qdisc show dev pv1 | grep -q 'tbf.*rate 100Mbit'"
	check "no impairment program on rack 1's uplink" \
		sh -c "tc -n $name.1-pbox filter show dev pv1 egress | grep -q impair-loss50000-dup50000"
	check "no tbf on rack 1's ToR link to the spine (--routed)" \
		sh -c "tc -n $name.1-tor qdisc show dev sp0 | grep -q 'tbf.*rate 100Mbit'"
	check "no impairment on rack 1's ToR link to the spine (--routed)" \
		sh -c "tc -n $name.1-tor filter show dev sp0 egress | grep -q impair-loss50000"
	check "rack 1's workers have no route to rack 0 through their ToR (--routed)" \
		sh -c "ip -n $name.1-w2 route | grep -q '^10.$id.0.0/24 via 10.$((id + 1)).0.254'"
	check "rack 0's uplink is impaired (only rack 1's tx was asked for)" \
		sh -c "! tc -n $name.0-pbox filter show dev pv1 egress | grep -q impair"
	for r in 0 1; do
		q=$((1 - r))
		check "rack $r's config lacks its ring keys" phubrack holds "(
t['name'] == 'rack$r'
and [p['name'] for p in t['ports']] == ['p0', 'uplink']
and t['ports'][1]['ipv4'] == '$spine_net.$((r + 1))/24'
and t['ports'][1]['device'] == 'net_tap1,iface=pt1'
and t['ports'][0]['ipv4'] == '10.$((id + r)).0.1/24'
and t['peers'] == [{'name': 'rack$q', 'ipv4': '$spine_net.$((q + 1))', 'udp_port': 47000,
                    'port': 'uplink'}]
and t['jobs'][0] == {'name': 'ring', 'nonce': '$nonce', 'workers': 4,
                     'racks': [{'pbox': 'rack0', 'ranks': 2}, {'pbox': 'rack1', 'ranks': 2}]}
and t['jobs'][1]['workers'] == 3 and t['jobs'][1]['deterministic'] is True
and t['jobs'][1]['racks'][1] == {'pbox': 'rack1', 'ranks': 2}
and t['jobs'][1]['optimizer'] == {'type': 'adam'} and t['jobs'][1]['dtype'] == 'fp16')
" "$(config "$r")"
	done
	step "status, exec, netem"
	"$vrack" status --name "$name" >"$tmp/status.log" 2>&1 || fail "status of the multi-rack"
	for want in "racks=2" "namespace $name-spine" "rack $name.1:" "namespace $name.1-w2" \
		"impairment (BPF) on pv1"; do
		grep -qF "$want" "$tmp/status.log" || fail "status does not show '$want'"
	done
	check "exec --spine" "$vrack" exec --name "$name" --spine -- ip link show br0
	check "exec --rack 1 --worker 2" "$vrack" exec --name "$name" --rack 1 --worker 2 -- true
	check "exec --name R.1 --worker 2" "$vrack" exec --name "$name.1" --worker 2 -- true
	check "exec without --rack on a multi-rack was accepted" \
		sh -c "! '$vrack' exec --name $name --worker 1 -- true"
	check "netem --spine" "$vrack" netem --name "$name" --spine 0 --dir rx rate 100mbit

	step "datagrams across the spine"
	# Datagrams across the spine, PBox namespace to PBox namespace: the kernels borrow the
	# uplinks' addresses until the PBoxes start (rack 1's tx side loses and duplicates 5%).
	for r in 0 1; do
		ip -n "$name.$r-pbox" addr add "$spine_net.$((r + 1))/24" dev pbr1
	done
	ip netns exec "$name.1-pbox" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 9999))
s.settimeout(5)
try:
    while True:
        data, peer = s.recvfrom(2048)
        s.sendto(data, peer)
except socket.timeout:
    pass
' "$spine_net.2" &
	bench_pids+=($!)
	sleep 0.5
	got=$(ip netns exec "$name.0-pbox" python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
seen = set()
def drain(wait):
    s.settimeout(wait)
    try:
        while True:
            seen.add(s.recv(2048).split(b".")[0])
    except socket.timeout:
        pass
for i in range(100):
    s.settimeout(None)  # a full send buffer waits; only the receive is bounded
    s.sendto(b"%d" % i + b"." * 1000, (sys.argv[1], 9999))
    drain(0.005)
drain(1.0)
print(len(seen))
' "$spine_net.2")
	echo "across the spine: $got of 100 datagrams came back (5% loss one way)"
	[ "${got:-0}" -ge 80 ] || fail "only ${got:-0} of 100 datagrams crossed the spine and back"
	for r in 0 1; do
		ip -n "$name.$r-pbox" addr del "$spine_net.$((r + 1))/24" dev pbr1
	done

	step "single-rack jobs"
	# Each rack's PBox serves its own workers with the multi-rack up. Today's PBox has no
	# ring: its configs lose the ring keys and the uplink (ring-strip) first.
	for r in 0 1; do
		phubrack ring-strip "$(config "$r")" || fail "ring-strip of rack $r's config"
	done
	start_pboxes
	for r in 0 1; do
		timeout 120 "$bench_bin" --server "10.$((id + r)).0.1" --workers 2 \
			--netns-prefix "$name.$r-w" --job "solo$r" --keys 8 --key-elems 5000 \
			--iterations 5 --json --quiet --timeout 60 >"$tmp/solo$r.json" \
			2>"$tmp/solo$r.err" || { fail "single-rack job on rack $r"; tail -3 "$tmp/solo$r.err"; }
		expect "$tmp/solo$r.json" 'r["verified"]' 'r["bitwise"]'
	done
	# phub-bench's --servers form with one rack: its namespaces by %r, against rack 1's PBox.
	timeout 120 "$bench_bin" --servers "10.$((id + 1)).0.1:2" --netns-prefixes "$name.1-w" \
		--job onerack --keys 4 --key-elems 3000 --iterations 3 --json --quiet --timeout 60 \
		>"$tmp/one.json" 2>"$tmp/one.err" || { fail "--servers with one rack"; tail -3 "$tmp/one.err"; }
	expect "$tmp/one.json" 'r["verified"]' 'r["bitwise"]' 'len(r["model_digest"]) == 16'
	# --routed: a flat job, rack 1's workers on rack 0's PBox across the spine and both ToRs.
	step "a flat job across the routed spine"
	timeout 120 "$bench_bin" --racks "10.$id.0.1:2,10.$id.0.1:2" --netns-prefix "$name.%r-w" \
		--job flat --keys 4 --key-elems 3000 --iterations 3 --json --quiet --timeout 60 \
		>"$tmp/flat.json" 2>"$tmp/flat.err" ||
		{ fail "a flat job across the spine"; tail -3 "$tmp/flat.err"; }
	expect "$tmp/flat.json" 'r["verified"]' 'r["bitwise"]' 'r["workers"] == 4'
	step "stop and down"
	pboxes_stop

	"$vrack" down --name "$name" >"$tmp/down.log" 2>&1 || fail "down of the multi-rack"
	check "namespaces left after down" test -z "$(ip netns list | grep "^$name")"
	check "state left after down" \
		sh -c "! ls -d '$state_root/$name' '$state_root/$name'.* 2>/dev/null | grep -q ."
	check "down of a multi-rack that is gone" "$vrack" down --name "$name"
	;;
ring-2x2)
	multi_up 2 2 --ring-job "ring:$nonce"
	start_pboxes
	ring_bench "$tmp/r.json" --keys 8 --key-elems 20000 --iterations 30 &
	bench_pids+=($!)
	# While the job runs, rack 0's /phub/ring names its neighbour.
	for _ in $(seq 100); do
		rack_telemetry 0 /phub/ring >"$tmp/ring0.json"
		grep -q rack1 "$tmp/ring0.json" && break
		kill -0 "${bench_pids[0]}" 2>/dev/null || break
		sleep 0.2
	done
	grep -q rack1 "$tmp/ring0.json" ||
		fail "rack 0's /phub/ring did not name its peer rack1 while the job ran"
	# ring_bench ran in a subshell: its failure is known here by its status.
	if wait "${bench_pids[0]}"; then
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]' 'r["workers"] == 4'
	else
		fail "the ring job failed"
	fi
	bench_pids=()
	pboxes_stop
	;;
ring-3x123)
	multi_up 3 1,2,3 --ring-job "ring:$nonce"
	start_pboxes
	ring_bench "$tmp/r.json" --layout "$odd_layout" --iterations 4 &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]' 'r["workers"] == 6' \
			'[k["first_rank"] for k in r["racks"]] == [0, 1, 3]'
	pboxes_stop
	;;
ring-fp16-adam)
	multi_up 2 2 --ring-job "ring:$nonce::fp16:adam"
	start_pboxes
	ring_bench "$tmp/r.json" --keys 6 --key-elems 12000 --iterations 8 --dtype fp16 \
		--optimizer adam --lr 0.001 &&
		expect "$tmp/r.json" 'r["verified"]' 'r["dtype"] == "fp16"' 'r["optimizer"] == "adam"'
	pboxes_stop
	;;
ring-loss)
	multi_up 2 2 --ring-job "ring:$nonce" --spine-netem "loss 5% duplicate 5%"
	start_pboxes
	ring_bench "$tmp/r.json" --keys 8 --key-elems 20000 --iterations 8 &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]'
	pboxes_stop
	;;
ring-deterministic)
	# Two jobs of the same shape, one run each: the same model bits.
	multi_up 2 2 --ring-job "ringa:$nonce:::sgd:deterministic" \
		--ring-job "ringb:$nonce_b:::sgd:deterministic"
	start_pboxes
	timeout 200 "$bench_bin" --racks "$racks_spec" --netns-prefix "$name.%r-w" --job ringa \
		--nonce "$nonce" --json --quiet --timeout 60 --keys 6 --key-elems 15000 \
		--iterations 6 --gradients random --deterministic >"$tmp/a.json" 2>"$tmp/a.err" ||
		{ fail "run a"; tail -3 "$tmp/a.err"; }
	timeout 200 "$bench_bin" --racks "$racks_spec" --netns-prefix "$name.%r-w" --job ringb \
		--nonce "$nonce_b" --json --quiet --timeout 60 --keys 6 --key-elems 15000 \
		--iterations 6 --gradients random --deterministic >"$tmp/b.json" 2>"$tmp/b.err" ||
		{ fail "run b"; tail -3 "$tmp/b.err"; }
	expect "$tmp/a.json" 'r["verified"]' 'len(r["model_digest"]) == 16'
	expect "$tmp/b.json" 'r["verified"]' 'len(r["model_digest"]) == 16'
	# Compared when both ran to the end (a failed run has no run-wide digest, and failed).
	if phubrack holds '"model_digest" in t0 and "model_digest" in t1' "$tmp/a.json" \
		"$tmp/b.json"; then
		echo "model digests: $(phubrack query 't["model_digest"]' "$tmp/a.json")," \
			"$(phubrack query 't["model_digest"]' "$tmp/b.json")"
		phubrack holds 't0["model_digest"] == t1["model_digest"]' "$tmp/a.json" \
			"$tmp/b.json" || fail "two deterministic runs ended with different models"
	fi
	pboxes_stop
	;;
ring-hostile)
	multi_up 2 2 --ring-job "ring:$nonce"
	start_pboxes
	# The ring job's workers wait 15 s after iteration 2: the spray comes while the job is
	# linked and alive whatever the machine's speed, and the uplink is quiet.
	ring_bench "$tmp/r.json" --keys 8 --key-elems 20000 --iterations 20 --pause-at 2:15000 &
	bench_pids+=($!)
	# A job of rack 0 alone beside it, on the same PBox and worker namespaces.
	timeout 200 "$bench_bin" --server "10.$id.0.1" --workers 2 --netns-prefix "$name.0-w" \
		--job local --nonce "$nonce_b" --keys 4 --key-elems 10000 --iterations 40 --json \
		--quiet --timeout 60 >"$tmp/local.json" 2>"$tmp/local.err" &
	bench_pids+=($!)
	# The ring job's id on rack 0's PBox, once it is linked to its neighbour.
	ring_id=
	for _ in $(seq 100); do
		rack_telemetry 0 /phub/ring >"$tmp/ring0.json"
		ring_id=$(phubrack query \
			'[k for k, j in t["/phub/ring"]["jobs"].items() if j["linked"]][0]' \
			"$tmp/ring0.json" 2>/dev/null) && break
		sleep 0.1
	done
	[ -n "$ring_id" ] || fail "the ring job never showed linked in rack 0's /phub/ring"
	bad_token() {
		rack_telemetry 0 /phub/stats |
			phubrack query --default 0 't["/phub/stats"]["drops"]["bad_token"]'
	}
	before=$(bad_token)
	# A host on the spine (not a ring peer) sprays rack 0's uplink data port.
	spine_net=10.$((id + 2)).0
	ip -n "$name-spine" addr add "$spine_net.200/24" dev br0
	ip netns exec "$name-spine" "$hostile_bin" --server "$spine_net.1" --port 47001 \
		--ring-spray "${ring_id:-1}" --repeat 50 >"$tmp/spray.json" 2>"$tmp/spray.err" ||
		{ fail "phub-hostile --ring-spray"; cat "$tmp/spray.err"; }
	sent=$(phubrack query 't["sent"]' "$tmp/spray.json" 2>/dev/null || echo 0)
	# The PBox counts what it took off the wire; give the last datagrams a moment.
	for _ in $(seq 50); do
		after=$(bad_token)
		[ $((after - before)) -ge "$sent" ] && break
		sleep 0.1
	done
	echo "ring spray: $sent datagrams with guessed tokens, bad_token $before -> $after"
	kill -0 "${bench_pids[0]}" 2>/dev/null ||
		fail "the ring job ended before the spray was counted (make its pause longer)"
	[ "$sent" -eq 200 ] || fail "phub-hostile sent $sent ring datagrams, not 200"
	[ $((after - before)) -ge "$sent" ] ||
		fail "rack 0 counted $((after - before)) bad_token drops for $sent guessed tokens"
	if wait "${bench_pids[0]}"; then
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]' 'r["workers"] == 4'
	else
		fail "the ring job failed"
	fi
	if wait "${bench_pids[1]}"; then
		expect "$tmp/local.json" 'r["verified"]' 'r["bitwise"]' 'r["workers"] == 2'
	else
		fail "the local job beside the ring job failed"
		tail -n 3 "$tmp/local.err"
	fi
	bench_pids=()
	pboxes_stop
	;;
ring-pbox-killed)
	dead_ms=1500
	multi_up 2 2 --ring-job "ring:$nonce"
	edit_configs "c.setdefault('timeouts', {})['worker_dead_ms'] = $dead_ms"
	start_pboxes
	# Each global rank a phub-bench of its own, so that each fails (or not) on its own.
	for g in 0 1 2 3; do
		"$bench_bin" --racks "$racks_spec" --netns-prefix "$name.%r-w" --job ring \
			--nonce "$nonce" --rank "$g" --json --timeout 60 --connect-timeout-ms 30000 \
			--dead-ms "$dead_ms" --keys 4 --key-elems 8000 --iterations 100000 \
			>"$tmp/rank$g.json" 2>"$tmp/rank$g.err" &
		bench_pids[g]=$!
	done
	# Mid-training: every rank past iteration 3.
	for _ in $(seq 300); do
		ok=1
		for g in 0 1 2 3; do
			grep -qE 'iteration ([3-9]|[1-9][0-9]+)/' "$tmp/rank$g.err" || ok=0
		done
		[ "$ok" -eq 1 ] && break
		sleep 0.1
	done
	[ "$ok" -eq 1 ] || fail "the job did not reach iteration 3 on every rank"
	pbox1=$(cat "$state_root/$name.1/pbox.pid")
	kill -KILL "$pbox1"
	killed_at=$(date +%s%N)
	# Every rank must fail within worker_dead_ms, plus slack for a loaded 2-core machine.
	bound_ms=$((dead_ms + 4000))
	for g in 0 1 2 3; do
		rc=0
		while kill -0 "${bench_pids[g]}" 2>/dev/null; do
			[ $(( ($(date +%s%N) - killed_at) / 1000000 )) -lt $((bound_ms + 5000)) ] || break
			sleep 0.05
		done
		if kill -0 "${bench_pids[g]}" 2>/dev/null; then
			fail "rank $g still runs $((bound_ms + 5000)) ms after rack 1's PBox was killed"
			kill -KILL "${bench_pids[g]}" 2>/dev/null
			continue
		fi
		took=$(( ($(date +%s%N) - killed_at) / 1000000 ))
		wait "${bench_pids[g]}" || rc=$?
		echo "rank $g: exit $rc, $took ms after the kill: $(grep -h 'phub-bench: rank' \
			"$tmp/rank$g.err" | tail -n 1)"
		[ "$rc" -eq 1 ] || fail "rank $g exited $rc, expected 1 (failed)"
		[ "$took" -le "$bound_ms" ] ||
			fail "rank $g failed $took ms after the kill (bound $bound_ms ms)"
		if [ "$g" -lt 2 ]; then
			# Rack 0's ranks hear it from their own PBox: the error names the rack.
			grep -q 'rack1' "$tmp/rank$g.err" ||
				fail "rank $g (rack 0) failed without naming rack1"
		else
			grep -qE "rack1|10\.$((id + 1))\.0\.1" "$tmp/rank$g.err" ||
				fail "rank $g (rack 1) failed without naming its PBox"
		fi
	done
	bench_pids=()
	"$vrack" pbox-stop --name "$name" --rack 0 >/dev/null 2>&1 ||
		fail "rack 0's PBox did not stop on SIGTERM after its peer died"
	;;
*)
	echo "unknown scenario $scenario"
	exit 2
	;;
esac

if [ "$failed" -ne 0 ]; then
	for f in "$state_root/$name".*/pbox.log; do
		[ -f "$f" ] || continue
		echo "--- $f ends with:"
		grep -v 'lcore [0-9]*: serving' "$f" | tail -n 15
	done
	exit 1
fi
echo "PASS: $scenario"
exit 0
