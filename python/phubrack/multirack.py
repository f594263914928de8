# SPDX-License-Identifier: BSD-3-Clause
"""The virtual multi-rack (scripts/virtual-rack up --racks R): its address plan, and what
each rack's PBox config gets beyond a single rack's (name, peers, declared ring jobs).

Rack r of a multi-rack with base id I is a rack like a single one with id I + r: its own /24,
10.(I+r).0.0/24, PBox port p at .(1+p), worker i at .(100+i). The spine is the /24 of the
next id, 10.(I+R).0.0/24, and rack r's PBox uplink is .(1+r) there. Every rack's config
names the rack "rack<r>" and lists every other rack's PBox as a peer (its spine address and
control port, and the local port that reaches it: the uplink). A ring job is written into
every rack's config alike: the total world size and, in ring order, how many of its ranks
each rack holds (rack r holds the contiguous global ranks after those of racks 0 .. r-1).
"""

import json
import re

MAX_RACKS = 16          # peers[] holds at most 16 entries; the ring at most 16 PBoxes
MAX_WORKERS = 150       # worker i is 10.x.0.(100+i)
UDP_BASE_PORT = 47000
UPLINK_PORT = "uplink"
DTYPES = ("fp32", "fp16", "bf16")
OPTIMIZERS = ("none", "sgd", "momentum", "nesterov", "adam", "adamw")
_NAME = re.compile(r"^[\x21-\x7e]([\x20-\x7e]{0,61}[\x21-\x7e])?$")
_NONCE = re.compile(r"^0x[0-9a-fA-F]{16}$")


class PlanError(ValueError):
    """A multi-rack the plan refuses; str() says why."""


def rack_name(r):
    """The name of rack r in the PBox configs (top-level name, peers[].name, racks[].pbox)."""
    return "rack%d" % r


def parse_counts(what, text, racks):
    """'2' (every rack) or '1,2,3' (one per rack) as a list of racks ints in 1 .. 150."""
    parts = text.split(",") if text else []
    if len(parts) == 1:
        parts = parts * racks
    if len(parts) != racks:
        raise PlanError("%s '%s': one count, or one per rack (%d)" % (what, text, racks))
    counts = []
    for p in parts:
        if not re.match(r"^[1-9][0-9]*$", p) or int(p) > MAX_WORKERS:
            raise PlanError("%s '%s': counts are integers in 1..%d" % (what, text, MAX_WORKERS))
        counts.append(int(p))
    return counts


def plan(base_id, racks, workers, ports=1):
    """The address plan of R racks from base id I; workers is a list of R counts."""
    if not 2 <= racks <= MAX_RACKS:
        raise PlanError("--racks %d: a multi-rack has 2..%d racks" % (racks, MAX_RACKS))
    if not 1 <= base_id or base_id + racks > 254:
        raise PlanError("--id %d with %d racks: the racks take ids %d..%d and the spine %d,"
                        " at most 254" % (base_id, racks, base_id, base_id + racks - 1,
                                          base_id + racks))
    if len(workers) != racks:
        raise PlanError("%d worker counts for %d racks" % (len(workers), racks))
    spine_id = base_id + racks
    p = {"racks": racks, "spine_net": "10.%d.0.0/24" % spine_id, "rack": []}
    for r in range(racks):
        rid = base_id + r
        p["rack"].append({
            "name": rack_name(r),
            "id": rid,
            "net": "10.%d.0.0/24" % rid,
            "pbox": ["10.%d.0.%d" % (rid, 1 + q) for q in range(ports)],
            "workers": ["10.%d.0.%d" % (rid, 100 + i) for i in range(1, workers[r] + 1)],
            "spine": "10.%d.0.%d" % (spine_id, 1 + r),
        })
    return p


def shell(p):
    """The plan as bash assignments (arrays indexed by rack) for virtual-rack to eval."""
    def arr(key):
        return "(%s)" % " ".join(str(rk[key]) for rk in p["rack"])
    return "\n".join([
        "plan_ids=%s" % arr("id"),
        "plan_workers=(%s)" % " ".join(str(len(rk["workers"])) for rk in p["rack"]),
        "plan_spine=%s" % arr("spine"),
        "plan_spine_net=%s" % p["spine_net"],
    ])


