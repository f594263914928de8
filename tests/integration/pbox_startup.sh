#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# phub-pbox refuses to start, with a non-zero exit and a message that names what to fix, for
# each way a start can fail; and a good config over net_null starts and stops on SIGTERM.
# No network: every port is a net_null device in this process.
#
#   phub-pbox --(net_null0)--> nothing
#
# usage: pbox_startup.sh PHUB_PBOX
set -uo pipefail

pbox_bin=$1
if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: DPDK's EAL needs root here"
	exit 77
fi

tmp=$(mktemp -d)
pids=()
failed=0

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup()
{
	local pid
	for pid in "${pids[@]}"; do
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	rm -rf "$tmp" "/var/run/dpdk/phub-startup-$$"
}
trap cleanup EXIT

# config NAME LCORES MEMORY_MB DEVICE DRIVER: a one-port config in $tmp/NAME.json
config()
{
	cat >"$tmp/$1.json" <<EOF
{
  "eal": { "lcores": $2, "main_lcore": 0, "memory_mb": $3, "no_huge": true,
           "file_prefix": "phub-startup-$$" },
  "ports": [ { "name": "p0", "device": "$4", "driver": "$5", "ipv4": "10.99.0.1/24",
               "mtu": 1500, "lcores": [1] } ],
  "checkpoint": { "dir": "$tmp/checkpoints" }
}
EOF
}

# refuses WHAT CONFIG PATTERN: phub-pbox -c CONFIG exits non-zero within 60 s and its output
# matches PATTERN (an extended regular expression).
refuses()
{
	local what=$1 cfg=$2 pattern=$3 rc
	timeout 60 "$pbox_bin" -c "$cfg" >"$tmp/out" 2>&1
	rc=$?
	if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
		echo "FAIL $what: exit $rc"
		failed=1
	elif ! grep -Eq "$pattern" "$tmp/out"; then
		echo "FAIL $what: no message matching '$pattern':"
		tail -n 5 "$tmp/out"
		failed=1
	else
		echo "ok   $what: $(grep -Em1 "$pattern" "$tmp/out")"
	fi
}

refuses "a missing config file" "$tmp/nothing.json" "nothing.json.*(No such file|cannot read)"

printf '{ "eal": { "lcores": [0, 1] }, "ports": [ ] , }\n' >"$tmp/syntax.json"
refuses "a config with a syntax error" "$tmp/syntax.json" "syntax.json:1:[0-9]+: "

config pci '[0, 1]' 256 0000:7f:1f.7 mlx5
refuses "a PCI device that is not there" "$tmp/pci.json" \
	"(device 0000:7f:1f.7 not found|0000:7f:1f.7)"

config cpu '[0, 1, 97]' 256 net_null0 null
sed -i 's/"lcores": \[1\]/"lcores": [97]/' "$tmp/cpu.json"
refuses "an lcore on a CPU that does not exist" "$tmp/cpu.json" "EAL start failed.*eal\\.\\*"

config memory '[0, 1]' 8 net_null0 null
refuses "eal.memory_mb below its bound" "$tmp/memory.json" "memory.json:2:[0-9]+: eal.memory_mb"

# 64 MB cannot hold the pools of 9000-byte mbufs: found at run time, named.
config pools '[0, 1]' 64 net_null0 null
sed -i 's/"mtu": 1500/"mtu": 9000/' "$tmp/pools.json"
refuses "too little memory for the mbuf pools" "$tmp/pools.json" \
	"cannot create a pool .*eal.memory_mb"

# A declared job that says what it trains is checked by --check-config against the job limit,
# then EAL memory, each refusal naming the key to raise and to what; raised, the check passes.
config declared '[0, 1]' 256 net_null0 null
python3 - "$tmp/declared.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["jobs"] = [{"name": "big", "nonce": "0x5be1c2f07a9d3e64", "workers": 4, "parameters": 100000000,
              "optimizer": {"type": "adam", "lr": 0.001}}]
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
check_declared()
{
	timeout 60 "$pbox_bin" -c "$tmp/declared.json" --check-config >"$tmp/out" 2>&1
}
for key in limits.job_memory_mb eal.memory_mb; do
	if check_declared; then
		echo "FAIL a declared job over $key: --check-config exit 0"
		failed=1
		break
	fi
	msg=$(grep -E "jobs\[0\] \(big\) needs [0-9]+ MB, more than" "$tmp/out")
	want=$(echo "$msg" | sed -nE 's/.* raise (it|eal\.memory_mb) to ([0-9]+) or more.*/\2/p')
	if ! echo "$msg" | grep -q "$key" || [ -z "$want" ]; then
		echo "FAIL a declared job over $key: not named: $(tail -n 2 "$tmp/out")"
		failed=1
		break
	fi
	echo "ok   --check-config: $msg"
	python3 - "$tmp/declared.json" "$key" "$want" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
section, key = sys.argv[2].split(".")
c.setdefault(section, {})[key] = int(sys.argv[3])
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
done
if check_declared && grep -q "jobs\[0\] big: 100.0M parameters" "$tmp/out"; then
	echo "ok   --check-config: the job fits once the keys are raised"
else
	echo "FAIL the declared job still does not pass: $(tail -n 2 "$tmp/out")"
	failed=1
fi

# A good config starts; a second PBox with the same file prefix is refused; SIGTERM stops it.
config good '[0, 1]' 256 net_null0 null
"$pbox_bin" -c "$tmp/good.json" >"$tmp/good.out" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
	grep -q 'phub.pbox: ready' "$tmp/good.out" && break
	sleep 0.1
done
if grep -q 'phub.pbox: ready' "$tmp/good.out"; then
	echo "ok   a good config over net_null starts"
	refuses "a second PBox with the same file prefix" "$tmp/good.json" \
		"(file prefix|another primary)"
	kill -TERM "${pids[0]}"
	if timeout 20 tail --pid="${pids[0]}" -f /dev/null; then
		wait "${pids[0]}"
		rc=$?
		if [ $rc -eq 0 ] && grep -q 'phub.pbox: stopped:' "$tmp/good.out"; then
			echo "ok   SIGTERM stops it cleanly (exit 0)"
		else
			echo "FAIL SIGTERM: exit $rc"
			failed=1
		fi
	else
		echo "FAIL SIGTERM: still running after 20 s"
		failed=1
	fi
else
	echo "FAIL a good config over net_null did not start:"
	tail -n 10 "$tmp/good.out"
	failed=1
fi

[ $failed -eq 0 ] && echo "PASS"
exit $failed
