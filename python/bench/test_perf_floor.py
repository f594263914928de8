#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Unit test of perf_floor.py (meson test perf_floor, suite unit): perf script's lines parsed
into samples, and each sample sorted by its process and its kernel call chain: network work of
the run's processes, the PBoxes' own code, the PMD, other processes, softirqs in idle."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import perf_floor  # noqa: E402

SCRIPT = """rte-worker-1  4783 44335.914776:
\tffffffff81e41167 skb_copy_ubufs+0x47 ([kernel.kallsyms])
\tffffffff81e63174 __dev_direct_xmit ([kernel.kallsyms])
\tffffffff8214f6e4 packet_sendmsg ([kernel.kallsyms])
\t          10ad0c __libc_sendto (/usr/lib/x86_64-linux-gnu/libc.so.6)

phub-bench  5000 44335.915000:
\tffffffff81000001 finish_task_switch.isra.0 ([kernel.kallsyms])
\tffffffff81000002 schedule ([kernel.kallsyms])

phub-bench  5000 44335.916000:
\t          1234 heap_sift (/work/build/lib/client/libphub.so.0)

swapper     0 44335.917000:
\tffffffff81000003 veth_xmit ([kernel.kallsyms])
\tffffffff81000004 net_rx_action ([kernel.kallsyms])

"""


class Parse(unittest.TestCase):
    def test_samples_and_chains(self):
        rows = list(perf_floor.parse(SCRIPT))
        self.assertEqual([r[0] for r in rows], [4783, 5000, 5000, 0])
        self.assertEqual(rows[0][1], "rte-worker-1")
        self.assertEqual(rows[0][2][0], ("skb_copy_ubufs", "[kernel.kallsyms]"))
        self.assertEqual(len(rows[0][2]), 4)


class Classify(unittest.TestCase):
    PBOX = [("x", "/b/app/pbox/phub-pbox")]

    def cls(self, pid, comm, chain):
        return perf_floor.classify(pid, comm, chain, mine={4783, 5000}, pboxes={4783})

    def test_kernel_network_of_the_run(self):
        rows = list(perf_floor.parse(SCRIPT))
        self.assertEqual(self.cls(*rows[0]), "kernel net, pbox")
        self.assertEqual(self.cls(*rows[1]), "kernel other, worker")
        self.assertEqual(self.cls(*rows[2]), "workers: user")
        self.assertEqual(self.cls(*rows[3]), "kernel net, softirq in idle or ksoftirqd")

    def test_other_processes_are_not_the_runs(self):
        chain = [("veth_xmit", "[kernel.kallsyms]")]
        self.assertEqual(self.cls(7, "rte-worker-1", chain), "kernel net, other processes")
        self.assertEqual(self.cls(7, "rte-worker-1", self.PBOX), "other processes")

    def test_pbox_user(self):
        self.assertEqual(self.cls(4783, "rte-worker-1", self.PBOX), "pbox: PHub's own code")
        self.assertEqual(self.cls(4783, "rte-worker-1",
                                  [("eth_af_packet_rx", "/usr/lib/librte_net_af_packet.so")]),
                         "pbox: af_packet PMD")
        self.assertEqual(self.cls(4783, "rte-worker-1",
                                  [("__memmove_avx512_unaligned_erms", "/lib/libc.so.6")]),
                         "pbox: memcpy (PMD copies and PHub's)")



class Usage(unittest.TestCase):
    def run_main(self, *args):
        saved = sys.argv
        sys.argv = ["perf_floor.py", *args]
        try:
            with self.assertRaises(SystemExit) as e:
                perf_floor.main()
        finally:
            sys.argv = saved
        return e.exception.code

    def test_missing_arguments_are_a_usage_error(self):
        self.assertEqual(self.run_main(), 2)
        self.assertEqual(self.run_main("only-a-dir"), 2)

    def test_help(self):
        self.assertEqual(self.run_main("--help"), 0)


if __name__ == "__main__":
    unittest.main()
