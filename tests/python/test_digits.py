# SPDX-License-Identifier: BSD-3-Clause
"""python/examples/train_digits.py, short: PHub reaches 95% and follows one process exactly."""

import json
import os
import subprocess
import sys

from conftest import BUILD, ROOT, SOFT_PBOX

import pytest


def test_train_digits_reaches_95_and_follows_one_process(tmp_path):
    if not os.path.exists(SOFT_PBOX):
        pytest.skip("soft PBox not built")
    out = tmp_path / "digits.json"
    png = tmp_path / "digits.png"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "python", "examples", "train_digits.py"),
                        "--mode", "all", "--workers", "2", "--optimizer", "sgd", "--lr", "0.5",
                        "--epochs", "10", "--deterministic", "--check", "--json", str(out),
                        "--plot", str(png), "--build", BUILD],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())
    by = {x["mode"]: x for x in res["results"]}
    assert set(by) == {"phub", "ddp", "single", "reference"}
    assert by["phub"]["final_accuracy"] >= 0.95, r.stdout
    assert by["phub"]["time_to_95"] is not None
    assert by["ddp"]["final_accuracy"] >= 0.95
    # Step for step: every step's global loss within 1e-5 of large-batch SGD in one process.
    assert res["check"]["steps"] == 230
    assert res["check"]["max_rel_diff"] <= 1e-5
    assert len(by["phub"]["loss"]) == 230
    assert "epoch  10" in r.stdout and "images/s" in r.stdout
    assert png.stat().st_size > 10000 and png.read_bytes()[:4] == b"\x89PNG"
