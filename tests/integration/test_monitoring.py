# SPDX-License-Identifier: BSD-3-Clause
"""The monitoring files agree with the exporter (meson: monitoring): promtool checks the
alerting rules and runs their unit tests (monitoring/phub-alerts.test.yml); the Grafana
dashboard is valid JSON and every metric its queries and the rules name is one phub-exporter
serves (--list-metrics). Then phub-exporter --once against a fake PBox (a telemetry socket
with canned answers): each counter as name_total, gauges, labels and units as
docs/operations.md lists them; and without a PBox, phub_up 0 and exit 1.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import threading

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXPORTER = os.path.join(ROOT, "app", "phub-exporter", "phub-exporter")
MONITORING = os.path.join(ROOT, "monitoring")

# What the fake PBox answers, command by command.
ANSWERS = {
    "/phub/stats": {"version": "0.1.0", "kernels": "avx2", "uptime_ms": 18635,
                    "rx_packets": 975137, "pushes": 974148, "aggregation_ns": 1045306652,
                    "jobs_failed": 2, "model_payloads_inline": 7,
                    "drops": {"future_iteration": 649, "bad_magic": 20}},
    "/phub/lcores": {"1": {"pushes": 487032, "busy_ns": 2106457112, "loops": 1476298},
                     "2": {"pushes": 487116, "busy_ns": 5, "loops": 9}},
    "/phub/ports": {"p0": {"device": "net_tap0", "ipv4": "10.1.0.1", "steering": "tap_bpf",
                           "mtu": 1500, "link_up": 0, "imissed": 3, "rx_nombuf": 4}},
    "/phub/jobs": {"7": {"id": 7, "name": "bert large", "world_size": 4, "joined": 4,
                         "pushes": 1234, "iterations_done": 5}},
    "/phub/ring": {"jobs": {"7": {"name": "bert large", "linked": 0,
                                  "prev": {"rack": "r1", "last_heard_ms": 2500},
                                  "next": {"rack": "r2", "last_heard_ms": 10}}},
                   "to_next_bytes": 99},
    "/phub/health": {"status": "degraded", "level": 1, "reasons": ["port p0: link down"],
                     "watchdog_pings": 3},
}

# The lines phub-exporter --once must print for them, each exactly.
LINES = """phub_up 1.0
phub_pushes_total 974148.0
phub_aggregation_seconds_total 1.045306652
phub_jobs_failed_total 2.0
phub_drops_total{reason="bad_magic"} 20.0
phub_drops_total{reason="future_iteration"} 649.0
phub_model_payloads_total{how="inline"} 7.0
phub_lcore_busy_seconds_total{lcore="1"} 2.106457112
phub_lcore_loops_total{lcore="2"} 9.0
phub_port_imissed_total{port="p0"} 3.0
phub_port_rx_nombuf_total{port="p0"} 4.0
phub_port_link_up{port="p0"} 0.0
phub_port_info{device="net_tap0",ipv4="10.1.0.1",port="p0",steering="tap_bpf"} 1.0
phub_job_pushes_total{phub_job="bert large"} 1234.0
phub_job_iterations_total{phub_job="bert large"} 5.0
phub_job_world_size{phub_job="bert large"} 4.0
phub_ring_linked{phub_job="bert large"} 0.0
phub_ring_peer_silence_seconds{phub_job="bert large",rack="r1",side="prev"} 2.5
phub_ring_to_next_bytes_total 99.0
phub_health_status 1.0
phub_watchdog_pings_total 3.0
# TYPE phub_pushes_total counter
# TYPE phub_port_link_up gauge""".splitlines()


@pytest.fixture(autouse=True)
def tools():
    if not shutil.which("promtool"):
        pytest.skip("no promtool (Debian's prometheus)")
    if subprocess.run(["/usr/bin/python3", "-c", "import prometheus_client"]).returncode:
        pytest.skip("no python3-prometheus-client")


def run(*cmd, **kw):
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30, **kw)
    assert p.returncode == 0, "%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout,
                                                      p.stderr)
    return p.stdout


def metrics(expr):
    """The metric names of a PromQL expression: label matchers, groupings and legends out."""
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    return set(re.findall(r"\bphub_[a-z0-9_]+", expr))


def test_rules_and_dashboard_name_served_metrics():
    run("promtool", "check", "rules", os.path.join(MONITORING, "phub-alerts.yml"))
    run("promtool", "test", "rules", "phub-alerts.test.yml", cwd=MONITORING)
    assert run(EXPORTER, "--version").startswith("phub-exporter "), "phub-exporter --version"
    served = set(run(EXPORTER, "--list-metrics").split())
    with open(os.path.join(MONITORING, "phub-dashboard.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(dash["panels"]) >= 10 and all(p.get("targets") for p in dash["panels"]), \
        "a panel without a query"
    for v in dash["templating"]["list"]:
        exprs.append(v["query"].replace("label_values(", "").split(",")[0])
    with open(os.path.join(MONITORING, "phub-alerts.yml")) as f:
        rules = f.read()
    rule_exprs = [a or b for a, b in re.findall(r"expr: >-\n((?:\s{10}.*\n)+)|expr: (.*)",
                                                 rules)]
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
    assert not bad, "not served by phub-exporter: %s" % bad


class FakePBox:
    """A SOCK_SEQPACKET socket that speaks DPDK's telemetry protocol (a JSON greeting, then one
    answer per command) with ANSWERS."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(path)
        self.sock.listen(4)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _serve(c):
        with c:
            c.send(json.dumps({"version": "DPDK 22.11", "pid": os.getpid(),
                               "max_output_len": 16384}).encode())
            while True:
                cmd = c.recv(1024).decode()
                if not cmd:
                    return
                c.send(json.dumps({cmd: ANSWERS.get(cmd)}).encode())

    def close(self):
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def test_exporter_against_a_fake_pbox(tmp_path):
    path = str(tmp_path / "sock")
    fake = FakePBox(path)
    try:
        out = run(EXPORTER, "--socket", path, "--once")
    finally:
        fake.close()
    got = set(out.splitlines())
    missing = [want for want in LINES if want not in got]
    assert not missing, "no line: %s\n%s" % (missing, out)
    print("phub-exporter against a fake telemetry socket: %d samples as expected"
          % len([line for line in out.splitlines() if not line.startswith("#")]))
    # A PBox that does not answer (its socket file left behind): phub_up 0 and exit 1.
    p = subprocess.run([EXPORTER, "--socket", path, "--once"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 1 and "phub_up 0.0" in p.stdout.splitlines(), \
        "without a PBox: exit %d, %s" % (p.returncode, p.stdout)
    print("without a PBox: phub_up 0, exit 1")
