# SPDX-License-Identifier: BSD-3-Clause
"""phub-bench's --json report: conditions on it and its one-line summary."""

import json

# The fields a failed condition shows, so that the log says why without the whole report.
CONTEXT = ("job", "workers", "verified", "bitwise", "max_abs_error", "retransmits", "pulls",
           "error")


def load(path):
    with open(path) as f:
        return json.load(f)


def failed(r, conditions):
    """The conditions (Python expressions on the report r) that do not hold, in order. A
    condition that raises (a missing field) does not hold either."""
    bad = []
    for cond in conditions:
        try:
            ok = eval(cond, {"r": r})
        except Exception as e:  # a missing key is a failed check, said as such
            ok = False
            cond = "%s (%s: %s)" % (cond, type(e).__name__, e)
        if not ok:
            bad.append(cond)
    return bad


def context(r):
    """The report's key fields, for a message."""
    return {k: r.get(k) for k in CONTEXT if k in r}


def summary(label, r):
    """One line of a run's figures, for logs and docs."""
    return "%-28s %2d workers  %7.1f exch/s  p50 %7.2f ms  retransmits %6d  pulls %6d  %s" % (
        label, r["workers"], r["exchanges_per_s"], r["p50_ms"], r["retransmits"], r["pulls"],
        "exact" if r["verified"] and r["bitwise"] else "NOT EXACT")


def brief(label, r):
    """A shorter line: workers, rate, retransmits, pulls, verified."""
    return "%s: %d workers, %.1f exchanges/s, retransmits %d, pulls %d, verified %s" % (
        label, r["workers"], r["exchanges_per_s"], r["retransmits"], r["pulls"], r["verified"])
