#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Integration test of the tap steering (app/pbox/steer_tap.c, drivers-cfg/bpf/steer_tap.bpf.c):
# every datagram for UDP port base+1+k must land in Rx queue k of a net_tap port, everything
# else (control port, other ports, IP fragments, ARP, ICMP, IPv6) in queue 0; then the rate.
#
#   R-w1 10.9.0.101             R-tor                 R-pbox
#   udp_send, raw    eth0 ---- tw1 [br0] tp0 ---- pv0 [pbr0] pt0 ==tap== steer_tap_check
#   frames (python)                                               DPDK net_tap0, Q Rx queues,
#                                                                 steering: 47001+k -> queue k
#
# usage: steer_tap.sh PATH/TO/virtual-rack PATH/TO/steer_tap_check PATH/TO/udp_send
# PHUB_STEER_QUEUES (default 4) sets Q. Takes about 15 s; the rate phase loads both CPUs 3 s.
set -uo pipefail

vrack=${1:?usage: $0 VIRTUAL-RACK STEER_TAP_CHECK UDP_SEND}
check_prog=${2:?usage: $0 VIRTUAL-RACK STEER_TAP_CHECK UDP_SEND}
udp_send=${3:?usage: $0 VIRTUAL-RACK STEER_TAP_CHECK UDP_SEND}
queues=${PHUB_STEER_QUEUES:-4}
base=47000
rack="st$$"
id=9
pbox_ip="10.$id.0.1"
per_port=200		# paced datagrams per data port
per_kind=20		# raw frames per data port and kind of tag
recv_pid=""
failures=0

if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: needs root (network namespaces, /dev/net/tun)"
	exit 77
fi
if [ ! -c /dev/net/tun ]; then
	echo "SKIP: no /dev/net/tun"
	exit 77
fi

work=$(mktemp -d)

stop_receiver()
{
	local i
	[ -n "$recv_pid" ] || return 0
	kill -TERM "$recv_pid" 2>/dev/null
	for ((i = 0; i < 100; i++)); do
		kill -0 "$recv_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$recv_pid" 2>/dev/null
	wait "$recv_pid" 2>/dev/null
	recv_pid=""
}

