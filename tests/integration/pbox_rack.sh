#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# End-to-end exchanges through the DPDK PBox in a virtual rack: phub-bench workers in their
# own namespaces push gradients, the PBox sums and optimizes them, and every worker checks its
# model against a local reference. One scenario per run; the rack is always torn down.
#
#                      R-tor: bridge br0
#          +--------------+-----------+---- ... ---+
#         tp0            tw1         tw2          twN
#          |              |           |            |
#   R-pbox: pv0 - pbr0 - pt0 (net_tap, 2 queues, BPF steering) - phub-pbox lcores 1, 2
#                        R-w1        R-w2   ...   R-wN: phub-bench ranks 0 .. N-1
#
# elastic: a job declared with on_worker_dead "continue" loses rank 3 (SIGKILL after iteration
# 4); the PBox removes it and the three others finish with their 3-rank reference's model.
# elastic-rejoin: the same, then rank 3 starts again and is taken back at an iteration boundary.
#
# restart and sigterm stop the PBox in the middle of the run (SIGKILL, SIGTERM at an
# iteration boundary) and start it again on its checkpoints in $STATE_ROOT/R/checkpoints.
#
# usage: pbox_rack.sh VIRTUAL_RACK PHUB_PBOX PHUB_BENCH SCENARIO [PHUB_HOSTILE]
# (PHUB_HOSTILE, tests/integration/phub_hostile.c: for no-steering.)
# Exits 77 with the reason when it cannot run here (not root, no /dev/net/tun).
set -uo pipefail

vrack=$1
pbox_bin=$2
bench_bin=$3
scenario=$4
hostile_bin=${5:-}

if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: the virtual rack needs root (network namespaces)"
	exit 77
fi
if [ ! -c /dev/net/tun ]; then
	echo "SKIP: no /dev/net/tun for net_tap"
	exit 77
fi

