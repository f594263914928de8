# SPDX-License-Identifier: BSD-3-Clause
"""Debian's real prometheus scrapes phub-exporter of a running PBox (meson: exporter-prometheus):
a phub-bench job's pushes rise in prometheus while the job runs and end at the exact count;
bad datagrams sent to the PBox show as a drop reason; the job's series are labelled by
phub_job, the lcores' by lcore; the tap's link down shows as phub_port_link_up 0 and
/phub/health failing.

                     R-tor: bridge br0
         +--------------+-----------+
        tp0            tw1         tw2
         |              |           |
  R-pbox: pt0 - phub-pbox           R-w1, R-w2: phub-bench ranks; R-w1: udp_send (bad datagrams)
          lo: phub-exporter 127.0.0.1:9470 <-- prometheus 127.0.0.1:9090 (scrape 0.5 s)
                | /run/dpdk/phub-R/dpdk_telemetry.v2      ^ the test: its HTTP API
"""

import importlib.util
import json
import os
import shutil
import time
import urllib.parse

import pytest

RACK_PREFIX = "pmx"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXPORTER = os.path.join(ROOT, "app", "phub-exporter", "phub-exporter")
PROMETHEUS_YML = """global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
  evaluation_interval: 1s
rule_files:
  - %s
scrape_configs:
  - job_name: phub
    static_configs:
      - targets: ['127.0.0.1:9470']
"""


class Prometheus:
    """The HTTP API of the prometheus on the PBox namespace's loopback."""

    def __init__(self, rack):
        self.rack = rack

    def get(self, path):
        p = self.rack.probe("pbox", "get", "http://127.0.0.1:9090" + path, timeout=20)
        return json.loads(p.stdout) if p.returncode == 0 else None

    def results(self, promql):
        r = self.get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        return r["data"]["result"] if r else []

    def value(self, promql):
        """The first sample's value of an instant query (None when there is none)."""
        res = self.results(promql)
        return float(res[0]["value"][1]) if res else None

    def wait_for(self, promql, seconds):
        """Until the query has a sample of value > 0."""
        for _ in range(seconds * 4):
            v = self.value(promql)
            if v is not None and v > 0:
                return True
            time.sleep(0.25)
        return False


