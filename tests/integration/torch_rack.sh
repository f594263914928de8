#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# PyTorch through the DPDK PBox in a virtual rack: python/examples/train_digits.py runs one
# PHub rank in each worker namespace (phub.torch.DistributedOptimizer over libphub.so.0),
# deterministic training with an LR schedule whose lr reaches the PBox in the PUSHes' HYPER
# extension. Rank 0 must reach 95% test accuracy; every step's loss must be the one of the
# same run against the soft PBox on loopback (the same engine: bit for bit), and that run's
# must follow one process training on the same global batches (train_digits.py --check).
# The session learns the path's MTU at JOIN: no rank sets one. The rack is always torn down.
#
#   R-pbox: phub-pbox (net_tap, 2 lcores; or as the rack options say)
#   R-w1: rank 0     R-w2: rank 1
#
# usage: torch_rack.sh VIRTUAL_RACK PHUB_PBOX TRAIN_DIGITS BUILD_DIR [ID [RACK-UP-ARGS...
#        [-- TRAIN-ARGS...]]]
# ID (default 233) names the rack and its addresses; RACK-UP-ARGS go to 'virtual-rack up'
# (e.g. --driver af_packet --ports 2 --mtu 1500); TRAIN-ARGS replace the default training
# (deterministic SGD, lr 0.5 halved every 5 epochs).
# Exits 77 with the reason when it cannot run here (not root, no /dev/net/tun, no torch).
set -uo pipefail

vrack=$1
pbox_bin=$2
digits=$3
build=$4
id=${5:-233}
shift $(($# < 5 ? $# : 5))
up_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
	up_args+=("$1")
	shift
done
[ $# -gt 0 ] && shift
train=(--epochs 10 --optimizer sgd --lr 0.5 --lr-step 5 --deterministic)
[ $# -gt 0 ] && train=("$@")

if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: the virtual rack needs root (network namespaces)"
	exit 77
fi
if [ ! -c /dev/net/tun ]; then
	echo "SKIP: no /dev/net/tun for net_tap"
	exit 77
fi
if ! /usr/bin/python3 -c 'import torch, sklearn' 2>/dev/null; then
	echo "SKIP: python3-torch or python3-sklearn missing"
	exit 77
fi

rack="pyt$id"
server="10.$id.0.1"
workers=2
tmp=$(mktemp -d)
pids=()

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup()
{
	local pid
	for pid in "${pids[@]}"; do
		kill -KILL "$pid" 2>/dev/null
	done
	"$vrack" down --name "$rack" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT

"$vrack" down --name "$rack" >/dev/null 2>&1
"$vrack" up --name "$rack" --id "$id" --workers "$workers" "${up_args[@]}" >"$tmp/up.log" 2>&1 ||
	{ cat "$tmp/up.log"; echo "FAIL: the rack did not come up"; exit 1; }
"$vrack" pbox-start --name "$rack" --bin "$pbox_bin" >"$tmp/pbox-start.log" 2>&1 ||
	{ cat "$tmp/pbox-start.log"; echo "FAIL: the PBox did not start"; exit 1; }

echo "rack: ${up_args[*]:-net_tap defaults}; training: ${train[*]}"
start=$(date +%s)
for r in $(seq 0 $((workers - 1))); do
	ip netns exec "$rack-w$((r + 1))" env PHUB_BUILD_DIR="$build" OMP_NUM_THREADS=1 \
		timeout 150 /usr/bin/python3 "$digits" --mode phub --rank "$r" --workers "$workers" \
		--server "$server" --port 47000 --job "digits-rack" "${train[@]}" \
		--json "$tmp/rank$r.json" >"$tmp/rank$r.out" 2>&1 &
	pids+=($!)
done
failed=0
for r in $(seq 0 $((workers - 1))); do
	if ! wait "${pids[$r]}"; then
		echo "FAIL: rank $r exited non-zero"
		tail -n 20 "$tmp/rank$r.out"
		failed=1
	fi
done
pids=()
[ $failed -eq 0 ] || { tail -n 20 "/run/phub-vrack/$rack/pbox.log"; exit 1; }
cat "$tmp/rank0.out"
echo "wall time $(( $(date +%s) - start )) s"
# The same training against the soft PBox on loopback, and one process on the same batches.
PHUB_BUILD_DIR="$build" OMP_NUM_THREADS=1 timeout 200 /usr/bin/python3 "$digits" --mode phub \
	--workers "$workers" "${train[@]}" --check --build "$build" --json "$tmp/loopback.json" \
	>"$tmp/loopback.out" 2>&1 ||
	{ tail -n 20 "$tmp/loopback.out"; echo "FAIL: the loopback run or its check failed"; exit 1; }
grep '^check:' "$tmp/loopback.out"
/usr/bin/python3 - "$tmp/rank0.json" "$tmp/rank1.json" "$tmp/loopback.json" <<'PY' || exit 1
import json, sys
r0, r1, lo = (json.load(open(f)) for f in sys.argv[1:4])
acc = r0["epochs"][-1]["accuracy"]
rack = [(a[1] + b[1]) / 2 for a, b in zip(r0["steps"], r1["steps"])]
ref = lo["results"][0]["loss"]
ok = True
if acc < 0.95:
    print(f"FAIL: test accuracy {acc * 100:.1f}% below 95%")
    ok = False
if len(rack) != len(ref) or rack != ref:
    diff = [i for i, (a, b) in enumerate(zip(rack, ref)) if a != b]
    print(f"FAIL: {len(diff)} of {len(ref)} steps differ from the loopback run "
          f"(first at step {diff[0] if diff else len(ref)})")
    ok = False
if ok:
    print(f"PASS: test accuracy {acc * 100:.1f}% after {len(r0['epochs'])} epochs in the "
          f"rack; all {len(ref)} steps' losses equal to the loopback run's")
sys.exit(0 if ok else 1)
PY
