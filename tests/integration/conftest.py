# SPDX-License-Identifier: BSD-3-Clause
"""The rack fixture of the pytest rack scenarios (test_*.py here): one virtual rack per test,
brought up by the test (rack.up), always torn down.

meson runs each scenario as a test of its own (tests/integration/meson.build) with the
programs in the environment: PHUB_VRACK (scripts/virtual-rack), PHUB_PBOX, PHUB_BENCH and
PHUB_HOSTILE. By hand, as root, from the source tree after `ninja -C build`:

  python3 -m pytest tests/integration/test_pbox_rack.py -k telemetry

(the programs default to build/'s). The rack's name and id come from the scenario's name, as
they always did (pt<id>, 10.<id>.0.0/24), or from its rack_name mark; PHUB_RACK_NAME and
PHUB_RACK_ID choose others, to run beside racks of the same names. The multirack fixture is
the same for a virtual multi-rack (its racks and spine take ids id .. id+R).
"""

import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

from phubrack import rack as rack_mod  # noqa: E402  (after the path above)

BUILD = os.environ.get("PHUB_BUILD_DIR", os.path.join(ROOT, "build"))
PROGRAMS = {
    "PHUB_VRACK": os.path.join(ROOT, "scripts", "virtual-rack"),
    "PHUB_PBOX": os.path.join(BUILD, "app", "pbox", "phub-pbox"),
    "PHUB_BENCH": os.path.join(BUILD, "app", "phub-bench", "phub-bench"),
    "PHUB_HOSTILE": os.path.join(BUILD, "tests", "integration", "phub-hostile"),
}


def program(var):
    return os.environ.get(var) or PROGRAMS[var]


def scenario_name(node):
    """test_two_jobs -> two-jobs; test_workers[3] -> workers-3 (pbox-<name> in meson)."""
    name = node.originalname[len("test_"):].replace("_", "-")
    callspec = getattr(node, "callspec", None)
    return "%s-%s" % (name, callspec.id) if callspec else name


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report on the test item (rep_setup, rep_call), for the fixture below."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def pytest_configure(config):
    config.addinivalue_line("markers", "rack_name(name, id): the scenario's rack has this "
                            "fixed name and id (a rack other tests and docs know by name)")


def _rack(request, cls):
    why = rack_mod.can_run()
    if why:
        pytest.skip(why)
    scenario = scenario_name(request.node)
    fixed = request.node.get_closest_marker("rack_name")
    # A module's racks are named RACK_PREFIX<id> (default pt<id>), the id from the scenario's
    # name in RACK_IDS (first, count; default 100 .. 249).
    lo, span = getattr(request.module, "RACK_IDS", (100, 150))
    rack_id = int(os.environ.get("PHUB_RACK_ID") or (fixed.args[1] if fixed else
                                                     rack_mod.seed_id(scenario, lo, span)))
    prefix = getattr(request.module, "RACK_PREFIX", "pt")
    name = os.environ.get("PHUB_RACK_NAME") or (fixed.args[0] if fixed else
                                                "%s%d" % (prefix, rack_id))
    r = cls(name, rack_id, program("PHUB_VRACK"), program("PHUB_PBOX"), program("PHUB_BENCH"),
            program("PHUB_HOSTILE"))
    try:
        yield r
        call = getattr(request.node, "rep_call", None)
        if call is not None and call.failed:
            print(r.log_tail())
        # Every scenario ends the same way: the PBox stops on SIGTERM and says so.
        if r.started:
            r.stop_check()
    finally:
        r.close()


@pytest.fixture
def rack(request):
    yield from _rack(request, rack_mod.Rack)


@pytest.fixture
def multirack(request):
    """A virtual multi-rack (rack.MultiRack): up with racks, its PBoxes started by the test;
    every PBox still serving at the end must stop on SIGTERM."""
    yield from _rack(request, rack_mod.MultiRack)