# A rack name and id of its own per scenario, so that scenarios never meet.
id=$(( (16#$(printf '%s' "$scenario" | md5sum | cut -c1-4) % 150) + 100 ))
rack="pt$id"
server="10.$id.0.1"
tmp=$(mktemp -d)
failed=0
pbox_args=()
# Python statements on the rack's config c (a dict), run before the PBox starts.
config_edit=
python_dir=$(cd "$(dirname "$0")/../../python" && pwd)
# Ranks run as processes of their own (start_rank), by rank.
rank_pids=()

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup()
{
	local pid
	for pid in "${rank_pids[@]}"; do
		kill -KILL "$pid" 2>/dev/null
	done
	"$vrack" down --name "$rack" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT

# phubrack COMMAND ARGS...: the Python these tests need, python/phubrack (its __main__.py
# lists the commands).
phubrack()
{
	PYTHONPATH=$python_dir PYTHONDONTWRITEBYTECODE=1 python3 -m phubrack "$@"
}

fail()
{
	echo "FAIL: $*"
	failed=1
}

# rack WORKERS [virtual-rack up options...]: bring up the rack and start the PBox.
rack()
{
	local workers=$1
	shift
	"$vrack" down --name "$rack" >/dev/null 2>&1
	"$vrack" up --name "$rack" --id "$id" --workers "$workers" "$@" >"$tmp/up.log" 2>&1 ||
		{ cat "$tmp/up.log"; echo "FAIL: the rack did not come up"; exit 1; }
	if [ -n "$config_edit" ]; then
		phubrack config-edit "/run/phub-vrack/$rack/pbox.json" "$config_edit" ||
			{ echo "FAIL: cannot edit the rack's config"; exit 1; }
	fi
	"$vrack" pbox-start --name "$rack" --bin "$pbox_bin" -- "${pbox_args[@]}" \
		>"$tmp/pbox-start.log" 2>&1 ||
		{ cat "$tmp/pbox-start.log"; echo "FAIL: the PBox did not start"; exit 1; }
}

# bench OUT WORKERS [phub-bench options...]: run the workers, keep the JSON in OUT.
bench()
{
	local out=$1 workers=$2
	shift 2
	timeout 240 "$bench_bin" --server "$server" --workers "$workers" \
		--netns-prefix "$rack-w" --json --quiet --timeout 120 "$@" >"$out" 2>"$out.err"
	local rc=$?
	if [ $rc -ne 0 ]; then
		fail "phub-bench $* exited $rc"
		tail -n 5 "$out.err"
	fi
	return $rc
}

# expect OUT PYTHON-CONDITION...: conditions on the report r.
expect()
{
	phubrack expect "$@" || fail "report $1 does not hold: ${*:2}"
}

telemetry()
{
	printf '%s\n' "$@" | ip netns exec "$rack-pbox" dpdk-telemetry.py -f "phub-$rack" 2>/dev/null
}

state_dir=${PHUB_VRACK_STATE_DIR:-/run/phub-vrack}/$rack
ckpt_dir=$state_dir/checkpoints

# bench_bg OUT WORKERS [phub-bench options...]: run the workers in the background (bench_pid).
bench_bg()
{
	local out=$1 workers=$2
	shift 2
	timeout 240 "$bench_bin" --server "$server" --workers "$workers" \
		--netns-prefix "$rack-w" --json --quiet --timeout 120 "$@" >"$out" 2>"$out.err" &
	bench_pid=$!
}

# bench_wait OUT: the background run's exit status, its stderr on failure.
bench_wait()
{
	local out=$1 rc
	wait "$bench_pid"
	rc=$?
	if [ $rc -ne 0 ]; then
		fail "phub-bench exited $rc"
		tail -n 5 "$out.err"
	fi
	return $rc
}

# newest_ckpt: the iteration of the newest checkpoint file, -1 when there is none.
newest_ckpt()
{
	local f it=-1 n
	for f in "$ckpt_dir"/*.ckpt; do
		[ -e "$f" ] || continue
		n=${f%.ckpt}
		n=$((10#${n##*.}))
		[ "$n" -gt "$it" ] && it=$n
	done
	echo "$it"
}

# pbox_restart: start the PBox again; its first log is kept as pbox-1.log.
pbox_restart()
{
	cp "$state_dir/pbox.log" "$tmp/pbox-1.log"
	"$vrack" pbox-start --name "$rack" --bin "$pbox_bin" -- "${pbox_args[@]}" \
		>"$tmp/pbox-start2.log" 2>&1 ||
		{ cat "$tmp/pbox-start2.log"; echo "FAIL: the PBox did not start again"; exit 1; }
}

# start_rank OUT RANK WORKERS [phub-bench options...]: one rank as a phub-bench process of its
# own, in the background, so that it alone can be stopped or killed.
start_rank()
{
	local out=$1 r=$2 workers=$3
	shift 3
	"$bench_bin" --server "$server" --workers "$workers" --rank "$r" \
		--netns-prefix "$rack-w" --json --quiet --timeout 120 "$@" >"$out" 2>"$out.err" &
	rank_pids[r]=$!
}

# The worker process of rank R (the child of its phub-bench): the one that talks to the PBox.
rank_worker()
{
	pgrep -P "${rank_pids[$1]}" | head -n 1
}

# wait_job_iterations JOB N: until the job has finished N iterations (30 s at most).
wait_job_iterations()
{
	local i reached
	for i in $(seq 300); do
		reached=$(telemetry "/phub/job,$1" | phubrack query --default 0 \
			't["/phub/job"].get("iterations_done", 0)' 2>/dev/null)
		[ "${reached:-0}" -ge "$2" ] && return 0
		sleep 0.1
	done
	fail "job $1 did not reach iteration $2 (at ${reached:-none})"
	return 1
}

# A layout of keys that are not multiples of a segment (352 fp32 at MTU 1500) or of a chunk
# (8096 elements): tiny keys, a key of many chunks, odd sizes.
mixed_layout=$tmp/mixed.json
printf '[1, 3, 7, 351, 353, 1000, 8096, 8097, 50000, 17]\n' >"$mixed_layout"

case $scenario in
workers-1 | workers-2 | workers-3 | workers-4 | workers-8)
	n=${scenario#workers-}
	rack "$n"
	bench "$tmp/r.json" "$n" --layout "$mixed_layout" --iterations 4 --optimizer sgd &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]' "r['workers'] == $n"
	;;
tiny-keys)
	rack 2
	printf '[%s1]\n' "$(printf '1, %.0s' {1..199})" >"$tmp/tiny.json"
	bench "$tmp/r.json" 2 --layout "$tmp/tiny.json" --iterations 4 &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]' 'r["keys"] == 200'
	;;
big-key)
	rack 2
	bench "$tmp/r.json" 2 --keys 1 --key-elems 1000003 --iterations 3 &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]'
	;;
fp16 | bf16)
	rack 3
	bench "$tmp/r.json" 3 --layout "$mixed_layout" --iterations 4 --dtype "$scenario" &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]' "r['dtype'] == '$scenario'"
	;;
nesterov | adam)
	rack 3
	bench "$tmp/r.json" 3 --layout "$mixed_layout" --iterations 5 --optimizer "$scenario" \
		--lr 0.05 &&
		expect "$tmp/r.json" 'r["verified"]' "r['optimizer'] == '$scenario'"
	;;
two-jobs | priority-hold)
	# Two jobs with their own nonces at once on one PBox, each exact; priority-hold: every
	# datagram goes through the data lcores' P3 hold (config priority_hold), both still exact.
	[ "$scenario" = two-jobs ] || config_edit='c["priority_hold"] = 128'
	rack 4
	"$bench_bin" --server "$server" --workers 2 --netns-prefix "$rack-w" --json --quiet \
		--timeout 120 --job job-a --nonce 0x5ad1c0ffee7e4b31 --layout "$mixed_layout" \
		--iterations 5 >"$tmp/a.json" 2>"$tmp/a.err" &
	pid_a=$!
	# ranks of job b run in namespaces w3, w4: a prefix whose rank 0 lands on w3
	for i in 1 2; do
		ln -sf "/run/netns/$rack-w$((i + 2))" "/run/netns/$rack-b$i"
	done
	"$bench_bin" --server "$server" --workers 2 --netns-prefix "$rack-b" --json --quiet \
		--timeout 120 --job job-b --nonce 0x7e11d00d2b9a4c63 --keys 6 --key-elems 3000 \
		--optimizer nesterov --iterations 5 >"$tmp/b.json" 2>"$tmp/b.err" &
	pid_b=$!
	wait $pid_a || { fail "job a failed"; tail -n 5 "$tmp/a.err"; }
	wait $pid_b || { fail "job b failed"; tail -n 5 "$tmp/b.err"; }
	rm -f "/run/netns/$rack-b1" "/run/netns/$rack-b2"
	expect "$tmp/a.json" 'r["verified"]' 'r["bitwise"]' 'r["job"] == "job-a"'
	expect "$tmp/b.json" 'r["verified"]' 'r["job"] == "job-b"'
	[ "$scenario" = two-jobs ] || grep -q "P3 hold of 128 frames" "$state_dir/pbox.log" ||
		fail "the PBox's data lcores did not use the hold"
	;;
loss-1pct)
	# 1% loss both ways on worker 1's link: retransmissions and PULLs, still the exact model.
	rack 3 --netem "w1:loss 1%"
	bench "$tmp/r.json" 3 --layout "$mixed_layout" --iterations 8 &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]' \
			'r["retransmits"] + r["pulls"] > 0'
	;;
no-steering)
	# Without the BPF program the tun driver spreads datagrams by flow hash, and a PUSH sent
	# to another lcore's UDP port (a stale map) must reach the owner of its chunk all the
	# same: handed off, none lost, none added twice. The workers' run checks the sums; then
	# phub-hostile sends a job's whole initial round to the wrong lcore's port on purpose
	# and gets every MODEL back, so the hand-off is seen in every run, not by chance.
	[ -x "$hostile_bin" ] || { echo "FAIL: no phub-hostile (5th argument)"; exit 1; }
	pbox_args=(--no-steering)
	rack 3
	bench "$tmp/r.json" 3 --layout "$mixed_layout" --iterations 6 &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]'
	telemetry /phub/stats >"$tmp/before.json"
	ip netns exec "$rack-w1" "$hostile_bin" --server "$server" --misdirect >"$tmp/mis.json" ||
		fail "phub-hostile --misdirect: not every MODEL came back: $(cat "$tmp/mis.json")"
	telemetry /phub/stats /phub/ports >"$tmp/tel.json"
	PYTHONPATH=$python_dir python3 - "$tmp/before.json" "$tmp/tel.json" "$tmp/mis.json" \
		<<'PY' ||
import json, sys
from phubrack import telemetry
before, out = telemetry.load(sys.argv[1])["/phub/stats"], telemetry.load(sys.argv[2])
mis = json.load(open(sys.argv[3]))
s = out["/phub/stats"]
handed = s["handed_off"] - before["handed_off"]
print("misdirected:", mis, "handed off meanwhile:", handed, "drops:", s["drops"])
assert all(p["steering"] == "none" for p in out["/phub/ports"].values())
assert mis["models"] == mis["segments"] > 0
assert mis["wrong_port"] != mis["right_port"]
# Nothing else runs now. Each misdirected PUSH is handed off once (it reached the lcore of
# the port it was sent to, which hands it to the chunk's) or twice (the flow hash put it on
# the chunk's own lcore, which first hands it to the port's lcore, which hands it back).
assert mis["misdirected"] <= handed <= 2 * mis["misdirected"]
assert s["drops"].get("wrong_lcore", 0) == s["handed_off"]
assert set(s["drops"]) <= {"wrong_lcore", "not_for_us"}
PY
		fail "the misdirected PUSHes were not handed off once each, or datagrams were lost"
	;;
af-packet)
	# One port per lcore (af_packet, MTU 9000): the other steering layout.
	rack 2 --driver af_packet --ports 2 --lcores 2 --mtu 9000
	bench "$tmp/r.json" 2 --layout "$mixed_layout" --iterations 4 &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]'
	;;
mtu-mismatch)
	# A worker whose link is at 1500 while the PBox's ports are at 9000: its PUSHes would
	# leave as IP fragments the PBox never reassembles. The JOIN must fail at once, naming both
	# MTUs; the other worker, at 9000, is exact on its own.
	rack 2 --driver af_packet --ports 2 --lcores 2 --mtu 9000
	ip netns exec "$rack-w2" ip link set eth0 mtu 1500
	# rank 0 of a one-worker job joins from <prefix>1: point it at w2 with a prefix of its own
	ln -sf "/run/netns/$rack-w2" "/run/netns/$rack-s1"
	timeout 60 "$bench_bin" --server "$server" --workers 1 --job small-link \
		--keys 2 --key-elems 10000 --iterations 2 --json --quiet --timeout 20 \
		--netns-prefix "$rack-s" >"$tmp/bad.json" 2>"$tmp/bad.err"
	rc=$?
	rm -f "/run/netns/$rack-s1"
	[ $rc -ne 0 ] || fail "a worker on an MTU 1500 link joined a PBox at MTU 9000"
	grep -q "route to it has MTU 1500" "$tmp/bad.err" ||
		{ cat "$tmp/bad.err"; fail "the refusal does not name the route's MTU"; }
	bench "$tmp/r.json" 1 --keys 2 --key-elems 10000 --iterations 3 &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]'
	;;
af-xdp)
	# af_xdp ports: 4 workers, a 3.2 MB job in full-size datagrams. Frames above what the
	# UMEM chunk holds were dropped by the kernel and the initial round never finished.
	rack 4 --driver af_xdp
	bench "$tmp/r.json" 4 --keys 8 --key-elems 100000 --iterations 3 &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]'
	imissed=$(telemetry /phub/ports | python3 -c \
		'import json,sys; print(json.loads(sys.stdin.readline())["/phub/ports"]["p0"]["imissed"])')
	[ "$imissed" = 0 ] || fail "the af_xdp socket missed $imissed frames"
	# The PBox's XDP program passes what is not the PBox's to the kernel of R-pbox: an
	# address of its own on the same veth answers ping and TCP (an ssh-like session).
	grep -q "XDP program xdp_pbox on pv0" "$state_dir/pbox.log" ||
		fail "the PBox did not configure its XDP program"
	host="10.$id.0.250"
	ip -n "$rack-pbox" addr add "$host/24" dev pv0
	# ping, as three ICMP echo requests on a raw socket (iputils may not be installed).
	ip netns exec "$rack-w1" python3 -c '
import os, socket, struct, sys
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); r.settimeout(2)
for seq in range(3):
    body = struct.pack("!BBHHH", 8, 0, 0, os.getpid() & 0xffff, seq) + b"phub-ping"
    body = body[:2] + struct.pack("!H", csum(body + b"\0")) + body[4:]
    r.sendto(body, (sys.argv[1], 0))
    while True:
        pkt, src = r.recvfrom(2048)
        ihl = (pkt[0] & 15) * 4
        if src[0] == sys.argv[1] and pkt[ihl] == 0 and struct.unpack("!H", pkt[ihl + 6:ihl + 8])[0] == seq:
            break
print("3 echo replies")' "$host" >"$tmp/ping" 2>&1 ||
		{ cat "$tmp/ping"; fail "no ping through the af_xdp interface"; }
	ip netns exec "$rack-pbox" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 2222)); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.sendall(b"SSH-2.0-pbox-host " + c.recv(64))' "$host" &
	tcp_pid=$!
	sleep 0.5
	reply=$(ip netns exec "$rack-w1" python3 -c '
import socket, sys
c = socket.create_connection((sys.argv[1], 2222), timeout=10); c.sendall(b"hello")
print(c.recv(64).decode())' "$host") || true
	wait "$tcp_pid" || true
	[ "$reply" = "SSH-2.0-pbox-host hello" ] ||
		fail "no TCP session with the PBox host's kernel on the af_xdp interface: '$reply'"
	# And the PBox still serves after that traffic.
	bench "$tmp/r2.json" 2 --keys 4 --key-elems 50000 --iterations 2 --job again &&
		expect "$tmp/r2.json" 'r["verified"]'
	;;
resnet50-default-memory)
	# The README's model on a rack of default memory (--memory-mb unset): ResNet-50, Adam,
	# checkpoints on, beside af_packet's 16 KB mbuf pools. A rack of 512 MB refused it.
	rack 2 --driver af_packet --mtu 9000
	bench "$tmp/r.json" 2 --model resnet50 --iterations 2 --optimizer adam --lr 0.001 &&
		expect "$tmp/r.json" 'r["verified"]'
	;;
telemetry)
	# The counters agree with what the workers sent: 5 keys of one segment each, 3 ranks,
	# iterations + 1 rounds (the initial-model round), no loss.
	rack 3
	bench "$tmp/r.json" 3 --keys 5 --key-elems 100 --iterations 6 &&
		expect "$tmp/r.json" 'r["verified"]' 'r["retransmits"] == 0'
	telemetry /phub/stats /phub/lcores /phub/ports /phub/jobs >"$tmp/tel.json" ||
		fail "dpdk-telemetry.py failed"
	PYTHONPATH=$python_dir python3 - "$tmp/tel.json" <<'PY' ||
import sys
from phubrack import telemetry
out = telemetry.load(sys.argv[1])
s, lcores, ports = out["/phub/stats"], out["/phub/lcores"], out["/phub/ports"]
rounds, segments, workers = 7, 5, 3
checks = {
    "pushes": s["pushes"] == workers * segments * rounds,
    "segments_optimized": s["segments_optimized"] == segments * rounds,
    "models_sent": s["models_sent"] >= workers * segments * rounds,
    # tap ports take multi-segment frames: a payload under 2 KB (these are 400 bytes) is copied
    # behind each frame's headers, a larger one chained from the job's model memory; never
    # the fallback copy (a port that kept frames after its flush)
    "MODEL payloads inline or by reference":
        s["model_payloads_inline"] + s["model_payloads_by_reference"] == segments * rounds
        and s["model_payloads_inline"] == segments * rounds
        and s["model_payloads_copied"] == 0,
    "lcores add up": sum(l["pushes"] for l in lcores.values()) == s["pushes"],
    "both lcores worked": all(l["pushes"] > 0 for l in lcores.values()),
    "steering": all(p["steering"] == "tap_bpf" for p in ports.values()),
    "no wrong lcore": s["handed_off"] == 0,
    # ARP for the workers' own addresses is broadcast to the PBox too: "not_for_us"
    "nothing else dropped": set(s["drops"]) <= {"not_for_us"} and s["tx_dropped"] == 0,
    "no encode errors": s["encode_errors"] == 0,
    "rx matches port": s["rx_packets"] == sum(p["ipackets"] for p in ports.values()),
    "jobs freed": out["/phub/jobs"] == {},
}
bad = [k for k, ok in checks.items() if not ok]
print("telemetry:", {k: s[k] for k in ("pushes", "segments_optimized", "models_sent",
                                        "model_payloads_by_reference", "model_payloads_copied",
                                        "model_payloads_inline",
                                        "rx_packets", "tx_packets", "handed_off", "drops")})
if bad:
    print("  wrong:", bad)
    sys.exit(1)
PY
		fail "telemetry does not match what was sent"
	;;
restart)
	# SIGKILL mid-training, once a checkpoint of iteration >= 6 is on disk: the PBox started
	# again restores the job, the workers JOIN again by themselves, go back to the
	# checkpoint (its model checked against their reference) and end with the exact model
	# of an uninterrupted run. The job's files go when it ends.
	rack 3 --checkpoint-interval 2
	bench_bg "$tmp/r.json" 3 --keys 8 --key-elems 10000 --iterations 40 --optimizer sgd \
		--dead-ms 30000
	for ((i = 0; i < 600; i++)); do
		[ "$(newest_ckpt)" -ge 6 ] && break
		kill -0 "$bench_pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -0 "$bench_pid" 2>/dev/null || fail "phub-bench ended before the PBox was killed"
	killed_at=$(newest_ckpt)
	pid=$(cat "$state_dir/pbox.pid")
	kill -KILL "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	echo "PBox killed; newest checkpoint: iteration $killed_at"
	pbox_restart
	grep -E "phub.pbox: job phub-bench \(id [0-9]+\) restored from .* iteration [0-9]+" \
		"$state_dir/pbox.log" || fail "the restarted PBox did not restore the job"
	bench_wait "$tmp/r.json" &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]' 'r["reconnects"] == 3' \
			'all(w["reconnects"] == 1 for w in r["per_worker"])'
	phubrack query '"workers went back to %s, rollbacks %s" % ([w["resumed_at"]
		for w in t["per_worker"]], t["rollbacks"])' "$tmp/r.json" 2>/dev/null
	[ "$(newest_ckpt)" -eq -1 ] || fail "the job ended but its checkpoints stay: $(ls "$ckpt_dir")"
	;;
restart-damaged)
	# As restart, with one byte of the newest checkpoint flipped while the PBox is down: the
	# file is refused by its CRC, set aside, and the job comes back from the one before it;
	# the workers go back that much further and still end with the exact model.
	rack 3 --checkpoint-interval 2
	bench_bg "$tmp/r.json" 3 --keys 8 --key-elems 10000 --iterations 40 --optimizer sgd \
		--dead-ms 30000
	for ((i = 0; i < 600; i++)); do
		[ "$(newest_ckpt)" -ge 6 ] && break
		kill -0 "$bench_pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -0 "$bench_pid" 2>/dev/null || fail "phub-bench ended before the PBox was killed"
	pid=$(cat "$state_dir/pbox.pid")
	kill -KILL "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	newest=$(newest_ckpt)
	damaged=$(printf '%s/phub-bench.%010d.ckpt' "$ckpt_dir" "$newest")
	python3 - "$damaged" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(1000)
    b = f.read(1)
    f.seek(1000)
    f.write(bytes([b[0] ^ 0x40]))
PY
	echo "PBox killed; checkpoint of iteration $newest damaged"
	pbox_restart
	grep -E "refused: .*corrupt" "$state_dir/pbox.log" || fail "the damaged file was not refused"
	back=$(sed -nE 's/.* restored from .* in [0-9.]+ ms: iteration ([0-9]+),.*/\1/p' \
		"$state_dir/pbox.log")
	echo "restored from iteration ${back:-none}"
	if [ -z "$back" ] || [ "$back" -ge "$newest" ]; then
		fail "the job did not come back from the checkpoint before the damaged one"
	fi
	[ -e "$damaged.corrupt" ] || fail "the damaged file was not set aside"
	bench_wait "$tmp/r.json" &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]' 'r["reconnects"] == 3'
	;;
restart-twice)
	# Issue 9: SIGKILL twice, a few seconds apart, while 4 workers train with a checkpoint
	# every 4 iterations and rank 1's link loses bursts (Gilbert-Elliott, about 20%: bad
	# state 20% of the time, every datagram in it lost). The second restart comes while the
	# lossy rank may still be JOINing or rolling back from the first; every rank must JOIN
	# again and every model end bitwise exact.
	rack 4 --checkpoint-interval 4
	bench_bg "$tmp/r.json" 4 --keys 8 --key-elems 10000 --iterations 36 --optimizer sgd \
		--dead-ms 30000 --pause-at 1:1500
	# The loss starts once the job runs (its initial model is checkpointed): the first JOIN
	# and ARP, which retry once a second in the kernel, are not what this test is about.
	# The workers wait 1.5 s after iteration 1 so that the loss is on before the job goes
	# on: without it, 36 iterations took 0.15 s and could end before the first kill.
	for ((i = 0; i < 600; i++)); do
		[ "$(newest_ckpt)" -ge 0 ] && break
		kill -0 "$bench_pid" 2>/dev/null || break
		sleep 0.05
	done
	"$vrack" netem --name "$rack" --worker 2 loss gemodel 5% 20% >/dev/null 2>"$tmp/netem.err" ||
		{ cat "$tmp/netem.err"; fail "netem on worker 2"; }
	for kill_no in 1 2; do
		for ((i = 0; i < 600; i++)); do
			[ "$(newest_ckpt)" -ge $((kill_no * 4)) ] && break
			kill -0 "$bench_pid" 2>/dev/null || break
			sleep 0.05
		done
		kill -0 "$bench_pid" 2>/dev/null || fail "phub-bench ended before kill $kill_no"
		pid=$(cat "$state_dir/pbox.pid")
		kill -KILL "$pid"
		while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
		echo "PBox killed ($kill_no); newest checkpoint: iteration $(newest_ckpt)"
		pbox_restart
		cp "$state_dir/pbox.log" "$tmp/pbox-restart$kill_no.log"
		# The second kill comes while the first restart's re-JOINs may be under way.
		[ "$kill_no" -eq 1 ] && sleep 2
	done
	bench_wait "$tmp/r.json" &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]'
	if [ $failed -ne 0 ]; then
		tail -n 20 "$state_dir/pbox.log"
		tail -n 20 "$tmp/r.json.err"
	fi
	# A worker's LEAVE is answered within 500 ms or not waited for; on the lossy link every
	# one of its tries may fall into one loss burst (netem's Gilbert-Elliott state moves per
	# datagram, and a LEAVE is the only one). The PBox then ends the job once that rank has
	# been silent for timeouts.worker_dead_ms (10 s): the files must go either way.
	for ((i = 0; i < 150; i++)); do
		telemetry /phub/jobs | phubrack holds 't["/phub/jobs"] == {}' 2>/dev/null && break
		sleep 0.1
	done
	grep -E "phub-bench \(id [0-9]+\) ended|rank [0-9]+ silent for|rank [0-9]+ left" \
		"$state_dir/pbox.log" | tail -n 5
	[ "$(newest_ckpt)" -eq -1 ] || fail "the job ended but its checkpoints stay: $(ls "$ckpt_dir")"
	;;
csum)
	# CRC32C both ways (issue 9): a worker that asks for it in its JOIN gets CSUM on its
	# JOIN_ACK, ACKs and MODELs, checked on arrival; a PUSH damaged after its CRC was computed
	# (a valid UDP checksum: only the CRC can tell) is dropped and counted as bad_csum, and the
	# same PUSH intact is ACKed. Then 2 workers with --csum train on, bitwise exact.
	rack 2
	telemetry /phub/stats >"$tmp/stats0.txt"
	ip netns exec "$rack-w1" "$hostile_bin" --server "$server" --csum >"$tmp/csum.json" \
		2>"$tmp/csum.err" || { cat "$tmp/csum.err"; fail "phub-hostile --csum failed"; }
	telemetry /phub/stats >"$tmp/stats1.txt"
	cat "$tmp/csum.json"
	expect "$tmp/csum.json" 'r["join_ack_csum"]' 'r["acks_csum"] >= r["segments"]' \
		'r["acks_plain"] == 0' 'r["models_csum"] >= r["segments"]' 'r["models_plain"] == 0' \
		'r["bad_received"] == 0' 'r["initial_acked"] == r["segments"]' \
		'r["damaged_acked"] == 0' 'r["intact_acked"] == 1'
	python3 - "$tmp/stats0.txt" "$tmp/stats1.txt" <<'PY' || fail "the damaged PUSH was not counted as bad_csum"
import json, sys
def drops(path):
    for line in open(path):
        if line.strip().startswith("{"):
            return json.loads(line)["/phub/stats"].get("drops", {})
    return {}
a, b = drops(sys.argv[1]), drops(sys.argv[2])
d = b.get("bad_csum", 0) - a.get("bad_csum", 0)
print("PBox: bad_csum +%d" % d)
assert d == 1
PY
	bench "$tmp/r.json" 2 --layout "$mixed_layout" --iterations 4 --csum &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]'
	;;