cleanup()
{
	stop_receiver
	"$vrack" down --name "$rack" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

fail()
{
	printf 'FAIL %s\n' "$*"
	failures=$((failures + 1))
}

# start_receiver LOG [steer_tap_check options]: DPDK on a new net_tap port pt0 in R-pbox,
# steering attached, pt0 in the rack; sets recv_pid and mac.
start_receiver()
{
	local log=$1 i
	shift
	: >"$log"
	"$vrack" exec --name "$rack" --pbox -- "$check_prog" --no-pci --no-huge -m 256 \
		--file-prefix "phub-$rack" --lcores "0@(0-$(($(nproc) - 1)))" \
		--vdev=net_tap0,iface=pt0 -- --queues "$queues" --base "$base" --iface pt0 \
		--seconds 60 "$@" >"$log" 2>"$log.err" &
	recv_pid=$!
	for ((i = 0; i < 200; i++)); do
		grep -q '^READY' "$log" && break
		if ! kill -0 "$recv_pid" 2>/dev/null; then
			cat "$log" "$log.err"
			recv_pid=""
			return 1
		fi
		sleep 0.1
	done
	grep -q '^READY' "$log" || { cat "$log" "$log.err"; return 1; }
	mac=$(awk '/^READY/ { print $5 }' "$log")
	"$vrack" attach-tap --name "$rack" --timeout 10 2>/dev/null || return 1
	# Nobody answers ARP in this test: the worker is told the DPDK port's MAC.
	"$vrack" exec --name "$rack" --worker 1 -- \
		ip neigh replace "$pbox_ip" lladdr "$mac" dev eth0 nud permanent
}

# send_raw_frames MAC: tagged UDP (802.1Q, and 802.1ad + 802.1Q) to every data port, ARP,
# ICMP and IPv6 frames, written on the worker's eth0 by a packet socket.
send_raw_frames()
{
	"$vrack" exec --name "$rack" --worker 1 -- python3 - "$1" "$pbox_ip" "$base" \
		"$queues" "$per_kind" <<'PY'
import socket, struct, sys
mac, dst_ip, base, queues, count = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
dst = bytes.fromhex(mac.replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
src = s.getsockname()[4]
src_ip = socket.inet_aton(dst_ip.rsplit(".", 1)[0] + ".101")
dst_ip = socket.inet_aton(dst_ip)

def csum(b):
    if len(b) % 2:
        b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16:
        t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff

def ipv4(proto, payload):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, 64, proto, 0,
                    src_ip, dst_ip)
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload

def udp(dport, data=b"steer"):
    u = struct.pack("!HHHH", 40000, dport, 8 + len(data), 0) + data
    pseudo = src_ip + dst_ip + struct.pack("!BBH", 0, 17, len(u))
    c = csum(pseudo + u) or 0xffff
    return ipv4(17, u[:6] + struct.pack("!H", c) + u[8:])

def eth(ethertype, payload, tags=(), to=dst):
    hdr = to + src
    for tpid, vid in tags:
        hdr += struct.pack("!HH", tpid, vid)
    return hdr + struct.pack("!H", ethertype) + payload

for k in range(queues):
    for _ in range(count):
        s.send(eth(0x0800, udp(base + 1 + k), tags=[(0x8100, 100)]))
        s.send(eth(0x0800, udp(base + 1 + k), tags=[(0x88a8, 10), (0x8100, 20)]))
arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, src, src_ip, b"\0" * 6, dst_ip)
icmp = struct.pack("!BBHHH", 8, 0, 0, 1, 1) + b"ping"
icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
ipv6_udp = struct.pack("!IHBB16s16s", 6 << 28, 8, 17, 64, b"\xfd" + b"\0" * 15,
                       b"\xfd" + b"\0" * 14 + b"\1") + struct.pack("!HHHH", 40000, base + 1, 8, 0)
for _ in range(5):
    s.send(eth(0x0806, arp, to=b"\xff" * 6))
    s.send(eth(0x0800, ipv4(1, icmp)))
    s.send(eth(0x86dd, ipv6_udp))
PY
}

# verify MODE LOG [SENT_LOG]: every counter line of LOG on the right queue and no bad UDP
# checksum; with MODE "full" also enough of everything sent (SENT_LOG) arrived.
verify()
{
	awk -v base="$base" -v queues="$queues" -v per_kind="$per_kind" \
		-v have_raw="$have_raw" -v mode="$1" -v recv_log="$2" '
		FILENAME != recv_log {
			if ($1 == "port")
				sent[$2] += $4
			next
		}
		$1 == "queue" && $3 == "udp" {
			q = $2; port = $4; tagged = $6; n = $8
			want = (port > base && port <= base + queues) ? port - base - 1 : 0
			if (q != want) {
				printf "FAIL %d datagram(s) for port %d (vlan %d) in queue %d," \
					" not %d\n", n, port, tagged, q, want
				bad = 1
			}
			got[port, tagged] += n
			csum += $10
			next
		}
		$1 == "queue" {
			if ($2 != 0) {
				printf "FAIL %d %s frame(s) in queue %d, not 0\n", $5, $3, $2
				bad = 1
			}
			kind[$3] += $5
			next
		}
		END {
			if (csum != 0) {
				printf "FAIL %d datagram(s) with a bad UDP checksum\n", csum
				bad = 1
			}
			if (mode != "full")
				exit bad
			for (port in sent) {
				# Ports past the counted span (64 from base) are only "udp-other".
				n = (port >= base && port < base + 64) ? got[port, 0] : \
					kind["udp-other"]
				if (n < sent[port] * 0.9) {
					printf "FAIL port %d: %d of %d datagrams arrived\n", port,
						n, sent[port]
					bad = 1
				}
			}
			for (k = 0; have_raw && k < queues; k++) {
				if (got[base + 1 + k, 1] < 2 * per_kind * 0.9) {
					printf "FAIL port %d: %d of %d VLAN-tagged frames" \
						" arrived\n", base + 1 + k, got[base + 1 + k, 1],
						2 * per_kind
					bad = 1
				}
			}
			split(have_raw ? "frag arp icmp ipv6" : "frag", kinds, " ")
			for (i in kinds) {
				if (kind[kinds[i]] == 0) {
					printf "FAIL no %s frame arrived\n", kinds[i]
					bad = 1
				}
			}
			exit bad
		}' "${@:3}" "$2"
}