def test_exporter_prometheus(rack):
    if shutil.which("prometheus") is None:
        pytest.skip("no prometheus (Debian's prometheus package)")
    if importlib.util.find_spec("prometheus_client") is None:
        pytest.skip("no python3-prometheus-client")
    udp_send = os.environ.get("PHUB_UDP_SEND") or os.path.join(
        os.environ.get("PHUB_BUILD_DIR", os.path.join(ROOT, "build")), "tests", "integration",
        "udp_send")
    rack.up(2)
    rack.exec("pbox", "ip", "link", "set", "lo", "up", check=True)
    # The exporter and prometheus on the PBox namespace's loopback: no port another test holds.
    rack.start(["ip", "netns", "exec", rack.ns("pbox"), EXPORTER, "--file-prefix",
                "phub-" + rack.name, "--listen", "127.0.0.1:9470"], "exporter", "phub-exporter",
               out_suffix=".log")
    with open(rack.path("prometheus.yml"), "w") as f:
        f.write(PROMETHEUS_YML % os.path.join(ROOT, "monitoring", "phub-alerts.yml"))
    prom = rack.start(["ip", "netns", "exec", rack.ns("pbox"), "prometheus",
                       "--config.file=" + rack.path("prometheus.yml"),
                       "--storage.tsdb.path=" + rack.path("tsdb"),
                       "--web.listen-address=127.0.0.1:9090"], "prometheus", "prometheus",
                      out_suffix=".log")
    p = Prometheus(rack)
    assert p.wait_for('phub_up{job="phub"}', 30), \
        "prometheus never saw phub_up 1 from the exporter:\n" + prom.stderr()[-2000:]
    pushes0 = p.value("phub_pushes_total")
    print("prometheus scrapes the exporter: phub_up 1, phub_pushes_total", pushes0)

    # The job: 2 ranks, 4 keys of one segment, 300 iterations (301 rounds with the initial
    # one), one process per rank: rank 0 holds still 2 s after iteration 2 and rank 1 2 s
    # after iteration 150, so that scrapes see the job's count twice, well apart, whatever
    # the speed.
    ranks, keys, rounds = 2, 4, 301
    runs = [rack.start(rack.bench_cmd(ranks, "--rank", r, "--job", "promjob", "--keys", keys,
                                      "--key-elems", 300, "--iterations", rounds - 1,
                                      "--pause-at", pause, timeout=60), "r%d" % r,
                       "phub-bench rank %d" % r)
            for r, pause in ((0, "2:2000"), (1, "150:2000"))]
    seen = p.wait_for('phub_job_pushes_total{phub_job="promjob"}', 20)
    for run in runs:
        run.report()
    assert seen, 'no phub_job_pushes_total{phub_job="promjob"} while the job ran'
    time.sleep(1.5)
    # What prometheus stored of the job: its pushes rose between scrapes, and the PBox's total
    # moved by exactly what the ranks sent (ranks x keys x rounds).
    series = 'phub_job_pushes_total{phub_job="promjob"}[2m]'
    first = p.value("min_over_time(%s)" % series)
    most = p.value("max_over_time(%s)" % series)
    samples = p.value("count_over_time(%s)" % series)
    pushes1 = p.value("phub_pushes_total")
    print("job promjob in prometheus: %s scrapes, from %s to %s pushes; phub_pushes_total %s "
          "-> %s" % (samples, first, most, pushes0, pushes1))
    assert first and most and 0 < first < most, \
        "the job's pushes did not rise in prometheus (%s, then at most %s)" % (first, most)
    assert pushes1 - pushes0 == ranks * keys * rounds, \
        "phub_pushes_total moved by %s - %s, want %d" % (pushes1, pushes0, ranks * keys * rounds)
    ended = p.value("phub_jobs_ended_total")
    assert ended is not None and ended >= 1, "phub_jobs_ended_total %s after the job" % ended
    lcores = p.value("count(phub_lcore_loops_total)")
    assert lcores == 2, "phub_lcore_loops_total has %s lcores, want 2" % lcores

    # Bad datagrams: 64 bytes of zeros to a data lcore's UDP port are no PHub header.
    drops0 = p.value("sum(phub_drops_total)") or 0
    u = rack.exec(1, udp_send, "-d", rack.server, "-p", "47001", "-n", "20", "-s", "64")
    assert u.returncode == 0, "udp_send: " + u.stdout + u.stderr
    time.sleep(1.5)
    by_reason = {s["metric"]["reason"]: s["value"][1] for s in p.results("phub_drops_total")}
    drops1 = p.value("sum(phub_drops_total)")
    print("drops by reason in prometheus after 20 bad datagrams:", by_reason)
    assert drops1 - drops0 >= 20, \
        "phub_drops_total rose by %s - %s after 20 bad datagrams, want >= 20" % (drops1, drops0)
    # No PHub magic number: the reason says so.
    assert p.value('phub_drops_total{reason="bad_magic"}') == 20, \
        'phub_drops_total{reason="bad_magic"} is not 20'

    # The tap's link down (its kernel side): the port's link down and /phub/health failing
    # (the PBox's only port), in prometheus; up again, ok.
    rack.exec("pbox", "ip", "link", "set", "pt0", "down", check=True)
    assert p.wait_for("phub_port_link_up == bool 0", 15) and \
        p.wait_for("phub_health_status == bool 2", 10), \
        "a port's link down is not seen as phub_port_link_up 0 and health failing"
    print("link down: phub_port_link_up 0, phub_health_status 2 (failing: no port up)")
    rack.exec("pbox", "ip", "link", "set", "pt0", "up", check=True)
    assert p.wait_for("phub_port_link_up", 15) and \
        p.wait_for("phub_health_status == bool 0", 10), \
        "the link up again is not seen as health ok"
    # The alerting rules load in this prometheus too.
    rules = p.get("/api/v1/rules")
    n = sum(len(g["rules"]) for g in rules["data"]["groups"]) if rules else 0
    print("prometheus loaded %d alerting rules" % n)
    assert n >= 10, "prometheus did not load monitoring/phub-alerts.yml"
