#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The monitoring files agree with the exporter: promtool checks the alerting rules and runs
# their unit tests (monitoring/phub-alerts.test.yml); the Grafana dashboard is valid JSON and
# every metric its queries and the rules name is one phub-exporter serves (--list-metrics).
#
# Usage: monitoring.sh SOURCE_DIR

set -euo pipefail

src=$(realpath "$1")
exporter=$src/app/phub-exporter/phub-exporter

if ! command -v promtool >/dev/null; then
	echo "SKIP: no promtool (Debian's prometheus)"
	exit 77
fi
if ! /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null; then
	echo "SKIP: no python3-prometheus-client"
	exit 77
fi

promtool check rules "$src/monitoring/phub-alerts.yml"
(cd "$src/monitoring" && promtool test rules phub-alerts.test.yml)
"$exporter" --version | grep -q '^phub-exporter ' || { echo "FAIL: phub-exporter --version"; exit 1; }

"$exporter" --list-metrics | /usr/bin/python3 -c '
import json, re, sys
served = set(sys.stdin.read().split())
src = sys.argv[1]

def metrics(expr):
    """The metric names of a PromQL expression: label matchers, groupings and legends out."""
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    return set(re.findall(r"\bphub_[a-z0-9_]+", expr))

dash = json.load(open(src + "/monitoring/phub-dashboard.json"))
exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
assert len(dash["panels"]) >= 10 and all(p.get("targets") for p in dash["panels"]), \
    "a panel without a query"
for v in dash["templating"]["list"]:
    exprs.append(v["query"].replace("label_values(", "").split(",")[0])
rules = open(src + "/monitoring/phub-alerts.yml").read()
rule_exprs = re.findall(r"expr: >-\n((?:\s{10}.*\n)+)|expr: (.*)", rules)
rule_exprs = [a or b for a, b in rule_exprs]
bad = {}
for where, es in (("dashboard", exprs), ("alerts", rule_exprs)):
    named = set().union(*(metrics(e) for e in es))
    if not named:
        bad[where] = "names no metric"
    unknown = sorted(named - served)
    if unknown:
        bad[where] = unknown
    print("%s: %d queries, %d metrics, all served: %s" % (where, len(es), len(named),
                                                         not unknown))
if bad:
    print("FAIL: not served by phub-exporter:", bad)
    sys.exit(1)
' "$src"
echo PASS
