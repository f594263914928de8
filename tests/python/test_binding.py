# SPDX-License-Identifier: BSD-3-Clause
"""The ctypes binding: connect, pushpull, pull, errors as exceptions, no leak, fp16/bf16."""

import gc
import os
import time

import numpy as np
import pytest
import torch

import phub
from conftest import SoftPBox, run_ranks


def test_connect_pushpull_pull_two_ranks(soft_pbox, job):
    n = 1000
    w0 = np.arange(n, dtype=np.float32)

    def rank(r):
        init = [w0 if r == 0 else np.full(n, 7.0, np.float32)]
        with phub.connect("127.0.0.1", job, 0x1234, r, 2, [n], port=soft_pbox.port,
                          optimizer="sgd", lr=0.5, initial=init) as s:
            start = np.zeros(n, np.float32)
            s.wait(s.pull(0, start))
            g = np.full(n, float(r + 1), np.float32)      # mean gradient 1.5
            out = np.zeros(n, np.float32)
            s.wait(s.pushpull(0, g, out))
            later = np.zeros(n, np.float32)
            s.wait(s.pull(0, later))
            return start, out, later, s.info()

    for start, out, later, info in run_ranks(2, rank):
        np.testing.assert_array_equal(start, w0)                 # rank 0's weights won
        np.testing.assert_array_equal(out, w0 - np.float32(0.5) * np.float32(1.5))
        np.testing.assert_array_equal(later, out)
        assert info["world_size"] == 2 and info["n_keys"] == 1


def test_callback_and_torch_buffers(soft_pbox, job):
    with phub.connect("127.0.0.1", job, 1, 0, 1, {5: 64, 9: 3}, port=soft_pbox.port,
                      optimizer="none") as s:
        seen = []
        g = torch.arange(64, dtype=torch.float32)
        out = torch.zeros(64)
        t = s.pushpull(5, g, out, callback=lambda tk, st: seen.append((tk, st)))
        s.wait(t)
        assert seen == [(t, 0)]
        assert torch.equal(out, g)                  # "none": the mean gradient of one rank
        with pytest.raises(KeyError):
            s.push(7, g)
        with pytest.raises(ValueError, match="needs 12"):
            s.push(9, g)
        with pytest.raises(ValueError, match="dtype"):
            s.push(9, torch.zeros(3, dtype=torch.float64))


def test_wrong_nonce_is_an_exception_with_the_reason(soft_pbox, job):
    # The job exists (its one rank holds it); a JOIN with another nonce is refused as such.
    with phub.connect("127.0.0.1", job, 0x1111, 0, 1, [10], port=soft_pbox.port):
        with pytest.raises(phub.PhubAuthError) as ei:
            phub.connect("127.0.0.1", job, 0x2222, 0, 1, [10], port=soft_pbox.port)
    assert ei.value.errno == 13
    assert "wrong nonce" in str(ei.value) and job in str(ei.value)


def test_every_rank_must_come_or_connect_times_out(soft_pbox, job):
    t0 = time.time()
    with pytest.raises(phub.PhubTimeoutError) as ei:
        phub.connect("127.0.0.1", job, 1, 0, 2, [10], port=soft_pbox.port,
                     connect_timeout_ms=500)
    assert time.time() - t0 < 5
    assert "2 ranks" in str(ei.value) or "rank" in str(ei.value)


def test_unreachable_pbox_times_out_with_the_reason():
    t0 = time.time()
    with pytest.raises(phub.PhubTimeoutError) as ei:
        phub.connect("127.0.0.1", "nobody", 1, 0, 1, [10], port=9, connect_timeout_ms=400)
    assert time.time() - t0 < 5
    assert "no answer" in str(ei.value) and ei.value.errno == 110


def test_dead_pbox_fails_the_wait_not_hangs(job):
    from conftest import SoftPBox
    sp = SoftPBox()
    s = phub.connect("127.0.0.1", job, 1, 0, 1, [100], port=sp.port, dead_ms=800)
    sp.stop()
    t0 = time.time()
    g = np.ones(100, np.float32)
    with pytest.raises(phub.PhubConnectionError) as ei:
        s.wait(s.pushpull(0, g, g), timeout=10)
    assert time.time() - t0 < 5
    assert str(ei.value)                        # libphub's reason, not empty
    with pytest.raises(phub.PhubConnectionError):
        s.pushpull(0, g, g)                     # the session stays failed
    s.close()


def test_bad_parameters():
    with pytest.raises(ValueError):
        phub.connect("127.0.0.1", "j", 1, 0, 1, [10], dtype="fp64")
    with pytest.raises(phub.PhubError) as ei:
        phub.connect("127.0.0.1", "j", 1, 3, 2, [10])      # rank >= world size
    assert ei.value.errno == 22 and str(ei.value)


def _rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4


