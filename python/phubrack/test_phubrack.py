# SPDX-License-Identifier: BSD-3-Clause
"""Unit tests of phubrack (meson test phubrack, suite unit): python3 -m unittest."""

import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

from phubrack import config, multirack, netem, rack, rackconfig, report, telemetry

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What dpdk-telemetry.py prints for two commands: a banner, then one JSON line each.
TELEMETRY_OUT = """Connecting to /var/run/dpdk/phub-r1/dpdk_telemetry.v2
{"version": "DPDK 22.11.11", "pid": 4242, "max_output_len": 16384}
{"/phub/stats": {"pushes": 105, "handed_off": 3, "drops": {"wrong_lcore": 3}}}
{"/phub/jobs": {"7": {"name": "orphan", "iterations_done": 9}}}
"""

REPORT = {"job": "j", "workers": 3, "verified": True, "bitwise": False, "max_abs_error": 1e-7,
          "retransmits": 2, "pulls": 1, "exchanges_per_s": 12.5, "p50_ms": 3.25}


def run_cli(*args, stdin=""):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    p = subprocess.run([sys.executable, "-m", "phubrack"] + list(args), input=stdin,
                       capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


class TelemetryTest(unittest.TestCase):
    def test_merge_skips_the_banner_and_keeps_every_command(self):
        t = telemetry.merge(io.StringIO(TELEMETRY_OUT))
        self.assertEqual(set(t), {"version", "pid", "max_output_len", "/phub/stats", "/phub/jobs"})
        self.assertEqual(t["/phub/stats"]["handed_off"], 3)
        self.assertEqual(t["/phub/jobs"]["7"]["name"], "orphan")

    def test_a_later_answer_to_the_same_command_wins(self):
        t = telemetry.merge(['{"/phub/stats": {"pushes": 1}}', '{"/phub/stats": {"pushes": 2}}'])
        self.assertEqual(t["/phub/stats"]["pushes"], 2)

    def test_delta_of_a_counter_missing_before_counts_from_zero(self):
        self.assertEqual(telemetry.delta({}, {"bad_csum": 4}, "bad_csum"), 4)
        self.assertEqual(telemetry.delta({"a": 5}, {"a": 7}, "a"), 2)

    def test_query_reads_the_socket_as_dpdk_telemetry_does(self):
        with tempfile.TemporaryDirectory() as run_dir:
            os.mkdir(os.path.join(run_dir, "phub-r1"))
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            srv.bind(os.path.join(run_dir, "phub-r1", "dpdk_telemetry.v2"))
            srv.listen(1)

            def serve():
                c, _ = srv.accept()
                c.send(b'{"version": "DPDK 22.11", "pid": 1, "max_output_len": 16384}')
                while True:
                    cmd = c.recv(1024).decode()
                    if not cmd:
                        break
                    c.send(json.dumps({cmd.split(",")[0]: {"asked": cmd}}).encode())
                c.close()
            th = threading.Thread(target=serve)
            th.start()
            t = telemetry.query("phub-r1", ["/phub/stats", "/phub/job,strag"], run_dir=run_dir)
            th.join()
            srv.close()
            self.assertEqual(t["/phub/stats"], {"asked": "/phub/stats"})
            self.assertEqual(t["/phub/job"], {"asked": "/phub/job,strag"})
            self.assertEqual(t["pid"], 1)
            self.assertEqual(telemetry.query("phub-none", ["/phub/stats"], run_dir=run_dir), {})

    def test_stats_delta_flattens_drop_reasons(self):
        a = {"/phub/stats": {"pushes": 10, "drops": {"bad_csum": 1}}}
        b = {"/phub/stats": {"pushes": 25, "drops": {"bad_csum": 1, "wrong_lcore": 4}},
             "/phub/jobs": {}}
        self.assertEqual(telemetry.stats_delta(a, b),
                         {"pushes": 15, "drops.bad_csum": 0, "drops.wrong_lcore": 4})


class ReportTest(unittest.TestCase):
    def test_failed_names_the_conditions_that_do_not_hold(self):
        self.assertEqual(report.failed(REPORT, ['r["verified"]', 'r["workers"] == 3']), [])
        bad = report.failed(REPORT, ['r["verified"]', 'r["bitwise"]', 'r["pulls"] == 0'])
        self.assertEqual(bad, ['r["bitwise"]', 'r["pulls"] == 0'])

    def test_a_missing_field_is_a_failed_condition_not_a_crash(self):
        bad = report.failed(REPORT, ['r["resumed_at"] == 4'])
        self.assertEqual(len(bad), 1)
        self.assertIn("KeyError", bad[0])

    def test_summary_says_exact_only_when_verified_bitwise(self):
        line = report.summary("two-jobs", REPORT)
        self.assertTrue(line.startswith("two-jobs "))
        self.assertIn(" 3 workers", line)
        self.assertIn("12.5 exch/s", line)
        self.assertTrue(line.endswith("NOT EXACT"))
        self.assertTrue(report.summary("x", dict(REPORT, bitwise=True)).endswith("exact"))

    def test_brief_line(self):
        self.assertEqual(report.brief("fp16", REPORT), "fp16: 3 workers, 12.5 exchanges/s, "
                         "retransmits 2, pulls 1, verified True")


class ConfigTest(unittest.TestCase):
    def test_edit_runs_statements_on_c_and_writes_it_back(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "pbox.json")
            with open(path, "w") as f:
                json.dump({"limits": {"max_jobs": 64}, "ports": []}, f)
            config.edit(path, 'c["limits"]["max_jobs"] = 2\nc["deterministic"] = True')
            with open(path) as f:
                c = json.load(f)
        self.assertEqual(c, {"limits": {"max_jobs": 2}, "ports": [], "deterministic": True})


class NetemTest(unittest.TestCase):
    def test_percentages_and_times(self):
        self.assertEqual(netem.percent_to_ppm("loss", "1%"), 10000)
        self.assertEqual(netem.percent_to_ppm("loss", "0.5"), 5000)
        self.assertEqual(netem.percent_to_ppm("loss", ".25%"), 2500)
        self.assertEqual(netem.percent_to_ppm("loss", "100%"), 1000000)
        self.assertEqual(netem.time_to_us("delay", "1.5ms"), 1500)
        self.assertEqual(netem.time_to_us("delay", "250us"), 250)
        self.assertEqual(netem.time_to_us("delay", "2s"), 2000000)
        self.assertEqual(netem.time_to_us("delay", "40"), 40)
        for bad in ("", "1%%", "x", "101%", "-1"):
            with self.assertRaises(netem.NetemError):
                netem.percent_to_ppm("loss", bad)
        for bad in ("10 ms", "10m", "61s", ""):
            with self.assertRaises(netem.NetemError):
                netem.time_to_us("delay", bad)

    def test_plain_loss_duplicate_corrupt_rate(self):
        p = netem.plan("loss random 1% duplicate 5% corrupt 0.1% rate 100mbit".split())
        self.assertEqual((p["loss"], p["dup"], p["corrupt"], p["rate"]),
                         (10000, 50000, 1000, "100mbit"))
        self.assertIsNone(p["ge"])
        self.assertEqual(p["delay_ppm"], 0)

    def test_gemodel_defaults_and_given_parameters(self):
        self.assertEqual(netem.plan("loss gemodel 2%".split())["ge"],
                         [20000, 980000, 1000000, 0])
        p = netem.plan("loss gemodel 2% 20% 80% 1% duplicate 1%".split())
        self.assertEqual(p["ge"], [20000, 200000, 800000, 10000])
        self.assertEqual(p["dup"], 10000)
        with self.assertRaises(netem.NetemError):
            netem.plan("loss gemodel 0%".split())

    def test_delay_jitter_and_reorder(self):
        p = netem.plan("delay 2ms 500us reorder 90%".split())
        self.assertEqual((p["delay_us"], p["jitter_us"], p["reorder"], p["delay_ppm"]),
                         (2000, 500, 900000, 100000))
        self.assertEqual(netem.plan(["delay", "30ms"])["delay_ppm"], 1000000)

    def test_what_the_fallback_cannot_do_is_refused_with_the_reason(self):
        cases = {
            "reorder 50%": "reorder needs a delay",
            "delay 10ms 1ms 25%": "delay correlation needs sch_netem",
            "delay 10ms reorder 25% 50%": "reorder correlation needs sch_netem",
            "slot 10ms": "netem 'slot' needs sch_netem",
            "rate": "no rate given",
            "rate 1;rm": "expected a rate",
        }
        for args, why in cases.items():
            with self.assertRaises(netem.NetemError) as e:
                netem.plan(args.split())
            self.assertIn(why, str(e.exception), args)

    def test_shell_assignments(self):
        out = netem.shell(netem.plan("loss gemodel 1% 10% delay 1ms".split()))
        lines = dict(line.split("=", 1) for line in out.splitlines())
        self.assertEqual(lines["ge"], "-ge10000-100000-1000000-0")
        self.assertEqual(lines["ge_r"], "100000")
        self.assertEqual(lines["delay_us"], "1000")
        self.assertEqual(lines["rate"], "")
        self.assertEqual(netem.shell(netem.plan([])).splitlines()[0], "loss=0")


class NetemLinksTest(unittest.TestCase):
    def test_worker_specs_every_rack_or_one_and_a_direction(self):
        links = netem.worker_links(["w1:loss 1%", "r1:w3:tx:delay 2ms 1ms"], [2, 3])
        self.assertEqual(links, [(0, 1, "both", ["loss", "1%"]), (1, 1, "both", ["loss", "1%"]),
                                 (1, 3, "tx", ["delay", "2ms", "1ms"])])

    def test_worker_spec_refusals(self):
        for spec, workers, why in [("r0:w1:loss 1%", [2], "expected w<i>"),
                                   ("w3:loss 1%", [2], "1..2"),
                                   ("w0:loss 1%", [2], "1..2"),
                                   ("r2:w1:loss 1%", [1, 1], "0..1"),
                                   ("w1:rx: ", [2], "no netem arguments"),
                                   ("loss 1%", [2, 2], "[r<q>:]w<i>")]:
            with self.assertRaises(netem.NetemError) as e:
                netem.worker_links([spec], workers)
            self.assertIn(why, str(e.exception), spec)

    def test_spine_specs_later_wins_per_direction_and_rate_on_every_link(self):
        links = netem.spine_links(["loss 5%", "r0:rx:duplicate 5%"], 2, "100mbit")
        self.assertEqual(links, [(0, "tx", ["loss", "5%", "rate", "100mbit"]),
                                 (0, "rx", ["duplicate", "5%", "rate", "100mbit"]),
                                 (1, "tx", ["loss", "5%", "rate", "100mbit"]),
                                 (1, "rx", ["loss", "5%", "rate", "100mbit"])])
        self.assertEqual(netem.spine_links(["r1:tx:delay 1ms"], 2),
                         [(1, "tx", ["delay", "1ms"])])
        self.assertEqual(netem.spine_links([], 3), [])
        with self.assertRaises(netem.NetemError):
            netem.spine_links(["r3:loss 1%"], 3)


class RackConfigTest(unittest.TestCase):
    def test_af_packet_rack_one_lcore_per_port_and_the_uplink_on_lcore_1(self):
        c = rackconfig.pbox_config("vr.1", 7, 2, 2, 9000, "af_packet", 1024, "/ck", 4,
                                   uplink="10.9.0.2", ncpu=2)
        self.assertEqual(c["eal"]["lcores"], [0, 1, "2@0"])
        self.assertEqual(c["eal"]["file_prefix"], "phub-vr.1")
        self.assertEqual([(p["name"], p["ipv4"], p["lcores"]) for p in c["ports"]],
                         [("p0", "10.7.0.1/24", [1]), ("p1", "10.7.0.2/24", [2]),
                          ("uplink", "10.9.0.2/24", [1])])
        self.assertIn("iface=pv1,", c["ports"][1]["device"])
        self.assertEqual(c["checkpoint"], {"dir": "/ck", "interval_iterations": 4})
        self.assertEqual((c["udp_base_port"], c["chunk_bytes"], c["jobs"]), (47000, 32768, []))

    def test_port_mtu_within_what_the_driver_carries(self):
        tap = rackconfig.pbox_config("r", 1, 1, 2, 9000, "tap", 2048, "/c", 0, ncpu=4)
        self.assertEqual((tap["ports"][0]["mtu"], tap["ports"][0]["lcores"]), (1500, [1, 2]))
        xdp = rackconfig.pbox_config("r", 1, 1, 1, 3506, "af_xdp", 2048, "/c", 0)
        self.assertEqual(xdp["ports"][0]["mtu"], 3442)
        pkt = rackconfig.pbox_config("r", 1, 1, 1, 1500, "af_packet", 2048, "/c", 0)
        self.assertEqual(pkt["ports"][0]["mtu"], 1500)

    def test_refusals(self):
        for args in [("r", 1, 1, 1, 9000, "virtio", 2048, "/c", 0),
                     ("r", 0, 1, 1, 9000, "tap", 2048, "/c", 0),
                     ("r", 1, 2, 1, 9000, "af_packet", 2048, "/c", 0)]:
            with self.assertRaises(rackconfig.RackConfigError):
                rackconfig.pbox_config(*args)


class KeySegmentsTest(unittest.TestCase):
    def test_segments_of_keys_that_end_inside_a_segment_or_a_chunk(self):
        self.assertEqual(rackconfig.key_segments(1), 1)
        self.assertEqual(rackconfig.key_segments(352), 1)
        self.assertEqual(rackconfig.key_segments(353), 2)
        # a whole chunk, then one element in a chunk of its own
        self.assertEqual(rackconfig.key_segments(8096), 23)
        self.assertEqual(rackconfig.key_segments(8097), 24)
        # 20,000: chunks of 8096, 8096 and 3808 elements (23 + 23 + 11 segments)
        self.assertEqual(rackconfig.key_segments(20000), 57)
        self.assertEqual(rackconfig.key_segments(0), 0)
        self.assertEqual(rackconfig.key_segments(10, seg_elems=4, chunk_segments=2), 3)


class MultiRackDriverTest(unittest.TestCase):
    """rack.MultiRack's names and phub-bench's --servers, with a virtual-rack that does
    nothing (/bin/true)."""

    def setUp(self):
        self.mr = rack.MultiRack("m", 40, "/bin/true", "pbox", "bench")

    def tearDown(self):
        self.mr.close()

    def test_servers_one_count_per_rack_or_one_for_all(self):
        self.mr.up(3, "1,2,3")
        self.assertEqual(self.mr.servers, "10.40.0.1:1,10.41.0.1:2,10.42.0.1:3")
        self.mr.up(2, 2)
        self.assertEqual(self.mr.servers, "10.40.0.1:2,10.41.0.1:2")
        self.assertEqual(self.mr.racks, 2)

    def test_namespaces_and_ring_command(self):
        self.assertEqual(self.mr.ns("spine"), "m-spine")
        self.assertEqual(self.mr.ns(2, 1), "m.1-w2")
        self.assertEqual(self.mr.ns("pbox"), "m.0-pbox")
        self.mr.up(2, 1)
        cmd = self.mr.ring_cmd("--keys", 4, servers_opt="--racks", quiet=False)
        self.assertEqual(cmd[:4], ["bench", "--racks", "10.40.0.1:1,10.41.0.1:1",
                                   "--netns-prefix"])
        self.assertEqual(cmd[4], "m.%r-w")
        self.assertNotIn("--quiet", cmd)
        self.assertEqual(cmd[-2:], ["--keys", "4"])

    def test_stop_check_only_for_pboxes_serving(self):
        self.mr.up(2, 1)
        self.assertFalse(self.mr.started)
        self.mr.pbox_start(1)
        self.assertTrue(self.mr.started)
        self.assertTrue(self.mr.pbox_stop(1))
        self.assertFalse(self.mr.started)


class MultiRackTest(unittest.TestCase):
    NONCE = "0x5ad1c0ffee7e4b31"

    def base_config(self):
        return {"ports": [{"name": "p0", "ipv4": "10.30.0.1/24"},
                          {"name": "uplink", "ipv4": "10.33.0.1/24"}],
                "jobs": [{"name": "local", "nonce": "0x7e11d00d2b9a4c63", "workers": 2}]}

    def test_plan_gives_each_rack_its_own_net_and_the_spine_the_next_id(self):
        p = multirack.plan(30, 3, [1, 2, 3])
        self.assertEqual([rk["net"] for rk in p["rack"]],
                         ["10.30.0.0/24", "10.31.0.0/24", "10.32.0.0/24"])
        self.assertEqual(p["spine_net"], "10.33.0.0/24")
        self.assertEqual([rk["spine"] for rk in p["rack"]],
                         ["10.33.0.1", "10.33.0.2", "10.33.0.3"])
        self.assertEqual(p["rack"][2]["workers"], ["10.32.0.101", "10.32.0.102", "10.32.0.103"])
        self.assertEqual(p["rack"][1]["pbox"], ["10.31.0.1"])
        self.assertEqual(multirack.plan(1, 2, [2, 2], ports=2)["rack"][0]["pbox"],
                         ["10.1.0.1", "10.1.0.2"])

    def test_plan_refuses_too_many_racks_and_ids_past_254(self):
        for args in ((30, 1, [2]), (30, 17, [1] * 17), (253, 2, [1, 1]), (0, 2, [1, 1]),
                     (30, 2, [1])):
            with self.assertRaises(multirack.PlanError):
                multirack.plan(*args)
        multirack.plan(251, 3, [1, 1, 1])    # spine 254

    def test_counts_one_for_all_or_one_per_rack(self):
        self.assertEqual(multirack.parse_counts("w", "2", 3), [2, 2, 2])
        self.assertEqual(multirack.parse_counts("w", "1,2,3", 3), [1, 2, 3])
        for bad in ("1,2", "0", "x", "151", "1,,2", ""):
            with self.assertRaises(multirack.PlanError):
                multirack.parse_counts("w", bad, 3)

    def test_shell_assignments(self):
        out = multirack.shell(multirack.plan(30, 2, [1, 2]))
        self.assertEqual(out.splitlines(), ["plan_ids=(30 31)", "plan_workers=(1 2)",
                                            "plan_spine=(10.32.0.1 10.32.0.2)",
                                            "plan_spine_net=10.32.0.0/24"])

    def test_ring_job_declares_the_world_and_ranks_per_rack_in_ring_order(self):
        job = multirack.parse_ring_job("ring:" + self.NONCE.upper().replace("X", "x"),
                                       [1, 2, 3])
        self.assertEqual(job, {"name": "ring", "nonce": self.NONCE, "workers": 6,
                               "racks": [{"pbox": "rack0", "ranks": 1},
                                         {"pbox": "rack1", "ranks": 2},
                                         {"pbox": "rack2", "ranks": 3}]})
        self.assertEqual(multirack.first_ranks(job), [0, 1, 3])
        job = multirack.parse_ring_job("j:%s:2:fp16:adam:deterministic" % self.NONCE, [3, 3])
        self.assertEqual((job["workers"], job["dtype"], job["optimizer"], job["deterministic"]),
                         (4, "fp16", {"type": "adam"}, True))
        self.assertEqual(multirack.parse_ring_job("j:%s:1,3" % self.NONCE, [3, 3])["racks"],
                         [{"pbox": "rack0", "ranks": 1}, {"pbox": "rack1", "ranks": 3}])

    def test_ring_job_refusals(self):
        for spec in ("j", "j:0x1", "j:%s:1,2,3" % self.NONCE, "j:%s:2:fp64" % self.NONCE,
                     "j:%s:2:fp32:lamb" % self.NONCE, "j:%s:2:fp32:sgd:yes" % self.NONCE,
                     ":%s" % self.NONCE, "j:%s:2:fp32:sgd:deterministic:x" % self.NONCE):
            with self.assertRaises(multirack.PlanError, msg=spec):
                multirack.parse_ring_job(spec, [2, 2])

    def test_ring_config_names_the_rack_its_peers_and_the_ring_jobs(self):
        p = multirack.plan(30, 3, [1, 2, 3])
        job = multirack.parse_ring_job("ring:" + self.NONCE, [1, 2, 3])
        c = multirack.ring_config(self.base_config(), 1, p, [job])
        self.assertEqual(c["name"], "rack1")
        self.assertEqual(c["peers"], [
            {"name": "rack0", "ipv4": "10.33.0.1", "udp_port": 47000, "port": "uplink"},
            {"name": "rack2", "ipv4": "10.33.0.3", "udp_port": 47000, "port": "uplink"}])
        self.assertEqual([j["name"] for j in c["jobs"]], ["local", "ring"])
        self.assertEqual(c["jobs"][1], job)
        self.assertIsNot(c["jobs"][1], job)
        # The same job in every rack's config.
        c0 = multirack.ring_config(self.base_config(), 0, p, [job])
        self.assertEqual(c0["jobs"], c["jobs"])
        self.assertEqual([q["name"] for q in c0["peers"]], ["rack1", "rack2"])

    def test_ring_config_refusals(self):
        p = multirack.plan(30, 2, [2, 2])
        job = multirack.parse_ring_job("ring:" + self.NONCE, [2, 2])
        with self.assertRaises(multirack.PlanError):
            multirack.ring_config(self.base_config(), 0, p, [job, job])
        with self.assertRaises(multirack.PlanError):
            multirack.ring_config({"ports": [{"name": "p0"}]}, 0, p, [job])
        with self.assertRaises(multirack.PlanError):
            multirack.ring_config(self.base_config(), 0, multirack.plan(30, 3, [2, 2, 2]), [job])

    def test_strip_ring_leaves_what_a_single_rack_pbox_takes(self):
        p = multirack.plan(30, 2, [2, 2])
        job = multirack.parse_ring_job("ring:" + self.NONCE, [2, 2])
        c = multirack.strip_ring(multirack.ring_config(self.base_config(), 0, p, [job]))
        self.assertNotIn("name", c)
        self.assertEqual([q["name"] for q in c["ports"]], ["p0"])
        self.assertEqual(c["peers"], [{"name": "rack1", "ipv4": "10.32.0.2", "udp_port": 47000}])
        self.assertEqual([j["name"] for j in c["jobs"]], ["local"])


class CommandLineTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.report = os.path.join(self.dir.name, "r.json")
        with open(self.report, "w") as f:
            json.dump(REPORT, f)
        self.tel = os.path.join(self.dir.name, "tel.txt")
        with open(self.tel, "w") as f:
            f.write(TELEMETRY_OUT)

    def tearDown(self):
        self.dir.cleanup()

    def test_expect_exits_1_and_shows_the_report_when_a_condition_fails(self):
        self.assertEqual(run_cli("expect", self.report, 'r["verified"]')[0], 0)
        rc, out, _ = run_cli("expect", self.report, 'r["verified"]', 'r["bitwise"]')
        self.assertEqual(rc, 1)
        self.assertIn('not true: r["bitwise"]', out)
        self.assertIn("'retransmits': 2", out)

    def test_merge_writes_one_object(self):
        out_path = os.path.join(self.dir.name, "merged.json")
        rc, _, _ = run_cli("merge", out_path, stdin=TELEMETRY_OUT)
        self.assertEqual(rc, 0)
        with open(out_path) as f:
            self.assertEqual(json.load(f)["/phub/stats"]["pushes"], 105)

    def test_query_prints_a_value_or_the_default(self):
        expr = 'sum(j["name"] == "orphan" for j in t["/phub/jobs"].values())'
        self.assertEqual(run_cli("query", expr, stdin=TELEMETRY_OUT)[1], "1\n")
        self.assertEqual(run_cli("query", expr, self.tel)[1], "1\n")
        rc, out, _ = run_cli("query", "--default", "-1", expr, stdin="no answer\n")
        self.assertEqual((rc, out), (0, "-1\n"))

    def test_holds_compares_snapshots(self):
        self.assertEqual(run_cli("holds", 't0["/phub/stats"]["pushes"] == 105', self.tel)[0], 0)
        self.assertEqual(run_cli("holds", 't["/phub/stats"]["pushes"] > 105', self.tel)[0], 1)
        self.assertEqual(run_cli("holds", 't1["workers"] == 3 and t0["/phub/stats"]',
                                 self.tel, self.report)[0], 0)
        self.assertEqual(run_cli("holds", 't["/phub/nothing"]["x"]', self.tel)[0], 1)

    def test_stats_delta_prints_what_moved_and_checks_conditions(self):
        before = os.path.join(self.dir.name, "before.json")
        with open(before, "w") as f:
            json.dump({"/phub/stats": {"pushes": 100, "handed_off": 3, "drops": {}}}, f)
        rc, out, _ = run_cli("stats-delta", before, self.tel, 'd["pushes"] == 5',
                             'd["drops.wrong_lcore"] == 3', 'd["acks_sent"] == 0')
        self.assertEqual(rc, 0)
        self.assertIn("'pushes': 5", out)
        self.assertNotIn("handed_off", out)
        rc, out, _ = run_cli("stats-delta", before, self.tel, 'd["duplicates"] > 0')
        self.assertEqual(rc, 1)
        self.assertIn('not true: d["duplicates"] > 0', out)

    def test_summary_and_brief(self):
        self.assertIn("NOT EXACT", run_cli("summary", "lbl", self.report)[1])
        self.assertTrue(run_cli("brief", "lbl", self.report)[1].startswith("lbl: 3 workers"))

    def test_netem_plan_prints_assignments_or_refuses(self):
        rc, out, _ = run_cli("netem-plan", "loss", "1%")
        self.assertEqual(rc, 0)
        self.assertIn("loss=10000\n", out)
        rc, out, err = run_cli("netem-plan", "reorder", "5%")
        self.assertEqual((rc, out), (1, ""))
        self.assertTrue(err.startswith("virtual-rack: reorder needs a delay"))

    def test_json_edit_sets_a_field(self):
        self.assertEqual(run_cli("json-edit", self.report, 'c["rss_kb"] = int("512")')[0], 0)
        with open(self.report) as f:
            self.assertEqual(json.load(f)["rss_kb"], 512)

    def test_test_summary_counts_every_build_dir(self):
        dirs = []
        for name, results in (("a", ["OK", "EXPECTEDFAIL", "SKIP"]), ("b", ["OK", "FAIL"]),
                              ("c", None)):
            d = os.path.join(self.dir.name, name)
            os.makedirs(os.path.join(d, "meson-logs"))
            dirs.append(d)
            if results is None:
                continue
            with open(os.path.join(d, "meson-logs", "testlog.json"), "w") as f:
                for r in results:
                    f.write(json.dumps({"name": "t", "result": r}) + "\n")
        self.assertEqual(run_cli("test-summary", *dirs)[:2],
                         (1, "3 passed, 1 failed, 1 skipped\n"))
        self.assertEqual(run_cli("test-summary", dirs[0])[:2],
                         (0, "2 passed, 0 failed, 1 skipped\n"))

    def test_rack_plan_and_ring_config(self):
        rc, out, _ = run_cli("rack-plan", "--id", "40", "--racks", "2", "--workers", "1,2")
        self.assertEqual(rc, 0)
        self.assertIn("plan_spine=(10.42.0.1 10.42.0.2)\n", out)
        rc, out, err = run_cli("rack-plan", "--id", "40", "--racks", "2", "--workers", "1",
                               "--ring-job", "j:0x1")
        self.assertEqual((rc, out), (1, ""))
        self.assertIn("nonce", err)
        path = os.path.join(self.dir.name, "pbox.json")
        with open(path, "w") as f:
            json.dump({"ports": [{"name": "p0"}, {"name": "uplink"}], "jobs": []}, f)
        rc, _, err = run_cli("ring-config", path, "--rack", "1", "--id", "40", "--racks", "2",
                             "--workers", "1,2", "--ring-job", "r:0x5ad1c0ffee7e4b31::bf16")
        self.assertEqual(rc, 0, err)
        with open(path) as f:
            c = json.load(f)
        self.assertEqual((c["name"], c["peers"][0]["ipv4"], c["jobs"][0]["workers"],
                          c["jobs"][0]["dtype"]), ("rack1", "10.42.0.1", 3, "bf16"))
        self.assertEqual(run_cli("ring-config", path, "--rack", "2", "--id", "40", "--racks",
                                 "2", "--workers", "1")[0], 1)
        self.assertEqual(run_cli("ring-strip", path)[0], 0)
        with open(path) as f:
            self.assertNotIn("name", json.load(f))

    def test_pbox_config_writes_the_file_or_says_why_not(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "pbox.json")
            rc, _, err = run_cli("pbox-config", path, "--rack", "r", "--id", "3", "--ports", "1",
                                 "--lcores", "2", "--mtu", "9000", "--driver", "tap",
                                 "--memory-mb", "512", "--checkpoint-dir", d,
                                 "--checkpoint-interval", "2")
            self.assertEqual(rc, 0, err)
            with open(path) as f:
                c = json.load(f)
            self.assertEqual((c["eal"]["memory_mb"], c["ports"][0]["ipv4"]), (512, "10.3.0.1/24"))
            self.assertEqual(os.listdir(d), ["pbox.json"])
            rc, _, err = run_cli("pbox-config", path, "--rack", "r", "--id", "x")
            self.assertEqual(rc, 1)
            self.assertIn("--id 'x'", err)
            rc, _, err = run_cli("pbox-config", path, "--rack", "r", "--id", "3")
            self.assertEqual(rc, 1)
            self.assertIn("is required", err)

    def test_netem_links_lines_or_the_refusal(self):
        rc, out, err = run_cli("netem-links", "--workers", "2,1", "--netem", "r1:w1:loss 2%",
                               "--spine-rate", "1gbit")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines(), ["worker 1 1 both loss 2%", "spine 0 tx rate 1gbit",
                                            "spine 0 rx rate 1gbit", "spine 1 tx rate 1gbit",
                                            "spine 1 rx rate 1gbit"])
        rc, _, err = run_cli("netem-links", "--workers", "2", "--netem", "w5:loss 1%")
        self.assertEqual(rc, 1)
        self.assertIn("1..2", err)

    def test_unknown_command_is_a_usage_error(self):
        rc, _, err = run_cli("frobnicate")
        self.assertEqual(rc, 2)
        self.assertIn("expect REPORT COND", err)


if __name__ == "__main__":
    unittest.main()
