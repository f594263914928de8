#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The packet-path benchmark's floors (phub-loadgen --reflect-ackv, --reflect-acks and --reflect)
# in one short run of scripts/bench-packet-path beside the PBox and testpmd: every server
# answered, the floor summed every datagram with no bad checksum (the script checks its
# counters), sent one ACK-sized frame per W frames less one (floor-ackv far fewer), the PBox
# completed whole-model exchanges with ACKV and with one ACK per PUSH, every frame sent back came
# back as the PUSH it was, and every generator reported its own busy share.
set -euo pipefail

readonly BUILD_DIR=$1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
readonly ROOT

if [[ $EUID -ne 0 ]] || ! command -v dpdk-testpmd >/dev/null || ! command -v jq >/dev/null; then
	echo "SKIP: needs root, dpdk-testpmd and jq"
	exit 77
fi
OUT=$(mktemp /tmp/phub-pp-floor.XXXXXX)
trap 'rm -f "$OUT"' EXIT

"$ROOT/scripts/bench-packet-path" --build "$BUILD_DIR" --sizes 1024 --workers 2 \
	--repeat 1 --duration 1 --json "$OUT"

fail()
{
	echo "FAIL: $*" >&2
	exit 1
}

# One run per server; $1 = target, $2 = a jq condition on it.
check()
{
	[[ $(jq -s --arg t "$1" "map(select(.target == \$t and ($2))) | length" "$OUT") == 1 ]] ||
		fail "$1: not ($2): $(jq -c --arg t "$1" 'select(.target == $t)' "$OUT")"
}

# Every generator says how busy it was (near 1.0 it may have set the rate, not the server).
busy='.generator_busy > 0 and .generator_busy <= 1.01'
check pbox ".exchanges > 0 and .errors == 0 and .pushes_per_s > 0 and $busy"
# ACKV (the default): fewer ACKs than PUSHes, most taken by MODELs of the same burst; one ACK
# per PUSH (phub-loadgen --no-ackv, target pbox-acks) on the same PBox: every PUSH, no ACKV.
check pbox ".acks * 2 < .pushes"
check pbox-acks ".exchanges > 0 and .errors == 0 and .ackv == 0 and .acks >= .pushes and $busy"
# Every full-size frame a server sent back read and parsed as the PUSH it was (stale: not).
check testpmd ".rx_pps > 0 and .stale == 0 and $busy"
# W = 2: one ACK-sized frame per two frames of a worker, within what is in flight at the end.
check floor ".rx_pps > 0 and .acks > 0 and (.acks / .rx_pkts) > 0.45 and
	(.acks / .rx_pkts) < 0.55 and .stale == 0 and $busy"
check floor-plain ".rx_pps > 0 and .acks == 0 and .stale == 0 and $busy"
# ACKV's floor: at most one ACK-sized frame per worker and burst, far fewer than floor's.
check floor-ackv ".rx_pps > 0 and (.acks / .rx_pkts) < 0.45 and .stale == 0 and $busy"
echo "packet-path floor: ok"
