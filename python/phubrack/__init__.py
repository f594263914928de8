# SPDX-License-Identifier: BSD-3-Clause
"""phubrack: what the rack's shell scripts ask of Python, in one tested place.

The integration tests and bench scripts drive the virtual rack with ip, tc and the PHub
programs in bash; the JSON they read (phub-bench reports, the PBox's telemetry, its config) is
read here: telemetry merges dpdk-telemetry.py's answers, report checks and summarises a
phub-bench report, config edits a PBox configuration; rackconfig writes a virtual rack's
PBox configuration, netem reads the --netem grammar, multirack plans a multi-rack. `python3 -m phubrack` is the command
line the scripts call (see __main__.py). rack drives a virtual rack and its PBox from Python for
the pytest rack scenarios (tests/integration/test_*.py), probe runs inside a namespace.
"""
