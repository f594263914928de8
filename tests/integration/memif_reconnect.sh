#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# phub-pbox with a net_memif server port outlives its memif clients: phub-loadgen connects,
# trains, and is killed mid-traffic (SIGKILL) or leaves (SIGINT) or finishes, ROUNDS times in
# a row; every new client must be served and the PBox must stop cleanly at the end. Guards
# the memif gate (app/pbox/memif_gate.c) against DPDK net_memif unmapping the shared region
# under a running burst. --no-huge: the race fires far more often with hugepages (see
# docs/performance.md), so a pass here is a regression check, not proof of the fix.
#
#   CPU 0: phub-loadgen r (memif client) <==== net_memif ====> phub-pbox (server), lcore 1
#          killed / stopped / done, then r+1 connects
#
# usage: memif_reconnect.sh PHUB_PBOX PHUB_LOADGEN [ROUNDS]
set -uo pipefail

pbox_bin=$1
loadgen_bin=$2
rounds=${3:-6}
if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: DPDK's EAL needs root here"
	exit 77
fi

tmp=$(mktemp -d)
sock=$tmp/memif.sock
pbox_pid=
lg_pid=
failed=0

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup()
{
	local pid
	for pid in $lg_pid $pbox_pid; do
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	if [ $failed -ne 0 ] && [ -f "$tmp/pbox.log" ]; then
		echo "--- last lines of the PBox's log"
		tail -n 20 "$tmp/pbox.log"
	fi
	rm -rf "$tmp" "/var/run/dpdk/phub-mr-$$" "/var/run/dpdk/phub-mr-lg-$$"
}
trap cleanup EXIT

fail()
{
	echo "FAIL: $*"
	failed=1
	exit 1
}

memif_dev()
{
	echo "net_memif0,role=$1,socket=$sock,socket-abstract=no,id=0,bsize=16384"
}

cat >"$tmp/pbox.json" <<EOF
{
  "eal": { "lcores": [0, 1], "main_lcore": 0, "memory_mb": 256, "no_huge": true,
           "file_prefix": "phub-mr-$$", "extra_args": ["--single-file-segments"] },
  "ports": [ { "name": "m0", "device": "$(memif_dev server)", "driver": "memif",
               "ipv4": "10.77.0.1/24", "mtu": 9000, "lcores": [1] } ],
  "udp_base_port": 47000,
  "chunk_bytes": 32768,
  "segment_bytes": 8192,
  "idle": { "policy": "adaptive" },
  "limits": { "max_jobs": 16, "max_workers_per_job": 8, "job_memory_mb": 32,
              "total_memory_mb": 256 },
  "checkpoint": { "dir": "$tmp/checkpoints" },
  "telemetry": { "enabled": false }
}
EOF

# wait_for FILE PATTERN PID: up to 20 s for PATTERN in FILE while PID lives.
wait_for()
{
	local i
	for ((i = 0; i < 200; i++)); do
		grep -q -- "$2" "$1" 2>/dev/null && return 0
		kill -0 "$3" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# loadgen ROUND ARGS...: start a client in the background; its pid in lg_pid.
loadgen()
{
	local r=$1
	shift
	"$loadgen_bin" -l 0 --no-pci --no-huge --single-file-segments -m 256 \
		--file-prefix "phub-mr-lg-$$" --log-level=lib.eal:notice \
		--vdev "$(memif_dev client)" -- --workers 2 --keys 8 --key-elems 32768 \
		--job "r$r" "$@" >"$tmp/lg-$r.log" 2>&1 &
	lg_pid=$!
}

"$pbox_bin" -c "$tmp/pbox.json" >"$tmp/pbox.log" 2>&1 &
pbox_pid=$!
wait_for "$tmp/pbox.log" "ready:" "$pbox_pid" || fail "phub-pbox did not start"
grep -q "memif gate:" "$tmp/pbox.log" || fail "phub-pbox did not put its memif port behind the gate"

for ((r = 1; r <= rounds; r++)); do
	case $((r % 3)) in
	1|2)	# killed (1) or interrupted (2) while the job trains
		loadgen "$r" --duration 30
		wait_for "$tmp/pbox.log" "job r$r-0: rank 1 of 2 joined" "$lg_pid" ||
			fail "round $r: the client was not served"
		sleep 0.5
		if ((r % 3 == 1)); then
			kill -KILL "$lg_pid"
		else
			kill -INT "$lg_pid"
		fi
		wait "$lg_pid" 2>/dev/null
		how=$( ((r % 3 == 1)) && echo killed || echo interrupted) ;;
	0)	# runs to the end and must have exchanged
		loadgen "$r" --iterations 20 --json
		wait "$lg_pid"
		rc=$?
		[ $rc -eq 0 ] || fail "round $r: phub-loadgen exited $rc: $(tail -n 3 "$tmp/lg-$r.log")"
		grep -q '"exchanges":20,' "$tmp/lg-$r.log" ||
			fail "round $r: not 20 exchanges: $(grep '^{' "$tmp/lg-$r.log")"
		how=completed ;;
	esac
	lg_pid=
	kill -0 "$pbox_pid" 2>/dev/null || fail "round $r: phub-pbox died after a client $how"
	echo "ok round $r: client $how, phub-pbox alive"
done

kill -TERM "$pbox_pid"
wait "$pbox_pid"
rc=$?
pbox_pid=
[ $rc -eq 0 ] || fail "phub-pbox exited $rc on SIGTERM"
echo "PASS: $rounds memif clients in a row, phub-pbox served each and stopped cleanly"