sigterm)
	# SIGTERM while the workers wait at an iteration boundary (after iteration 8): the PBox
	# writes the live state of iteration 8, the restarted one restores it, and the workers
	# carry on with iteration 9 without going back.
	rack 3 --checkpoint-interval 0
	bench_bg "$tmp/r.json" 3 --keys 6 --key-elems 5000 --iterations 16 --optimizer momentum \
		--lr 0.05 --pause-at 8:4000 --dead-ms 30000
	at_boundary=0
	for ((i = 0; i < 150; i++)); do
		if telemetry /phub/jobs | phubrack holds 'any(j["iterations_done"] == 9 ==
				j["iteration_newest"] for j in t["/phub/jobs"].values()
				if j["name"] == "phub-bench")'; then
			at_boundary=1
			break
		fi
		sleep 0.1
	done
	[ $at_boundary -eq 1 ] || fail "the job never rested after iteration 8"
	"$vrack" pbox-stop --name "$rack" >/dev/null 2>&1 || fail "the PBox did not stop on SIGTERM"
	grep -E "checkpoint of iteration 8 written \(live state\)" "$state_dir/pbox.log" ||
		fail "no checkpoint of iteration 8 on SIGTERM"
	pbox_restart
	grep -E "restored from .* iteration 8," "$state_dir/pbox.log" ||
		fail "the restarted PBox did not restore iteration 8"
	bench_wait "$tmp/r.json" &&
		expect "$tmp/r.json" 'r["verified"]' 'r["reconnects"] == 3' 'r["rollbacks"] == 0'
	;;
