#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Health and the systemd watchdog: phub-pbox sends WATCHDOG=1 only while its control loop and
# every data lcore turn; a stalled lcore (the test hook /phub/test/stall) stops the pings and
# makes /phub/health "failing", which both undo once it turns again. Under a journal stream
# ($JOURNAL_STREAM names stderr) each log line carries its syslog priority as "<N>".
#
#   this script: a unix datagram socket ($NOTIFY_SOCKET) <-- phub-pbox (one net_null port,
#   data lcore 1) <-- dpdk-telemetry.py (/phub/health, /phub/test/stall)
#
# Usage: pbox_health.sh PHUB_PBOX SOURCE_DIR

set -euo pipefail

pbox=$1
src=$(realpath "$2")
prefix=phub-health-t
work=$(mktemp -d /tmp/phub-health.XXXXXX)
listener=
pid=

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
	if [ -n "$listener" ]; then kill "$listener" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

fail() {
	echo "--- log"; cat "$work/log"
	echo "FAIL: $*" >&2
	exit 1
}

if ! command -v dpdk-telemetry.py >/dev/null; then
	echo "SKIP: no dpdk-telemetry.py (Debian's dpdk-dev)"
	exit 77
fi

cat > "$work/pbox.json" <<JSON
{ "eal": { "lcores": [0, 1], "memory_mb": 512, "no_huge": true, "file_prefix": "$prefix",
           "extra_args": ["--single-file-segments"] },
  "drivers_dir": "$src/drivers-cfg",
  "ports": [ { "name": "n0", "device": "net_null0,no-rx=1", "driver": "null",
               "ipv4": "10.99.0.1/24", "mtu": 1500, "lcores": [1] } ],
  "idle": { "policy": "adaptive" },
  "checkpoint": { "dir": "$work/ckpt" } }
JSON

# Each datagram received, one per line, with the time it came.
python3 - "$work/notify.sock" "$work/received" <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "w") as out:
    while True:
        msg = s.recv(4096).decode().replace("\n", " ")
        out.write("%.3f %s\n" % (time.monotonic(), msg))
        out.flush()
PY
listener=$!
for _ in $(seq 50); do [ -S "$work/notify.sock" ] && break; sleep 0.1; done

pings() { grep -c "WATCHDOG=1" "$work/received" || true; }
now() { python3 -c 'import time; print("%.3f" % time.monotonic())'; }
# pings_between T0 T1: WATCHDOG=1 datagrams received between two monotonic times.
pings_between() { awk -v a="$1" -v b="$2" '/WATCHDOG=1/ && $1 >= a && $1 <= b' "$work/received" | wc -l; }
tel() { printf '%s\n' "$@" | dpdk-telemetry.py -f "$prefix" 2>/dev/null | grep '^{'; }
status() { tel /phub/health | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["/phub/health"]["status"])'; }

# stderr is a file; the journal's stream is named by its device and inode, as systemd does.
touch "$work/log"
journal_stream=$(stat -L -c '%d:%i' "$work/log")
NOTIFY_SOCKET=$work/notify.sock WATCHDOG_USEC=400000 PHUB_PBOX_TEST_HOOKS=1 \
	JOURNAL_STREAM=$journal_stream "$pbox" -c "$work/pbox.json" >>"$work/log" 2>&1 &
pid=$!
for _ in $(seq 300); do
	grep -q READY=1 "$work/received" 2>/dev/null && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
grep -q "READY=1" "$work/received" || fail "no READY=1 from phub-pbox"

sleep 1.5
n=$(pings)
[ "$n" -ge 3 ] || fail "$n WATCHDOG=1 in 1.5 s with WATCHDOG_USEC=400000 (want >= 3)"
s=$(status)
[ "$s" = ok ] || { tel /phub/health; fail "health '$s' on an idle PBox, want ok"; }
echo "serving: $n pings, health $s"

# Lcore 1 stands still for 3 s: after the ping that may have seen it turn, none.
t0=$(now)
tel /phub/test/stall,1,3000 | grep -q '"stall_ms": 3000' || fail "/phub/test/stall refused"
sleep 2
t1=$(now)
health=$(tel /phub/health)
echo "stalled: $health"
echo "$health" | grep -q '"status": "failing"' || fail "health not failing while lcore 1 stalls"
echo "$health" | grep -q 'lcore 1: no loop turn' || fail "health does not name lcore 1"
during=$(pings_between "$(awk -v t="$t0" 'BEGIN { printf "%.3f", t + 0.5 }')" "$t1")
[ "$during" = 0 ] || fail "$during WATCHDOG=1 sent while lcore 1 stood still"
# It turns again: the pings resume and health is ok.
sleep 2.5
t2=$(now)
sleep 1
after=$(pings_between "$t2" "$(now)")
[ "$after" -ge 1 ] || fail "no WATCHDOG=1 after the lcore turned again"
s=$(status)
[ "$s" = ok ] || { tel /phub/health; fail "health '$s' after the stall, want ok"; }
echo "after the stall: $after pings in 1 s, health $s"

# The journal's lines: each once, with its priority (ERR 3, NOTICE 5), none without one.
grep -q '^<3>phub.pbox: watchdog: lcore 1 made no progress' "$work/log" ||
	fail "the withheld ping is not logged at priority 3 (err)"
grep -q '^<5>phub.pbox: ready:' "$work/log" || fail "ready is not logged at priority 5 (notice)"
[ "$(grep -c 'phub.pbox: ready:' "$work/log")" = 1 ] || fail "ready logged more than once"
if grep -v '^<[0-7]>' "$work/log" | grep -q .; then
	fail "lines without a priority prefix under JOURNAL_STREAM: $(grep -v '^<[0-7]>' "$work/log" | head -3)"
fi

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ "$rc" = 0 ] || fail "phub-pbox exit $rc after SIGTERM"
echo PASS
