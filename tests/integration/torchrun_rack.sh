#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# torchrun across two hosts of a virtual rack: docs/pytorch.md's two-host recipe (the block
# marked "snippet: torchrun-two-hosts"), run as written in each worker namespace, 2 nodes x 2
# processes of python/examples/train_digits.py through phub-pbox, the job declared in the PBox's
# config (jobs[0]: name, nonce, workers 4). Before it, a JOIN with WORLD_SIZE 2 and one with
# another nonce must be refused with messages that name jobs[0].workers and WORLD_SIZE, and the
# nonce. Every step's global loss must equal the same training against the soft PBox on
# loopback (4 ranks, deterministic: bit for bit). The rack is always torn down.
#
#   R-pbox: phub-pbox (net_tap, 2 lcores), 10.I.0.1
#   R-w1 (10.I.0.101): node 0, ranks 0 1, torchrun's rendezvous (master)
#   R-w2 (10.I.0.102): node 1, ranks 2 3
#   the host: phub-soft-pbox on loopback, the reference run
#
# usage: torchrun_rack.sh VIRTUAL_RACK PHUB_PBOX SOURCE_DIR BUILD_DIR
# Exits 77 with the reason when it cannot run here (not root, no /dev/net/tun, no torch).
set -uo pipefail

vrack=$1
pbox_bin=$2
src=$3
build=$4

if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: the virtual rack needs root (network namespaces)"
	exit 77
fi
if [ ! -c /dev/net/tun ]; then
	echo "SKIP: no /dev/net/tun for net_tap"
	exit 77
fi
if ! /usr/bin/python3 -c 'import torch, sklearn, torch.distributed.run' 2>/dev/null; then
	echo "SKIP: python3-torch or python3-sklearn missing"
	exit 77
fi

id=251
rack="trun$id"
server="10.$id.0.1"
host_a="10.$id.0.101"
job=digits
nonce=0x6a1f3c5e7d9b2408
epochs=4
tmp=$(mktemp -d)
pids=()
# What every process of the test sees: Debian's python3 first, the package from the tree.
penv=(env PATH=/usr/bin:/bin PYTHONPATH="$src/python" PHUB_BUILD_DIR="$build"
	PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1)

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

# The recipe as docs/pytorch.md shows it, for node $1: the documentation's addresses become
# the rack's, NODE its node, and the run writes each rank's losses (deterministic, short).
recipe()
{
	/usr/bin/python3 - "$src/docs/pytorch.md" "$1" "$server" "$host_a" "$tmp" "$epochs" <<'PY'
import re, sys
doc, node, server, host_a, tmp, epochs = sys.argv[1:7]
m = re.search(r"<!-- snippet: torchrun-two-hosts -->\n```sh\n(.*?)```", open(doc).read(), re.S)
if m is None:
    sys.exit("docs/pytorch.md has no block marked 'snippet: torchrun-two-hosts'")
text = m.group(1).replace("10.0.0.101", host_a)
text = re.sub(r"\b10\.0\.0\.1\b", server, text)
text, n = re.subn(r"^NODE=0\b.*$", f"NODE={node}", text, flags=re.M)
if n != 1:
    sys.exit("the recipe has no line 'NODE=0'")
print(text.rstrip("\n") + f" --deterministic --epochs {epochs} --json {tmp}/rank.json")
PY
}

"$vrack" down --name "$rack" >/dev/null 2>&1
"$vrack" up --name "$rack" --id "$id" --workers 2 >"$tmp/up.log" 2>&1 ||
	{ cat "$tmp/up.log"; echo "FAIL: the rack did not come up"; exit 1; }
# The job declared as an operator would: its name, nonce, world size and optimizer.
/usr/bin/python3 - "/run/phub-vrack/$rack/pbox.json" "$job" "$nonce" <<'PY' || exit 1
import json, sys
path, name, nonce = sys.argv[1:4]
cfg = json.load(open(path))
cfg["jobs"] = [{"name": name, "nonce": nonce, "workers": 4, "dtype": "fp32",
                "deterministic": True,
                "optimizer": {"type": "momentum", "lr": 0.05, "momentum": 0.9}}]
# Ranks that import torch on a loaded machine may join far apart: not a dead worker.
cfg.setdefault("timeouts", {})["worker_dead_ms"] = 60000
json.dump(cfg, open(path, "w"), indent=2)
PY
"$vrack" pbox-start --name "$rack" --bin "$pbox_bin" >"$tmp/pbox-start.log" 2>&1 ||
	{ cat "$tmp/pbox-start.log"; echo "FAIL: the PBox did not start"; exit 1; }

failed=0
# A launch of 1 node x 2 processes against the job declared for 4, then another nonce: the
# worker's error names the config key and the variable to change.
join_once='import torch, phub.torch as pt
pt.init()
pt.DistributedOptimizer(torch.nn.Linear(4, 2), "momentum", lr=0.05, momentum=0.9)'
ip netns exec "$rack-w1" "${penv[@]}" PHUB_SERVER="$server" PHUB_JOB="$job" \
	PHUB_NONCE="$nonce" RANK=0 WORLD_SIZE=2 timeout 60 /usr/bin/python3 -c "$join_once" \
	>"$tmp/world.out" 2>&1 && { echo "FAIL: a JOIN with WORLD_SIZE 2 was taken"; failed=1; }