sigterm-running)
	# SIGTERM while the workers run flat out: the lcores run on until every segment has
	# passed the next iteration boundary, that state is written (not the periodic snapshot
	# of iteration 0), restored, and the run ends with the reference model.
	rack 3 --checkpoint-interval 1000
	bench_bg "$tmp/r.json" 3 --keys 8 --key-elems 10000 --iterations 300 --optimizer adam \
		--lr 0.01 --dead-ms 30000
	for ((i = 0; i < 150; i++)); do
		telemetry /phub/jobs | grep -q '"iterations_done": \([1-9][0-9]\|[1-9][0-9][0-9]\)' &&
			break
		sleep 0.1
	done
	"$vrack" pbox-stop --name "$rack" >/dev/null 2>&1 || fail "the PBox did not stop on SIGTERM"
	grep -E "1 of 1 job\(s\) reached an iteration boundary" "$state_dir/pbox.log" ||
		fail "the job did not reach an iteration boundary"
	saved=$(sed -nE 's/.*checkpoint of iteration ([0-9]+) written \(.*/\1/p' \
		"$state_dir/pbox.log" | tail -n 1)
	[ "${saved:-0}" -ge 10 ] || fail "no snapshot of the running job on SIGTERM"
	pbox_restart
	grep -E "restored from .* iteration ${saved:-x}," "$state_dir/pbox.log" ||
		fail "the restarted PBox did not restore iteration ${saved:-none}"
	bench_wait "$tmp/r.json" &&
		expect "$tmp/r.json" 'r["verified"]' 'r["reconnects"] == 3'
	;;
