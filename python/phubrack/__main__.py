# SPDX-License-Identifier: BSD-3-Clause
"""The command line the rack's shell scripts call: python3 -m phubrack COMMAND ARGS.

  expect REPORT COND...     exit 1 (and say which) unless every Python condition on the
                            phub-bench report r holds
  summary LABEL REPORT      the report's figures on one line (brief LABEL REPORT: shorter)
  merge [OUT]               dpdk-telemetry.py's answers on stdin as one JSON object (to OUT)
  query EXPR [FILE]         print EXPR evaluated on the merged telemetry t (FILE or stdin);
                            --default V before EXPR: print V when EXPR cannot be evaluated
  holds EXPR [FILE]...      exit 0 when EXPR holds; t is FILE's telemetry, and with several
                            files t0, t1, ... are theirs (r0, r1, ... when a file is a report)
  stats-delta BEFORE AFTER [COND...]
                            print the /phub/stats counters that moved between two telemetry
                            snapshots; exit 1 unless every condition on d (the deltas, drop
                            reasons as d["drops.<reason>"], 0 where nothing moved) holds
  config-edit FILE STMTS    run Python statements on the PBox config c in FILE, write it back
                            (json-edit: the same for any JSON document)
  test-summary DIR...       "N passed, N failed, N skipped" over the build dirs' meson test
                            logs; exit 1 when any failed
  netem-plan ARGS...        virtual-rack's netem fallback: the netem arguments as shell
                            assignments (loss=... dup=...), or exit 1 saying what it lacks
  netem-links --workers N[,N1,..] [--spine-rate RATE] [--netem SPEC]... [--spine-netem SPEC]...
                            the impaired links of --netem and --spine-netem: "worker R W DIR
                            ARGS..." and "spine R DIR ARGS..." lines, or exit 1 saying why
  rack-plan --id I --racks R --workers N|N0,N1,.. [--ports P] [--ring-job SPEC]...
                            the multi-rack's address plan as shell assignments (plan_ids,
                            plan_workers, plan_spine, plan_spine_net); checks the ring jobs
  ring-config FILE --rack Q (the options of rack-plan)
                            rack Q's PBox config: its name, peers[] and the ring jobs
  ring-strip FILE           remove the ring keys (name, peers[].port, ring jobs) from a config
  pbox-config FILE --rack NAME --id I --ports P --lcores L --mtu M --driver D
              --memory-mb MB --checkpoint-dir DIR --checkpoint-interval N [--uplink ADDR]
                            write a virtual rack's PBox config to FILE (rackconfig.py)
"""

import collections
import json
import sys

from . import config, multirack, netem, rackconfig, report, telemetry, testlog


def usage():
    sys.stderr.write(__doc__)
    return 2


