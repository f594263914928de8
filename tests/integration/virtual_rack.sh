#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration test of scripts/virtual-rack: builds racks, checks links, addresses, MTU,
# checksum offload, impairment (loss, and delay and reordering through the delay line), the
# PBox config, attach-tap, status, exec and down.
#
#                     R-tor: br0
#        +-----------+-----------+-----------+
#       tp0         tp1         tw1         tw2   (tw1: 50% loss both ways, then off;
#                                                  w1's eth0: delay, reordering, then off)
#        |           |           |           |
#       pv0         pv1         eth0        eth0
#        |           |          R-w1        R-w2
#      pbr0        pbr1      10.77.0.101  10.77.0.102
#        |  R-pbox   |
#       pt0 (a tap made by the test, as net_tap would)
#
# usage: virtual_rack.sh PATH/TO/virtual-rack
set -uo pipefail

vrack=${1:?usage: $0 PATH/TO/virtual-rack}
rack="vr$$"
rack2="va$$"
failures=0

if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: needs root (network namespaces)"
	exit 77
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)

cleanup()
{
	"$vrack" down --name "$rack" >/dev/null 2>&1
	"$vrack" down --name "$rack2" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT

pass()
{
	printf 'ok   %s\n' "$*"
}

fail()
{
	printf 'FAIL %s\n' "$*"
	failures=$((failures + 1))
}

# check DESCRIPTION COMMAND...: passes when COMMAND succeeds.
check()
{
	local what=$1
	shift
	if "$@"; then
		pass "$what"
	else
		fail "$what"
	fi
}

# udp_noports NS: datagrams the namespace received for a port nobody listens on.
udp_noports()
{
	# shellcheck disable=SC2016 # $3 is awk's
	ip netns exec "$1" awk '/^Udp: [0-9]/ { print $3 }' /proc/net/snmp
}

# udp_rtt NS_FROM NS_TO DST: the shortest of 5 UDP round trips NS_FROM -> DST (an echo in
# NS_TO), in milliseconds.
udp_rtt()
{
	ip netns exec "$2" timeout 20 python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 5997))
for _ in range(5):
    d, a = s.recvfrom(64)
    s.sendto(d, a)' &
	local echo_pid=$!
	sleep 0.3
	ip netns exec "$1" python3 - "$3" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
best = None
for i in range(5):
    t = time.monotonic()
    s.sendto(b"%d" % i, (sys.argv[1], 5997))
    s.recvfrom(64)
    rtt = (time.monotonic() - t) * 1e3
    best = rtt if best is None else min(best, rtt)
print("%.1f" % best)
PY
	wait "$echo_pid"
}

# udp_blast NS DST COUNT: COUNT small datagrams to port 9, paced, from python3.
udp_blast()
{
	ip netns exec "$1" python3 - "$2" "$3" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])):
    s.sendto(b"x" * 32, (sys.argv[1], 9))
    if i % 50 == 49:
        time.sleep(0.002)
PY
}

# within VALUE LOW HIGH
within()
{
	[ "$1" -ge "$2" ] && [ "$1" -le "$3" ]
}

# --- a tap rack: 2 workers, 2 ports, 2 data lcores, id 77, 50% loss on worker 1 ---
if ! out=$("$vrack" up --name "$rack" --id 77 --workers 2 --ports 2 --lcores 2 \
	--netem "w1:loss 50%" 2>&1); then
	printf '%s\n' "$out"
	fail "up of a tap rack"
	exit 1
fi
pass "up of a tap rack"

for ns in "$rack-tor" "$rack-pbox" "$rack-w1" "$rack-w2"; do
	check "namespace $ns exists" ip netns exec "$ns" true
done
check "worker 1 is 10.77.0.101/24" \
	bash -c "ip -n $rack-w1 -4 -o addr show eth0 | grep -q ' 10.77.0.101/24 '"
check "worker 2 is 10.77.0.102/24" \
	bash -c "ip -n $rack-w2 -4 -o addr show eth0 | grep -q ' 10.77.0.102/24 '"
check "the PBox namespace has no IPv4 address besides lo" \
	bash -c "! ip -n $rack-pbox -4 -o addr show | grep -v ' lo ' | grep -q inet"
check "every link of the ToR is at MTU 9000" \
	bash -c "! ip -n $rack-tor -o link show | grep -v ' lo:' | grep -v 'mtu 9000 '"
check "pv0 and pv1 are in bridges pbr0 and pbr1" \
	bash -c "ip -n $rack-pbox -o link show pv0 | grep -q 'master pbr0' &&
		ip -n $rack-pbox -o link show pv1 | grep -q 'master pbr1'"
if command -v ethtool >/dev/null; then
	check "Tx checksum offload is off on the workers' veths" \
		bash -c "ip netns exec $rack-w2 ethtool -k eth0 | grep -q '^tx-checksumming: off'"
fi