deterministic)
	# Gradients whose sums round, 1% loss on worker 1's link: arrivals out of rank order,
	# yet the deterministic job's model is the rank-order reference bit for bit.
	rack 3 --netem "w1:loss 1%"
	bench "$tmp/r.json" 3 --layout "$mixed_layout" --iterations 8 --gradients random \
		--deterministic --job det &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]' 'r["deterministic"]' \
			'r["verify_mode"] == "exact"' 'r["retransmits"] + r["pulls"] > 0'
	# The same in the default mode: sums in arrival order, right within tolerance.
	bench "$tmp/arrival.json" 3 --layout "$mixed_layout" --iterations 8 --gradients random \
		--job arrival &&
		expect "$tmp/arrival.json" 'r["verified"]' 'r["verify_mode"] == "tolerance"'
	phubrack query '"arrival order: bitwise %s, max abs error %g" % (t["bitwise"],
		t["max_abs_error"])' "$tmp/arrival.json"
	# A rank that asks otherwise than the job is refused with LAYOUT_MISMATCH.
	start_rank "$tmp/m0.json" 0 2 --keys 2 --key-elems 100 --job mixed --deterministic \
		--connect-timeout-ms 3000
	sleep 0.5
	timeout 30 "$bench_bin" --server "$server" --workers 2 --rank 1 --netns-prefix "$rack-w" \
		--quiet --keys 2 --key-elems 100 --job mixed --connect-timeout-ms 3000 \
		>/dev/null 2>"$tmp/m1.err" && fail "a default rank joined a deterministic job"
	grep -q layout_mismatch "$tmp/m1.err" ||
		{ fail "no layout_mismatch for the rank that differs"; cat "$tmp/m1.err"; }
	wait "${rank_pids[0]}"
	;;