def test_no_leak_over_1000_steps(soft_pbox, job):
    n = 4096
    with phub.connect("127.0.0.1", job, 1, 0, 1, [n, 100], port=soft_pbox.port,
                      optimizer="sgd", lr=0.001) as s:
        g = np.ones(n, np.float32)
        out = np.zeros(n, np.float32)
        g2 = np.ones(100, np.float32)
        out2 = np.zeros(100, np.float32)
        for i in range(1000):
            if i == 100:
                gc.collect()
                base = _rss_kb()
            s.pushpull(0, g, out)
            s.pushpull(1, g2, out2, callback=lambda t, st: None)
            s.wait_all()
        gc.collect()
        assert s.pending() == 0 and not s._callbacks
        assert _rss_kb() - base < 2048, "resident memory grew by more than 2 MB"
        st = s.stats()
        assert st["ops_completed"] >= 2000
        # 1000 SGD steps of lr 0.001 on gradient 1 from 0: -1.0 (fp32 rounding aside)
        assert abs(float(out[0]) + 1.0) < 1e-3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fp16_bf16(soft_pbox, job, dtype):
    name = {torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    n = 2000
    w0 = torch.linspace(-1, 1, n).to(dtype)

    def rank(r):
        with phub.connect("127.0.0.1", job, 1, r, 2, [n], port=soft_pbox.port, dtype=name,
                          optimizer="sgd", lr=0.25, initial=[w0]) as s:
            g = torch.full((n,), float(r + 1), dtype=dtype)
            out = torch.empty(n, dtype=dtype)
            s.wait(s.pushpull(0, g, out))
            with pytest.raises(ValueError):
                s.push(0, torch.zeros(n))            # fp32 tensor to an fp16/bf16 job
            return out

    want = (w0.float() - 0.25 * 1.5).to(dtype)       # fp32 model, narrowed once
    for out in run_ranks(2, rank):
        assert out.dtype == dtype
        assert torch.equal(out, want)


def test_set_key_hyper(soft_pbox, job):
    n = 1000
    with phub.connect("127.0.0.1", job, 1, 0, 1, [n], port=soft_pbox.port, optimizer="sgd",
                      lr=1.0) as s:
        w = np.zeros(n, np.float32)
        g = np.ones(n, np.float32)
        s.set_key_hyper(0, lr=0.25, weight_decay=0.0)
        s.wait(s.pushpull(0, g, w))
        np.testing.assert_array_equal(w, np.full(n, -0.25, np.float32))
        with pytest.raises(phub.PhubError) as ei:
            s.set_key_hyper(0, lr=-1.0)
        assert ei.value.errno == 22
        with pytest.raises(phub.PhubError) as ei:
            s.set_key_hyper(5, lr=0.1)
        assert ei.value.errno == 2
    # mtu sizes the JOIN only: the session learns the path's MTU at JOIN (loopback's here),
    # and the PBox cut its segments with room for the longer header, so HYPER still goes.
    with phub.connect("127.0.0.1", job + "m", 1, 0, 1, [n], port=soft_pbox.port, mtu=1400,
                      optimizer="sgd", lr=1.0) as s:
        w = np.zeros(n, np.float32)
        s.set_key_hyper(0, lr=0.5)
        s.wait(s.pushpull(0, np.ones(n, np.float32), w))
        np.testing.assert_array_equal(w, np.full(n, -0.5, np.float32))


def test_ctypes_mirror_matches_phub_h():
    """Every field of the ctypes structs at the offset and size the C compiler gives it (a
    field added to phub.h, or moved, shows here); the mirrors are at least as large."""
    import ctypes
    import json
    import subprocess
    from phub import _lib
    from conftest import BUILD
    dump = os.path.join(BUILD, "tests", "python", "phub-layout-dump")
    if not os.path.exists(dump):
        pytest.skip("phub-layout-dump not built")
    c = json.loads(subprocess.run([dump], capture_output=True, text=True, check=True).stdout)
    mirrors = {"phub_key": _lib.Key, "phub_key_hyper": _lib.KeyHyper,
               "phub_connect_params": _lib.ConnectParams, "phub_stats": _lib.Stats,
               "phub_info": _lib.Info, "phub_world_change": _lib.WorldChange}
    for cname, fields in c.items():
        py = mirrors[cname]
        names = [f[0] for f in py._fields_ if f[0] != "_spare"]
        assert sorted(names) == sorted(k for k in fields if k != "size"), cname
        for name in names:
            d = getattr(py, name)
            assert [d.offset, d.size] == fields[name], f"{cname}.{name}"
        assert ctypes.sizeof(py) >= fields["size"][1], cname
        # The fields listed reach the end of the C struct (up to its tail padding): a field
        # appended to phub.h but left out of layout_dump.c and the mirror shows here.
        end = max(o + s for k, (o, s) in fields.items() if k != "size")
        assert end > fields["size"][1] - 8, f"{cname}: fields end at {end} of {fields['size'][1]}"



def test_elastic_job_goes_on_without_a_rank_that_left():
    """Rank 2 of an elastic job leaves after iteration 1; the soft PBox removes it after its
    worker_dead_ms and ranks 0 and 1 get the mean of the two from iteration 2 on, and see the
    change (world_size, rank_removed, world_changes)."""
    sp = SoftPBox("--worker-dead-ms", "1500")
    n = 100
    try:
        def rank(r):
            with phub.connect("127.0.0.1", "elastic-py", 0x77, r, 3, [n], port=sp.port,
                              optimizer="none", elastic=True, deterministic=True) as s:
                out = np.zeros(n, np.float32)
                outs = []
                for it in (1, 2, 3):
                    if r == 2 and it > 1:
                        break
                    g = np.full(n, float(r + 1) * it, np.float32)
                    s.wait(s.pushpull(0, g, out), 20000)
                    outs.append(out.copy())
                return outs, s.live_ranks(), s.rank_removed(2), s.world_changes()

        res = run_ranks(3, rank)
    finally:
        sp.stop()
    for r in (0, 1):
        outs, world, removed, changes = res[r]
        # "none": the model is the mean gradient: (1+2+3)/3 at 1, then (1+2)*it/2.
        np.testing.assert_array_equal(outs[0], np.full(n, 2.0, np.float32))
        np.testing.assert_array_equal(outs[1], np.full(n, 3.0, np.float32))
        np.testing.assert_array_equal(outs[2], np.full(n, 4.5, np.float32))
        assert world == 2 and removed == 2 and changes == [(2, False, 2)]
    assert res[2][1] == 3 and res[2][2] is None