def read_json_or_telemetry(path):
    """A file of one JSON document, or of dpdk-telemetry.py's lines."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        return telemetry.merge(text.splitlines())


def cmd_expect(args):
    if len(args) < 1:
        return usage()
    r = report.load(args[0])
    bad = report.failed(r, args[1:])
    for cond in bad[:1]:
        print("  not true:", cond, "in", report.context(r))
    return 1 if bad else 0


def cmd_summary(args, fn):
    if len(args) != 2:
        return usage()
    print(fn(args[0], report.load(args[1])))
    return 0


def cmd_merge(args):
    merged = telemetry.merge(sys.stdin)
    if args:
        with open(args[0], "w") as f:
            json.dump(merged, f)
    else:
        json.dump(merged, sys.stdout)
        sys.stdout.write("\n")
    return 0


def cmd_query(args):
    default = None
    if args[:1] == ["--default"] and len(args) >= 3:
        default, args = args[1], args[2:]
    if len(args) not in (1, 2):
        return usage()
    t = read_json_or_telemetry(args[1]) if len(args) == 2 else telemetry.merge(sys.stdin)
    try:
        print(eval(args[0], {"t": t}))
    except (KeyError, IndexError, TypeError, ValueError):
        if default is None:
            raise
        print(default)
    return 0


def cmd_holds(args):
    if len(args) < 1:
        return usage()
    env = {}
    docs = [read_json_or_telemetry(p) for p in args[1:]]
    if len(args) == 1:
        docs = [telemetry.merge(sys.stdin)]
    env["t"] = docs[0]
    for i, d in enumerate(docs):
        env["t%d" % i] = d
        env["r%d" % i] = d
    try:
        return 0 if eval(args[0], env) else 1
    except (KeyError, IndexError, TypeError):
        return 1


def cmd_stats_delta(args):
    if len(args) < 2:
        return usage()
    moved = telemetry.stats_delta(read_json_or_telemetry(args[0]),
                                  read_json_or_telemetry(args[1]))
    print("PBox counters that moved:", {k: v for k, v in moved.items() if v != 0})
    d = collections.defaultdict(int, moved)
    bad = [c for c in args[2:] if not eval(c, {"d": d})]
    for cond in bad[:1]:
        print("  not true:", cond)
    return 1 if bad else 0


def cmd_config_edit(args):
    if len(args) != 2:
        return usage()
    config.edit(args[0], args[1])
    return 0


def cmd_test_summary(args):
    passed, failed, skipped = testlog.count(args)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0


def cmd_netem_plan(args):
    try:
        print(netem.shell(netem.plan(args)))
    except netem.NetemError as e:
        sys.stderr.write("virtual-rack: %s\n" % e)
        return 1
    return 0


def cmd_netem_links(args):
    workers, rate, specs, spine_specs = None, None, [], []
    try:
        for key, value in zip(args[::2], args[1::2]):
            if key == "--workers":
                workers = [int(n) for n in value.split(",")]
            elif key == "--spine-rate":
                rate = value
            elif key == "--netem":
                specs.append(value)
            elif key == "--spine-netem":
                spine_specs.append(value)
            else:
                raise netem.NetemError("netem-links: unknown option '%s'" % key)
        if len(args) % 2 or not workers:
            raise netem.NetemError("netem-links: --workers N[,N1,..] and option values")
        links = netem.worker_links(specs, workers)
        spine = netem.spine_links(spine_specs, len(workers), rate)
    except (netem.NetemError, ValueError) as e:
        sys.stderr.write("virtual-rack: %s\n" % e)
        return 1
    for r, w, d, a in links:
        print("worker", r, w, d, " ".join(a))
    for r, d, a in spine:
        print("spine", r, d, " ".join(a))
    return 0


def parse_plan_args(args):
    """The options of rack-plan and ring-config: (plan, ring jobs, rack or None)."""
    opts = {"--id": None, "--racks": None, "--workers": None, "--ports": "1", "--rack": None}
    specs = []
    i = 0
    while i < len(args):
        if i + 1 >= len(args):
            raise multirack.PlanError("option %s needs a value" % args[i])
        if args[i] == "--ring-job":
            specs.append(args[i + 1])
        elif args[i] in opts:
            opts[args[i]] = args[i + 1]
        else:
            raise multirack.PlanError("unknown option '%s'" % args[i])
        i += 2
    for key in ("--id", "--racks", "--workers"):
        if opts[key] is None:
            raise multirack.PlanError("%s is required" % key)
    try:
        base_id, racks, ports = int(opts["--id"]), int(opts["--racks"]), int(opts["--ports"])
    except ValueError:
        raise multirack.PlanError("--id, --racks and --ports are integers")
    workers = multirack.parse_counts("--workers", opts["--workers"], racks)
    p = multirack.plan(base_id, racks, workers, ports)
    jobs = [multirack.parse_ring_job(s, workers) for s in specs]
    rack = None
    if opts["--rack"] is not None:
        rack = int(opts["--rack"])
        if not 0 <= rack < racks:
            raise multirack.PlanError("--rack %d: racks are 0..%d" % (rack, racks - 1))
    return p, jobs, rack


def cmd_rack_plan(args):
    try:
        p, jobs, _ = parse_plan_args(args)
        multirack.ring_config({"ports": [{"name": multirack.UPLINK_PORT}]}, 0, p, jobs)
    except multirack.PlanError as e:
        sys.stderr.write("virtual-rack: %s\n" % e)
        return 1
    print(multirack.shell(p))
    return 0


def cmd_ring_config(args):
    if len(args) < 1:
        return usage()
    try:
        p, jobs, rack = parse_plan_args(args[1:])
        if rack is None:
            raise multirack.PlanError("ring-config: --rack is required")
        config.edit(args[0], "ring_config(c, %d, p, jobs)" % rack,
                    {"ring_config": multirack.ring_config, "p": p, "jobs": jobs})
    except multirack.PlanError as e:
        sys.stderr.write("virtual-rack: %s\n" % e)
        return 1
    return 0


def cmd_ring_strip(args):
    if len(args) != 1:
        return usage()
    config.edit(args[0], "strip_ring(c)", {"strip_ring": multirack.strip_ring})
    return 0


PBOX_CONFIG_OPTS = {"--rack": str, "--id": int, "--ports": int, "--lcores": int, "--mtu": int,
                    "--driver": str, "--memory-mb": int, "--checkpoint-dir": str,
                    "--checkpoint-interval": int, "--uplink": str}


def cmd_pbox_config(args):
    if len(args) < 1 or len(args) % 2 != 1:
        return usage()
    opts = {"--uplink": None}
    try:
        for key, value in zip(args[1::2], args[2::2]):
            if key not in PBOX_CONFIG_OPTS:
                raise rackconfig.RackConfigError("pbox-config: unknown option '%s'" % key)
            try:
                opts[key] = PBOX_CONFIG_OPTS[key](value)
            except ValueError:
                raise rackconfig.RackConfigError("pbox-config: %s '%s': an integer"
                                                 % (key, value))
        missing = [k for k in PBOX_CONFIG_OPTS if k not in opts]
        if missing:
            raise rackconfig.RackConfigError("pbox-config: %s is required" % missing[0])
        c = rackconfig.pbox_config(opts["--rack"], opts["--id"], opts["--ports"],
                                   opts["--lcores"], opts["--mtu"], opts["--driver"],
                                   opts["--memory-mb"], opts["--checkpoint-dir"],
                                   opts["--checkpoint-interval"], opts["--uplink"])
    except rackconfig.RackConfigError as e:
        sys.stderr.write("virtual-rack: %s\n" % e)
        return 1
    rackconfig.write(args[0], c)
    return 0


def main(argv):
    if not argv:
        return usage()
    cmd, args = argv[0], argv[1:]
    if cmd == "expect":
        return cmd_expect(args)
    if cmd == "summary":
        return cmd_summary(args, report.summary)
    if cmd == "brief":
        return cmd_summary(args, report.brief)
    if cmd == "merge":
        return cmd_merge(args)
    if cmd == "query":
        return cmd_query(args)
    if cmd == "holds":
        return cmd_holds(args)
    if cmd == "stats-delta":
        return cmd_stats_delta(args)
    if cmd in ("config-edit", "json-edit"):
        return cmd_config_edit(args)
    if cmd == "test-summary":
        return cmd_test_summary(args)
    if cmd == "netem-plan":
        return cmd_netem_plan(args)
    if cmd == "netem-links":
        return cmd_netem_links(args)
    if cmd == "rack-plan":
        return cmd_rack_plan(args)
    if cmd == "ring-config":
        return cmd_ring_config(args)
    if cmd == "ring-strip":
        return cmd_ring_strip(args)
    if cmd == "pbox-config":
        return cmd_pbox_config(args)
    return usage()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