for want in "jobs[0].workers is 4" "world size 2 from WORLD_SIZE" "PhubError"; do
	grep -qF "$want" "$tmp/world.out" ||
		{ echo "FAIL: the refusal of WORLD_SIZE 2 does not say '$want':"; cat "$tmp/world.out";
		  failed=1; }
done
ip netns exec "$rack-w1" "${penv[@]}" PHUB_SERVER="$server" PHUB_JOB="$job" \
	PHUB_NONCE=0x1234 RANK=0 WORLD_SIZE=4 timeout 60 /usr/bin/python3 -c "$join_once" \
	>"$tmp/nonce.out" 2>&1 && { echo "FAIL: a JOIN with another nonce was taken"; failed=1; }
for want in "PhubAuthError" "wrong nonce" "nonce from PHUB_NONCE" "jobs[].nonce"; do
	grep -qF "$want" "$tmp/nonce.out" ||
		{ echo "FAIL: the refusal of another nonce does not say '$want':"; cat "$tmp/nonce.out";
		  failed=1; }
done
[ $failed -eq 0 ] && echo "ok: the refusals name jobs[0].workers, WORLD_SIZE and the nonce"
tail -n 1 "$tmp/world.out"

start=$(date +%s)
for node in 0 1; do
	recipe "$node" >"$tmp/node$node.sh" || exit 1
	(cd "$src" && ip netns exec "$rack-w$((node + 1))" "${penv[@]}" timeout 180 \
		bash -e "$tmp/node$node.sh" >"$tmp/node$node.out" 2>&1) &
	pids+=($!)
done
echo "node 0 ran: $(cat "$tmp/node0.sh")"
for node in 0 1; do
	if ! wait "${pids[$node]}"; then
		echo "FAIL: node $node's launch exited non-zero"
		tail -n 30 "$tmp/node$node.out"
		failed=1
	fi
done
pids=()
[ $failed -eq 0 ] || { tail -n 20 "/run/phub-vrack/$rack/pbox.log"; exit 1; }
grep -h "epoch" "$tmp/node0.out"
echo "wall time of the launches $(( $(date +%s) - start )) s"
# The same training against the soft PBox on loopback, 4 ranks in one launch. Its 4 processes
# each import torch before they join: on a loaded machine that can take longer than the
# default 10 s a rank may keep the others waiting.
"$build/tests/support/phub-soft-pbox" --port 0 --lcores 2 --worker-dead-ms 60000 \
	>"$tmp/soft.out" 2>"$tmp/soft.err" &
soft=$!
pids+=("$soft")
for _ in $(seq 50); do
	soft_port=$(grep -o 'control 127\.0\.0\.1:[0-9]*' "$tmp/soft.out" | cut -d: -f2)
	[ -n "$soft_port" ] && break
	sleep 0.1
done
[ -n "$soft_port" ] || { cat "$tmp/soft.out" "$tmp/soft.err"; echo "FAIL: no soft PBox"; exit 1; }
(cd "$src" && "${penv[@]}" timeout 180 /usr/bin/python3 python/examples/train_digits.py \
	--mode phub --workers 4 --deterministic --epochs "$epochs" --server 127.0.0.1 \
	--port "$soft_port" --json "$tmp/loopback.json" >"$tmp/loopback.out" 2>&1) ||
	{ tail -n 20 "$tmp/loopback.out"; echo "FAIL: the loopback run failed"; exit 1; }
kill "$soft"
/usr/bin/python3 - "$tmp" <<'PY' || exit 1
import json, sys
import numpy as np
tmp = sys.argv[1]
ranks = [json.load(open(f"{tmp}/rank.json.{r}")) for r in range(4)]
lo = json.load(open(f"{tmp}/loopback.json"))
# The global loss of a step as train_digits.py computes it: the mean of the shards' losses.
rack = np.mean([[s[1] for s in r["steps"]] for r in ranks], axis=0).tolist()
ref = lo["results"][0]["loss"]
acc = ranks[0]["epochs"][-1]["accuracy"]
ok = True
if len(rack) != len(ref) or rack != ref:
    diff = [i for i, (a, b) in enumerate(zip(rack, ref)) if a != b]
    print(f"FAIL: {len(diff)} of {len(ref)} steps differ from the loopback run "
          f"(first at step {diff[0] if diff else min(len(rack), len(ref))})")
    ok = False
if acc < 0.85:
    print(f"FAIL: test accuracy {acc * 100:.1f}% below 85% after {len(ranks[0]['epochs'])} epochs")
    ok = False
if ok:
    print(f"PASS: 2 nodes x 2 processes under torchrun, test accuracy {acc * 100:.1f}%; all "
          f"{len(ref)} steps' global losses equal to the loopback run's")
sys.exit(0 if ok else 1)
PY