# The config: the exact schema for this rack.
config=$(awk -F= '$1 == "config" { print $2 }' "/run/phub-vrack/$rack/state")
check "the PBox config has the rack's values" python3 - "$config" "$rack" <<'PY'
import json, os, sys
c = json.load(open(sys.argv[1]))
rack = sys.argv[2]
ncpu = os.cpu_count()
lcores = [0] + [i if i < ncpu else "%d@%d" % (i, i % ncpu) for i in (1, 2)]
assert set(c) == {"eal", "ports", "udp_base_port", "chunk_bytes", "idle", "jobs", "checkpoint",
                  "telemetry"}, c
assert c["eal"] == {"lcores": lcores, "main_lcore": 0, "memory_mb": 2048, "no_huge": True,
                    "file_prefix": "phub-" + rack, "extra_args": []}, c["eal"]
assert len(c["ports"]) == 2
for p, port in enumerate(c["ports"]):
    assert port == {"name": "p%d" % p, "device": "net_tap%d,iface=pt%d" % (p, p),
                    "driver": "tap", "ipv4": "10.77.0.%d/24" % (p + 1), "mtu": 1500,
                    "rx_desc": 1024, "tx_desc": 1024, "lcores": [1, 2]}, port
assert c["udp_base_port"] == 47000 and c["chunk_bytes"] == 32768
assert c["idle"] == {"policy": "adaptive", "spin_polls": 64, "max_sleep_us": 200}
assert c["jobs"] == [] and c["telemetry"] == {"enabled": True}
# The rack's own checkpoints, gone with the rack.
assert c["checkpoint"] == {"dir": "/run/phub-vrack/%s/checkpoints" % rack,
                           "interval_iterations": 100}, c["checkpoint"]
PY

check "up of an existing rack fails" bash -c "! '$vrack' up --name $rack 2>/dev/null"
check "status lists the namespaces and no PBox process" \
	bash -c "'$vrack' status --name $rack | grep -q 'no process runs in $rack-pbox'"
check "exec runs in the worker's namespace" \
	bash -c "'$vrack' exec --name $rack --worker 2 -- ip -4 -o addr show eth0 |
		grep -q 10.77.0.102"

# Worker 2 -> worker 1 crosses tw1's egress (worker 1's "rx"): half the datagrams are lost.
# A static neighbour entry, since lost ARP would drop more than the loss rate says.
w1mac=$(ip -n "$rack-w1" -o link show eth0 | grep -o 'link/ether [^ ]*' | cut -d' ' -f2)
ip -n "$rack-w2" neigh replace 10.77.0.101 lladdr "$w1mac" dev eth0 nud permanent
before=$(udp_noports "$rack-w1")
udp_blast "$rack-w2" 10.77.0.101 2000
sleep 0.2
got=$(($(udp_noports "$rack-w1") - before))
printf '     worker 1 received %d of 2000 datagrams with loss 50%%\n' "$got"
check "loss 50% on worker 1 drops about half" within "$got" 800 1200
"$vrack" netem --name "$rack" --worker 1 off
before=$(udp_noports "$rack-w1")
udp_blast "$rack-w2" 10.77.0.101 1000
sleep 0.2
got=$(($(udp_noports "$rack-w1") - before))
check "netem off: worker 1 receives all 1000 datagrams (got $got)" within "$got" 1000 1000

# Delay and reordering without sch_netem: a delay line (scripts/delayline.c) holds the frames
# the BPF program diverts into its tap dl-eth0. Worker 1's tx delayed by 30 ms: no UDP round
# trip to worker 2 is shorter. With "reorder 50%" half the frames are held and overtaken.
w2mac=$(ip -n "$rack-w2" -o link show eth0 | grep -o 'link/ether [^ ]*' | cut -d' ' -f2)
ip -n "$rack-w1" neigh replace 10.77.0.102 lladdr "$w2mac" dev eth0 nud permanent
check "netem delay 30ms on worker 1's tx" \
	"$vrack" netem --name "$rack" --worker 1 --dir tx delay 30ms
check "the delay line's tap dl-eth0 is up in worker 1" \
	bash -c "ip -n $rack-w1 -o link show dev dl-eth0 | grep -q ',UP'"
rtt=$(udp_rtt "$rack-w1" "$rack-w2" 10.77.0.102)
printf '     shortest of 5 round trips worker 1 -> 2 with delay 30ms: %s ms\n' "$rtt"
check "delay 30ms: no round trip is shorter than 30 ms" test "${rtt%.*}" -ge 30
check "netem delay 20ms reorder 50% on worker 1's tx" \
	"$vrack" netem --name "$rack" --worker 1 --dir tx delay 20ms reorder 50%
ip netns exec "$rack-w2" timeout 60 python3 "$here/loss_pattern.py" recv 5998 2000 \
	"$tmp/reorder.json" >/dev/null &
