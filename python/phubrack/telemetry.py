# SPDX-License-Identifier: BSD-3-Clause
"""The PBox's telemetry as dpdk-telemetry.py prints it: one JSON object per command."""

import json
import os
import socket

RUN_DIR = "/var/run/dpdk"


def merge(lines):
    """One dict of every JSON object in lines (dpdk-telemetry.py's banner lines are skipped):
    {"/phub/stats": {...}, "/phub/jobs": {...}}. A later answer to the same command wins."""
    out = {}
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            out.update(json.loads(line))
    return out


def query(file_prefix, commands, run_dir=RUN_DIR, timeout=5):
    """The answers of the DPDK process of EAL file prefix FILE_PREFIX to telemetry COMMANDS,
    merged as merge() does: what dpdk-telemetry.py -f FILE_PREFIX prints for them, read from
    its socket directly (a path in the file system: any network namespace reaches it). {}
    when no process answers there."""
    path = os.path.join(run_dir, file_prefix, "dpdk_telemetry.v2")
    out = {}
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(timeout)
            s.connect(path)
            out.update(json.loads(s.recv(1024)))
            for cmd in commands:
                s.send(cmd.encode())
                out.update(json.loads(s.recv(out["max_output_len"])))
    except (OSError, ValueError):
        pass  # the answers so far, as dpdk-telemetry.py would have printed them
    return out


def load(path):
    """The merged answers in a file: either dpdk-telemetry.py's raw output or merge()'s."""
    with open(path) as f:
        return merge(f)


def _flatten(stats, prefix=""):
    """{"pushes": 5, "drops": {"bad_csum": 1}} -> {"pushes": 5, "drops.bad_csum": 1}."""
    out = {}
    for k, v in stats.items():
        if isinstance(v, dict):
            out.update(_flatten(v, prefix + k + "."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[prefix + k] = v
    return out


def stats_delta(before, after):
    """How every counter of /phub/stats moved between two snapshots (merged telemetry), drop
    reasons as "drops.<reason>"; a counter one snapshot lacks counts from 0."""
    a = _flatten(before.get("/phub/stats", {}))
    b = _flatten(after.get("/phub/stats", {}))
    return {k: b.get(k, 0) - a.get(k, 0) for k in sorted(set(a) | set(b))}


def delta(before, after, key):
    """after[key] - before[key] for a counter of /phub/stats (0 where a snapshot lacks it)."""
    return after.get(key, 0) - before.get(key, 0)