def parse_ring_job(spec, workers):
    """NAME:NONCE[:RANKS[:DTYPE[:OPTIMIZER[:deterministic]]]] as a jobs[] entry.

    RANKS is one count for every rack or one per rack ('1,2,3'); by default each rack's
    worker count. Names may not hold ':'.
    """
    f = spec.split(":")
    if len(f) < 2 or len(f) > 6:
        raise PlanError("--ring-job '%s': expected NAME:NONCE[:RANKS[:DTYPE[:OPTIMIZER"
                        "[:deterministic]]]]" % spec)
    name, nonce = f[0], f[1]
    if not _NAME.match(name):
        raise PlanError("--ring-job '%s': job name '%s': 1 to 63 printable characters"
                        % (spec, name))
    if not _NONCE.match(nonce):
        raise PlanError("--ring-job '%s': nonce '%s': 0x and 16 hex digits" % (spec, nonce))
    ranks = list(workers)
    if len(f) > 2 and f[2]:
        ranks = parse_counts("--ring-job ranks", f[2], len(workers))
    job = {"name": name, "nonce": nonce.lower(), "workers": sum(ranks)}
    if len(f) > 3 and f[3]:
        if f[3] not in DTYPES:
            raise PlanError("--ring-job '%s': dtype '%s': one of %s" % (spec, f[3],
                                                                     ", ".join(DTYPES)))
        job["dtype"] = f[3]
    if len(f) > 4 and f[4]:
        if f[4] not in OPTIMIZERS:
            raise PlanError("--ring-job '%s': optimizer '%s': one of %s"
                            % (spec, f[4], ", ".join(OPTIMIZERS)))
        job["optimizer"] = {"type": f[4]}
    if len(f) > 5:
        if f[5] != "deterministic":
            raise PlanError("--ring-job '%s': the last field is 'deterministic' or nothing"
                            % spec)
        job["deterministic"] = True
    job["racks"] = [{"pbox": rack_name(r), "ranks": n} for r, n in enumerate(ranks)]
    return job


def first_ranks(job):
    """The first global rank of each rack of a ring job (ring order, contiguous)."""
    out, g = [], 0
    for rk in job["racks"]:
        out.append(g)
        g += rk["ranks"]
    return out


def ring_config(c, r, p, jobs, udp_port=UDP_BASE_PORT):
    """Rack r's config c (a dict, changed in place): its name, its peers, the ring jobs."""
    names = set()
    for job in jobs:
        if job["name"] in names:
            raise PlanError("two ring jobs named '%s'" % job["name"])
        names.add(job["name"])
        if len(job["racks"]) != p["racks"]:
            raise PlanError("ring job '%s' has %d racks, the multi-rack %d"
                            % (job["name"], len(job["racks"]), p["racks"]))
    if not any(port.get("name") == UPLINK_PORT for port in c.get("ports", [])):
        raise PlanError("rack %d's config has no port '%s'" % (r, UPLINK_PORT))
    c["name"] = rack_name(r)
    c["peers"] = [{"name": rk["name"], "ipv4": rk["spine"], "udp_port": udp_port,
                   "port": UPLINK_PORT}
                  for q, rk in enumerate(p["rack"]) if q != r]
    c["jobs"] = [j for j in c.get("jobs", []) if j.get("name") not in names] + \
        [json.loads(json.dumps(j)) for j in jobs]
    return c


def strip_ring(c):
    """What a PBox without the ring (today's lib/config and app/pbox) takes and can serve: no
    name, no peers[].port, no ring jobs, and no uplink port: such a PBox places workers' chunks
    on every port's lcores, and a worker cannot reach the uplink's address. For tests that use
    a multi-rack's racks one by one."""
    c.pop("name", None)
    for peer in c.get("peers", []):
        peer.pop("port", None)
    c["jobs"] = [j for j in c.get("jobs", []) if "racks" not in j]
    c["ports"] = [p for p in c.get("ports", []) if p.get("name") != UPLINK_PORT]
    return c
