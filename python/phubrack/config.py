# SPDX-License-Identifier: BSD-3-Clause
"""A PBox configuration (docs/config.md) edited in place by a test before the PBox starts."""

import json


def edit(path, statements, env=None):
    """Run Python statements on the config as the dict c (with env's names beside it), then
    write it back (indent 2)."""
    with open(path) as f:
        c = json.load(f)
    exec(statements, dict(env or {}, c=c))
    with open(path, "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    return c