straggler)
	# Rank 1's worker stops (SIGSTOP) mid-run: telemetry names it as the rank the oldest
	# iteration waits on, and as the one not heard from; after SIGCONT the run ends exact.
	rack 3
	for r in 0 1 2; do
		start_rank "$tmp/s$r.json" "$r" 3 --keys 8 --key-elems 100000 --iterations 50 \
			--job strag
	done
	if wait_job_iterations strag 3; then
		victim=$(rank_worker 1)
		kill -STOP "$victim"
		sleep 3
		telemetry /phub/job,strag >"$tmp/tel.json"
		kill -CONT "$victim"
		PYTHONPATH=$python_dir python3 - "$tmp/tel.json" <<'PY' ||
import sys
from phubrack import telemetry
j = telemetry.load(sys.argv[1]).get("/phub/job", {})
ranks = {r: j["rank_%d" % r] for r in range(3)}
print("waiting_on", j["waiting_on"], "at iteration", j["waiting_iteration"],
      {r: (v["last_heard_ms"], v.get("newest_iteration"), v.get("lag")) for r, v in ranks.items()})
assert j["waiting_on"] == [1]
assert ranks[1]["last_heard_ms"] >= 2500
assert all(ranks[r]["last_heard_ms"] < ranks[1]["last_heard_ms"] - 1000 for r in (0, 2))
assert all(v["address"].startswith("10.") for v in ranks.values())
PY
			fail "telemetry does not name the stopped rank"
	fi
	for r in 0 1 2; do
		wait "${rank_pids[r]}" || fail "rank $r failed: $(tail -n 2 "$tmp/s$r.json.err")"
		expect "$tmp/s$r.json" 'r["verified"]' 'r["bitwise"]'
	done
	;;
