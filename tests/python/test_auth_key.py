# SPDX-License-Identifier: BSD-3-Clause
"""key=: an authenticated job with a 256-bit key (jobs[].key) takes the workers that give it
and refuses, with a message that names the key, those that give another."""

import os
import time

import numpy as np
import pytest

import phub
from conftest import SoftPBox, run_ranks

KEY = "9c1e04b7f25a6d38e0c7b1a4f95d2e6083b7c1d9a4e5f60718293a4b5c6d7e8f"
NONCE = 0x5EED


@pytest.fixture
def auth_pbox(job):
    """A soft PBox with `job` declared authenticated, 2 ranks, KEY as its key."""
    sp = SoftPBox("--auth-job", f"{job}:{NONCE:#x}:2:{KEY}")
    yield sp
    sp.stop()


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch):
    # The test says the key; one in the environment would stand in for a missing key=.
    monkeypatch.delenv("PHUB_KEY", raising=False)
    monkeypatch.delenv("PHUB_AUTH", raising=False)


def test_the_right_key_as_hex_or_bytes_joins_and_exchanges(auth_pbox, job):
    n = 300

    def rank(r):
        # Rank 0 gives the hex digits, rank 1 the 32 bytes: both are the same key.
        key = KEY if r == 0 else bytes.fromhex(KEY)
        with phub.connect("127.0.0.1", job, NONCE, r, 2, [n], port=auth_pbox.port,
                          optimizer="none", auth=True, key=key) as s:
            g = np.full(n, float(r + 1), np.float32)
            out = np.zeros(n, np.float32)
            s.wait(s.pushpull(0, g, out))
            return out, s.stats()

    for out, st in run_ranks(2, rank):
        np.testing.assert_array_equal(out, np.full(n, 1.5, np.float32))  # the mean gradient
        assert st["rx_auth_failed"] == 0


@pytest.mark.parametrize("given", ["another key", "no key (the nonce)"])
def test_a_wrong_key_is_refused_with_a_message_that_names_the_key(auth_pbox, job, given):
    key = KEY[::-1] if given == "another key" else None
    t0 = time.time()
    with pytest.raises(phub.PhubTimeoutError) as ei:
        phub.connect("127.0.0.1", job, NONCE, 0, 2, [10], port=auth_pbox.port, auth=True,
                     key=key, connect_timeout_ms=600)
    assert time.time() - t0 < 10
    msg = str(ei.value)
    assert "authenticated JOIN" in msg and "wrong key" in msg and job in msg, msg
    assert KEY not in msg and KEY[::-1] not in msg
    # The right key still gets in afterwards: the wrong JOINs left nothing behind.
    def rank(r):
        with phub.connect("127.0.0.1", job, NONCE, r, 2, [10], port=auth_pbox.port,
                          optimizer="none", auth=True, key=KEY) as s:
            return s.info()["world_size"]

    assert run_ranks(2, rank) == [2, 2]


def test_a_key_that_is_not_64_hex_digits_fails_at_once(auth_pbox, job):
    for bad in ("9c1e04b7", KEY[:-1] + "g", b"\x01" * 31):
        t0 = time.time()
        with pytest.raises(phub.PhubError) as ei:
            phub.connect("127.0.0.1", job, NONCE, 0, 2, [10], port=auth_pbox.port, auth=True,
                         key=bad, connect_timeout_ms=5000)
        assert time.time() - t0 < 3, bad
        assert "64 hex digits" in str(ei.value), str(ei.value)


def test_without_auth_the_job_refuses_with_the_reason(auth_pbox, job):
    with pytest.raises(phub.PhubError) as ei:
        phub.connect("127.0.0.1", job, NONCE, 0, 2, [10], port=auth_pbox.port, auth=False,
                     key=KEY, connect_timeout_ms=2000)
    assert "authenticated" in str(ei.value), str(ei.value)
    assert os.environ.get("PHUB_KEY") is None