recv_pid=$!
sleep 0.5
ip netns exec "$rack-w1" python3 "$here/loss_pattern.py" send 10.77.0.102 5998 2000
wait $recv_pid
check "reorder 50%: no datagram lost, at least 500 of 2000 overtaken" python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print("     reorder 50%%: %d of %d reordered, largest extent %d, %d lost" %
      (r["reordered"], r["sent"], r["max_extent"], r["sent"] - r["unique"]))
assert r["unique"] == r["sent"] and r["reordered"] >= 500' "$tmp/reorder.json"
"$vrack" netem --name "$rack" --worker 1 off
check "netem off ends the delay line and its tap" \
	bash -c "! ip -n $rack-w1 link show dev dl-eth0 2>/dev/null &&
		! ip netns pids $rack-w1 | grep -q ."

# attach-tap joins a tap named like net_tap's to its bridge, with the rack's MTU and a MAC
# of its own; a port whose tap never comes fails within its timeout.
ip -n "$rack-pbox" tuntap add pt0 mode tap
tapmac=$(ip -n "$rack-pbox" -o link show pt0 | grep -o 'link/ether [^ ]*')
check "attach-tap --port 0 succeeds" "$vrack" attach-tap --name "$rack" --port 0 --timeout 5
check "pt0 is in pbr0, up, at MTU 9000" \
	bash -c "ip -n $rack-pbox -o link show pt0 | grep 'master pbr0' | grep -q 'mtu 9000 '"
check "pt0's kernel MAC was changed" \
	bash -c "! ip -n $rack-pbox -o link show pt0 | grep -q '$tapmac'"
check "attach-tap fails when the tap does not come" \
	bash -c "! '$vrack' attach-tap --name $rack --port 1 --timeout 1 2>/dev/null"

check "down removes the rack" "$vrack" down --name "$rack"
check "no namespace of the rack is left" bash -c "! ip netns list | grep -q '^$rack-'"
check "no state of the rack is left" test ! -e "/run/phub-vrack/$rack"
check "down of a removed rack succeeds" "$vrack" down --name "$rack"

# --- a half-made rack goes down too ---
ip netns add "$rack-w3"
ip netns add "$rack-tor"
check "down removes a half-made rack" "$vrack" down --name "$rack"
check "nothing of the half-made rack is left" bash -c "! ip netns list | grep -q '^$rack-'"

# --- af_packet: one port per data lcore, checksum offload off by the python fallback ---
check "af_packet needs as many ports as data lcores" \
	bash -c "! '$vrack' up --name $rack2 --driver af_packet --ports 2 --lcores 3 2>/dev/null"
check "af_xdp refuses an MTU above 3506 and leaves nothing" \
	bash -c "! '$vrack' up --name $rack2 --driver af_xdp --mtu 9000 2>/dev/null &&
		! ip netns list | grep -q '^$rack2-'"
check "a bad netem spec fails before anything is made" \
	bash -c "! '$vrack' up --name $rack2 --netem 'w9:loss 1%' 2>/dev/null &&
		! ip netns list | grep -q '^$rack2-'"
if PHUB_VRACK_CSUM_TOOL=python "$vrack" up --name "$rack2" --id 5 --workers 1 \
	--driver af_packet --ports 2 >/dev/null 2>&1; then
	pass "up of an af_packet rack"
	config=$(awk -F= '$1 == "config" { print $2 }' "/run/phub-vrack/$rack2/state")
	check "af_packet ports are veths with one lcore each" python3 - "$config" <<'PY'
import json, os, sys
c = json.load(open(sys.argv[1]))
ncpu = os.cpu_count()
assert c["eal"]["lcores"] == [0] + [i if i < ncpu else "%d@%d" % (i, i % ncpu)
                                    for i in (1, 2)], c["eal"]
for p, port in enumerate(c["ports"]):
    assert port["device"] == ("net_af_packet%d,iface=pv%d,blocksz=16384,framesz=16384,"
                              "framecnt=512,qpairs=1" % (p, p)), port
    assert port["driver"] == "af_packet" and port["lcores"] == [p + 1], port
    assert port["ipv4"] == "10.5.0.%d/24" % (p + 1), port
PY
	check "no bridge in the PBox namespace with af_packet" \
		bash -c "! ip -n $rack2-pbox -o link show type bridge | grep -q ."
	if command -v ethtool >/dev/null; then
		check "the python fallback turned Tx checksum offload off" \
			bash -c "ip netns exec $rack2-w1 ethtool -k eth0 |
				grep -q '^tx-checksumming: off'"
	fi
	check "attach-tap refuses an af_packet rack" \
		bash -c "! '$vrack' attach-tap --name $rack2 2>/dev/null"
else
	fail "up of an af_packet rack"
fi
"$vrack" down --name "$rack2" >/dev/null 2>&1

if [ $failures -ne 0 ]; then
	printf '%d check(s) failed\n' "$failures"
	exit 1
fi
printf 'all checks passed\n'