restart-orphan)
	# The PBox is killed with a checkpoint on disk, and so are its workers: the PBox started
	# again restores the job, no worker ever JOINs it, and once timeouts.worker_dead_ms has
	# passed without a joined rank the PBox frees it and removes its checkpoint files. A
	# worker that comes later gets a new job of that name, from iteration 0, and ends exact.
	config_edit='c.setdefault("timeouts", {})["worker_dead_ms"] = 1500'
	rack 2 --checkpoint-interval 2
	for r in 0 1; do
		start_rank "$tmp/o$r.json" "$r" 2 --keys 4 --key-elems 10000 --iterations 100000 \
			--optimizer sgd --job orphan --dead-ms 30000
	done
	for ((i = 0; i < 600; i++)); do
		[ "$(newest_ckpt)" -ge 2 ] && break
		sleep 0.05
	done
	[ "$(newest_ckpt)" -ge 2 ] || fail "no checkpoint of iteration 2 or later"
	pid=$(cat "$state_dir/pbox.pid")
	kill -KILL "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	# The PBox first: killed before it, the workers would time out and the job end as usual.
	for r in 0 1; do
		worker=$(rank_worker "$r")
		[ -n "$worker" ] && kill -KILL "$worker"
		kill -KILL "${rank_pids[r]}"
		{ wait "${rank_pids[r]}"; } 2>/dev/null
	done
	echo "PBox and workers killed; newest checkpoint: iteration $(newest_ckpt)"
	pbox_restart
	ready_ns=$(date +%s%N)
	grep -E "job orphan \(id [0-9]+\) restored from" "$state_dir/pbox.log" ||
		fail "the restarted PBox did not restore the job"
	# orphan_jobs: how many jobs named orphan /phub/jobs lists (-1: no answer).
	orphan_jobs()
	{
		telemetry /phub/jobs | phubrack query --default -1 \
			'sum(j["name"] == "orphan" for j in t["/phub/jobs"].values())'
	}
	[ "$(orphan_jobs)" -eq 1 ] || fail "the restored job is not in /phub/jobs"
	gone=0
	for ((i = 0; i < 100; i++)); do
		[ "$(orphan_jobs)" -eq 0 ] && { gone=1; break; }
		sleep 0.1
	done
	elapsed_ms=$(( ($(date +%s%N) - ready_ns) / 1000000 ))
	echo "the restored job left /phub/jobs $elapsed_ms ms after the PBox was ready"
	if [ $gone -eq 0 ]; then
		fail "the restored job is still there after ${elapsed_ms} ms"
	elif [ "$elapsed_ms" -lt 1500 ]; then
		fail "the restored job was freed before worker_dead_ms (1500 ms)"
	fi
	why="job orphan \(id [0-9]+\): restored from checkpoint, no worker joined within"
	grep -E "$why worker_dead_ms 1500 ms: freed" "$state_dir/pbox.log" ||
		fail "the PBox did not log why it freed the job"
	[ "$(newest_ckpt)" -eq -1 ] || fail "the freed job's checkpoints stay: $(ls "$ckpt_dir")"
	# A worker that comes back now starts the job anew: the initial-model round, no resume.
	bench "$tmp/r.json" 2 --keys 4 --key-elems 10000 --iterations 3 --optimizer sgd \
		--job orphan &&
		expect "$tmp/r.json" 'r["verified"]' 'r["bitwise"]' 'r["reconnects"] == 0' \
			'all(w["resumed_at"] == 0 for w in r["per_worker"])'
	;;
elastic)
	# A job of 4 declared on_worker_dead "continue": rank 3 is killed (it SIGKILLs itself
	# after iteration 4, no LEAVE), the PBox removes it after timeouts.worker_dead_ms from
	# iteration 5 on, tells the others (WORLD), and ranks 0-2 finish the 10 iterations with
	# the model a reference of that membership history computes, bit for bit (rank order).
	config_edit='c.setdefault("timeouts", {})["worker_dead_ms"] = 1500
c["jobs"] = [{"name": "elastic", "nonce": "0x5ad1c0ffee7e4b37", "workers": 4,
    "deterministic": True, "on_worker_dead": "continue",
    "optimizer": {"type": "sgd", "lr": 0.01}}]'
	rack 4
	start=$(date +%s%N)
	for r in 0 1 2 3; do
		extra=()
		[ "$r" -eq 3 ] && extra=(--die-at 4)
		start_rank "$tmp/e$r.json" "$r" 4 --layout "$mixed_layout" --iterations 10 \
			--gradients random --deterministic --job elastic --nonce 0x5ad1c0ffee7e4b37 \
			--optimizer sgd --lr 0.01 "${extra[@]}"
	done
	{
		wait "${rank_pids[3]}" && fail "rank 3 did not die"
	} 2>/dev/null
	grep -q 'dies after iteration 4' "$tmp/e3.json.err" || fail "rank 3 did not die at 4"
	for r in 0 1 2; do
		if wait "${rank_pids[r]}"; then
			expect "$tmp/e$r.json" 'r["verified"]' 'r["bitwise"]' \
				'r["verify_mode"] == "exact"' \
				'r["per_worker"][0]["world_end"] == 3' \
				'r["per_worker"][0]["removed"] == 1' \
				'r["per_worker"][0]["iterations"] == 10'
		else
			fail "rank $r did not finish without rank 3"
			tail -n 5 "$tmp/e$r.json.err"
		fi
	done
	echo "three ranks finished $(( ($(date +%s%N) - start) / 1000000 )) ms after the start"
	grep -q 'rank 3 silent for [0-9]* ms .*removed from iteration 5 on' \
		"$state_dir/pbox.log" || fail "the PBox did not log the removal"
	grep 'removed from iteration' "$state_dir/pbox.log"
	;;
elastic-rejoin)
	# As elastic, then rank 3 is started again once the PBox removed it: it JOINs, is taken
	# back two iterations ahead of the segments (while the others idle after iteration 6),
	# and the four finish 12 iterations with the model of that history, bit for bit.
	config_edit='c.setdefault("timeouts", {})["worker_dead_ms"] = 1500
c["jobs"] = [{"name": "rejoin", "nonce": "0x5ad1c0ffee7e4b38", "workers": 4,
    "deterministic": True, "on_worker_dead": "continue",
    "optimizer": {"type": "sgd", "lr": 0.01}}]'
	rack 4
	opts=(--layout "$mixed_layout" --iterations 12 --gradients random --deterministic
		--job rejoin --nonce 0x5ad1c0ffee7e4b38 --optimizer sgd --lr 0.01)
	for r in 0 1 2 3; do
		extra=(--pause-at 6:4000)
		[ "$r" -eq 3 ] && extra=(--die-at 4)
		start_rank "$tmp/j$r.json" "$r" 4 "${opts[@]}" "${extra[@]}"
	done
	{
		wait "${rank_pids[3]}" && fail "rank 3 did not die"
	} 2>/dev/null
	for _ in $(seq 100); do
		grep -q 'rank 3 silent .*removed from iteration 5 on' "$state_dir/pbox.log" && break
		sleep 0.05
	done
	grep -q 'rank 3 silent .*removed from iteration 5 on' "$state_dir/pbox.log" ||
		fail "the PBox did not remove rank 3"
	start_rank "$tmp/j3.json" 3 4 "${opts[@]}"
	for r in 0 1 2 3; do
		if wait "${rank_pids[r]}"; then
			expect "$tmp/j$r.json" 'r["verified"]' 'r["bitwise"]' \
				'r["verify_mode"] == "exact"' \
				'r["per_worker"][0]["world_end"] == 4' \
				'r["per_worker"][0]["removed"] == 0'
		else
			fail "rank $r did not finish"
			tail -n 5 "$tmp/j$r.json.err"
		fi
	done
	grep 'joins again from iteration' "$state_dir/pbox.log" ||
		fail "the PBox did not take rank 3 back"
	;;
