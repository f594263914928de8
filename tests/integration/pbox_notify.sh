#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# sd_notify: phub-pbox tells a service manager READY=1 once it serves and STOPPING=1 on SIGTERM.
#
#   this script: a unix datagram socket ($NOTIFY_SOCKET) <-- phub-pbox (one net_null port)
#
# Usage: pbox_notify.sh PHUB_PBOX SOURCE_DIR

set -euo pipefail

pbox=$1
src=$(realpath "$2")
work=$(mktemp -d /tmp/phub-notify.XXXXXX)
listener=
pid=

cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
	[ -n "$listener" ] && kill "$listener" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/pbox.json" <<JSON
{ "eal": { "lcores": [0, 1], "memory_mb": 512, "no_huge": true, "file_prefix": "phub-notify",
           "extra_args": ["--single-file-segments"] },
  "drivers_dir": "$src/drivers-cfg",
  "ports": [ { "name": "n0", "device": "net_null0", "driver": "null", "ipv4": "10.99.0.1/24",
               "mtu": 1500, "lcores": [1] } ],
  "idle": { "policy": "adaptive" },
  "checkpoint": { "dir": "$work/ckpt" },
  "telemetry": { "enabled": false } }
JSON

# Each datagram received, one per line, as systemd would read them.
python3 - "$work/notify.sock" "$work/received" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "w") as out:
    while True:
        out.write(s.recv(4096).decode().replace("\n", " ") + "\n")
        out.flush()
PY
listener=$!
for _ in $(seq 50); do [ -S "$work/notify.sock" ] && break; sleep 0.1; done

NOTIFY_SOCKET=$work/notify.sock "$pbox" -c "$work/pbox.json" > "$work/log" 2>&1 &
pid=$!
for _ in $(seq 300); do
	grep -q READY=1 "$work/received" 2>/dev/null && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
if ! grep -q "READY=1" "$work/received"; then
	cat "$work/log" >&2
	echo "FAIL: no READY=1 from phub-pbox" >&2
	exit 1
fi
# READY comes after the log says ready, never before.
grep -q "phub.pbox: ready:" "$work/log" || { echo "FAIL: READY=1 before ready" >&2; exit 1; }
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=
[ "$rc" = 0 ] || { cat "$work/log" >&2; echo "FAIL: phub-pbox exit $rc after SIGTERM" >&2; exit 1; }
sleep 0.2
grep -q "STOPPING=1" "$work/received" || { cat "$work/received" "$work/log" >&2; echo "FAIL: no STOPPING=1" >&2; exit 1; }
sed 's/^/  received: /' "$work/received"
echo PASS