if ! "$vrack" up --name "$rack" --id "$id" --workers 1 --ports 1 --lcores "$queues" \
	--driver tap >/dev/null 2>"$work/up.err"; then
	cat "$work/up.err"
	echo "FAIL virtual-rack up"
	exit 1
fi

# --- phase 1: where each kind of frame lands ---
if ! start_receiver "$work/steer.log" --api-checks; then
	echo "FAIL steer_tap_check did not start with steering"
	exit 1
fi
grep '^api-check' "$work/steer.log"
echo "steer_tap_check ready: net_tap0 (pt0), $queues Rx queues, MAC $mac"
data_ports="$((base + 1))-$((base + queues))"
{
	"$vrack" exec --name "$rack" --worker 1 -- \
		"$udp_send" -d "$pbox_ip" -p "$data_ports" -n "$per_port" -r 20000
	# The control port, the first port past the data ports, a port far off.
	"$vrack" exec --name "$rack" --worker 1 -- \
		"$udp_send" -d "$pbox_ip" -p "$base,$((base + queues + 1)),5000" -n 50 -r 20000
	# 12000-byte datagrams at MTU 9000: two IPv4 fragments each.
	"$vrack" exec --name "$rack" --worker 1 -- \
		"$udp_send" -d "$pbox_ip" -p "$((base + 1))" -n 20 -s 12000 -r 2000 |
		sed 's/^port/fragmented-port/'
} >"$work/sent.log"
have_raw=0
if command -v python3 >/dev/null; then
	send_raw_frames "$mac" && have_raw=1
else
	echo "note: no python3, no VLAN-tagged, ARP, ICMP or IPv6 frames sent"
fi
sleep 1
stop_receiver
echo "datagrams sent:"
grep -E '^port' "$work/sent.log" | sed 's/^/  /'
echo "received (queue, kind, port, VLAN-tagged, count):"
grep -E '^(queue|summary)' "$work/steer.log" | sed 's/^/  /'
if ! grep -q '^summary' "$work/steer.log"; then
	cat "$work/steer.log.err"
	fail "steer_tap_check printed no summary"
elif verify full "$work/steer.log" "$work/sent.log"; then
	echo "ok   every datagram for port $((base + 1))+k landed in queue k, the rest in queue 0"
else
	fail "steering"
fi

# --- phase 2: rate through the tap with steering, a sender as fast as it can for 2 s ---
if ! start_receiver "$work/rate.log" --busy; then
	echo "FAIL steer_tap_check did not start for the rate"
	exit 1
fi
"$vrack" exec --name "$rack" --worker 1 -- \
	"$udp_send" -d "$pbox_ip" -p "$data_ports" -t 2 -s 1000 >"$work/rate-sent.log"
sleep 0.5
stop_receiver
sent=$(awk '/^sent/ { print $2 }' "$work/rate-sent.log")
read -r got rate < <(awk '/^summary/ { print $3, $9 }' "$work/rate.log")
printf 'rate: %s datagrams/s of 1000 bytes received through the tap with steering' "${rate:-?}"
printf ' (%s received of %s sent in 2 s; a kernel sender on the other CPU)\n' "${got:-?}" \
	"${sent:-?}"
if ! verify route "$work/rate.log"; then
	grep -E '^queue' "$work/rate.log"
	fail "steering under load: a datagram in the wrong queue"
fi

if [ $failures -ne 0 ]; then
	exit 1
fi
echo "all checks passed"
