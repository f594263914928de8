# SPDX-License-Identifier: BSD-3-Clause
"""The package installed as pip installs it: python/ into a virtual environment (no network,
the setuptools installed), where phub finds libphub.so.0 and trains under python3 -m phub.run."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from test_launch import LIB, TRAIN, free_port, launch_and_check, launch_env


def test_pip_install_into_a_venv_then_train_under_phub_run(soft_pbox, job, tmp_path):
    """python/ installed with pip (no network, Debian's setuptools) into a venv that sees
    Debian's torch; the installed phub finds libphub.so.0 through the dynamic linker, through
    PHUB_LIBRARY, and trains 2 ranks under the venv's python3 -m phub.run."""
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    if subprocess.run([py, "-c", "import ensurepip, venv, torch"],
                      capture_output=True).returncode != 0:
        pytest.skip(f"{py} has no venv/ensurepip (python3-venv) or no torch")
    src = tmp_path / "src"
    src.mkdir()
    shutil.copytree(os.path.join(ROOT, "python", "phub"), src / "phub",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, "python", f), src / f)
    venv = tmp_path / "venv"
    subprocess.run([py, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                   timeout=240)
    vpy = str(venv / "bin" / "python3")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PHUB_BUILD_DIR", "PHUB_LIBRARY")}
    r = subprocess.run([vpy, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--no-cache-dir", str(src)], env=env, capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # The dynamic linker's path (LD_LIBRARY_PATH here; ld.so.cache once installed).
    probe = "import phub; print(phub.__file__); print(phub.library()._name)"
    r = subprocess.run([vpy, "-c", probe], env=dict(env, LD_LIBRARY_PATH=os.path.dirname(LIB)),
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    where, lib = r.stdout.split()
    assert where.startswith(str(venv)) and lib == "libphub.so.0", r.stdout
    # Nowhere to find it: the error names what to set.
    r = subprocess.run([vpy, "-c", probe], env=env, cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        assert "PHUB_LIBRARY" in r.stderr, r.stderr
    (tmp_path / "train.py").write_text(TRAIN)
    tenv = launch_env(soft_pbox, job)
    for k in ("PYTHONPATH", "PHUB_BUILD_DIR"):
        tenv.pop(k, None)
    tenv["PHUB_LIBRARY"] = LIB
    ranks, _ = launch_and_check([vpy, "-m", "phub.run", "--nproc_per_node", "2",
                                 "--master_port", str(free_port()), "train.py", str(tmp_path)],
                                tenv, str(tmp_path))
    assert all(res["phub"].startswith(str(venv)) for res in ranks)
    assert all(res["library"] == LIB for res in ranks)
