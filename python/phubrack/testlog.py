# SPDX-License-Identifier: BSD-3-Clause
"""meson's test logs (meson-logs/testlog.json: one JSON object per test run) summed up for
scripts/test's last line."""

import json
import os

PASSED = ("OK", "EXPECTEDFAIL")


def count(build_dirs):
    """(passed, failed, skipped) over the testlog.json of each build dir that has one."""
    passed = failed = skipped = 0
    for d in build_dirs:
        log = os.path.join(d, "meson-logs", "testlog.json")
        if not os.path.exists(log):
            continue
        with open(log) as f:
            for line in f:
                if not line.strip():
                    continue
                result = json.loads(line)["result"]
                if result in PASSED:
                    passed += 1
                elif result == "SKIP":
                    skipped += 1
                else:
                    failed += 1
    return passed, failed, skipped