worker-timeout)
	# Rank 2 is killed (SIGKILL) and never comes back: after timeouts.worker_dead_ms the
	# PBox tells ranks 0 and 1 (ERROR worker_timeout, which they report) and frees the job.
	config_edit='c.setdefault("timeouts", {})["worker_dead_ms"] = 1500'
	rack 3
	for r in 0 1 2; do
		start_rank "$tmp/t$r.json" "$r" 3 --layout "$mixed_layout" --iterations 100000 \
			--job doomed
	done
	if wait_job_iterations doomed 3; then
		kill -KILL "${rank_pids[2]}"
		start=$(date +%s%N)
		# (bash's note on the killed job goes to /dev/null)
		{
			for r in 0 1; do
				wait "${rank_pids[r]}" && fail "rank $r succeeded without rank 2"
			done
			wait "${rank_pids[2]}"
		} 2>/dev/null
		grep -m 1 worker_timeout "$tmp/t0.json.err"
		elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
		echo "ranks 0 and 1 ended $elapsed_ms ms after rank 2 was killed"
		# worker_dead_ms, two liveness checks, the LEAVE the workers still try: 4 s of slack
		[ "$elapsed_ms" -lt 5500 ] || fail "the other ranks waited $elapsed_ms ms"
		for r in 0 1; do
			grep -q 'worker_timeout: rank 2 silent for [0-9]* ms' "$tmp/t$r.json.err" ||
				{ fail "rank $r does not say why"; tail -n 3 "$tmp/t$r.json.err"; }
		done
		grep -q 'rank 2 silent for' "/run/phub-vrack/$rack/pbox.log" ||
			fail "the PBox did not log the timeout"
		telemetry /phub/jobs | grep -q '"/phub/jobs": {}' || fail "the job was not freed"
	fi
	;;
workers-all-killed)
	# Every worker of a job is killed (SIGKILL) while all of them sit at an iteration boundary:
	# nobody waits on anybody, yet after timeouts.worker_dead_ms the PBox frees the job.
	config_edit='c.setdefault("timeouts", {})["worker_dead_ms"] = 1500'
	rack 2
	for r in 0 1; do
		start_rank "$tmp/k$r.json" "$r" 2 --keys 4 --key-elems 1000 --iterations 100 \
			--pause-at 3:60000 --job wiped
	done
	if wait_job_iterations wiped 3; then
		sleep 0.5	# both at the boundary, PINGing
		{
			for r in 0 1; do
				kill -KILL "$(rank_worker "$r")" "${rank_pids[r]}"
				wait "${rank_pids[r]}"
			done
		} 2>/dev/null
		start=$(date +%s%N)
		for _ in $(seq 100); do
			telemetry /phub/jobs | grep -q '"/phub/jobs": {}' && break
			sleep 0.1
		done
		elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
		echo "the job was freed $elapsed_ms ms after its workers were killed"
		telemetry /phub/jobs | grep -q '"/phub/jobs": {}' ||
			fail "the job of killed workers was not freed within 10 s"
		# Silence counts from the last PING, up to a second before the kill.
		silent_ms=$(sed -nE 's/.*job wiped \(id [0-9]+\): every joined rank silent for '\
'([0-9]+) ms or more.*/\1/p' "$state_dir/pbox.log")
		echo "the PBox: every rank silent for ${silent_ms:-?} ms"
		[ -n "$silent_ms" ] || fail "the PBox did not log why the job ended"
		[ "${silent_ms:-0}" -ge 1500 ] || fail "the job was freed before worker_dead_ms"
	fi
	;;
worker-rejoin)
	# Rank 2 is killed and started again before timeouts.worker_dead_ms: it joins from a new
	# address (a new session), resumes where the job is, and every model is exact.
	config_edit='c.setdefault("timeouts", {})["worker_dead_ms"] = 5000'
	rack 3
	for r in 0 1 2; do
		start_rank "$tmp/j$r.json" "$r" 3 --keys 8 --key-elems 100000 --iterations 50 \
			--job phoenix
	done
	if wait_job_iterations phoenix 5; then
		kill -KILL "${rank_pids[2]}"
		{ wait "${rank_pids[2]}"; } 2>/dev/null
		sleep 0.5
		start_rank "$tmp/j2b.json" 2 3 --keys 8 --key-elems 100000 --iterations 50 \
			--job phoenix
		for r in 0 1 2; do
			wait "${rank_pids[r]}" || fail "rank $r failed: $(tail -n 2 "$tmp/j$r.json.err")"
		done
		grep -q 'resumes job' "$tmp/j2b.json.err" || fail "rank 2 did not resume"
		cat "$tmp/j2b.json.err"
		for f in j0 j1 j2b; do
			expect "$tmp/$f.json" 'r["verified"]' 'r["bitwise"]'
		done
	fi
	;;
*)
	echo "FAIL: unknown scenario $scenario"
	exit 1
	;;
esac

# The PBox stops cleanly, and its log has no error.
"$vrack" pbox-stop --name "$rack" >/dev/null 2>&1 || fail "the PBox did not stop on SIGTERM"
log=/run/phub-vrack/$rack/pbox.log
grep -q 'phub.pbox: stopped:' "$log" || fail "the PBox did not log its clean stop"
if [ -f "$tmp/r.json" ]; then
	phubrack brief "$scenario" "$tmp/r.json" 2>/dev/null
fi
[ $failed -eq 0 ] && echo "PASS: $scenario"
exit $failed
