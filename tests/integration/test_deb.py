# SPDX-License-Identifier: BSD-3-Clause
"""The Debian packages end to end (meson: deb): build the .debs from a copy of the tree,
install them, run the installed appliance with no build tree, purge them and check nothing is
left. The tests share one build and one install and run in the order written; the purge is
the last.

  copy of the tree --dpkg-buildpackage -b--> phub-pbox, libphub0, libphub-dev, python3-phub
                                             .debs --lintian
       (deleted)                                  | dpkg -i
                                                  v
  /usr/sbin/phub-pbox --check-config /usr/share/phub/examples/*.json
  systemd-analyze verify phub-{pbox,exporter}@.service; phub-exporter; cc $(pkg-config ...)
  virtual rack: /usr/sbin/phub-pbox  <--UDP-->  /usr/bin/phub-bench x2 (verified)
                                                  | dpkg --purge
                                                  v
  no file of the packages, no /usr/share/phub, /var/lib/phub, /etc/phub

Brings up a rack: run it under the rack lock. Skips where it cannot run (not root, no
packaging tools, a package of ours installed on this machine already).
"""

import glob
import os
import shutil
import subprocess
import tempfile

import pytest

from phubrack.rack import MIXED, expect

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PKGS = ["phub-pbox", "libphub0", "libphub-dev", "python3-phub"]
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def known_to_dpkg(pkg):
    p = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", pkg], capture_output=True,
                       text=True)
    return "installed" in p.stdout


def clean(*cmd):
    """CMD away from any tree and with no PHUB_* variable; stdout and stderr together."""
    return subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, cwd="/", env=CLEAN_ENV)


@pytest.fixture(scope="module")
def debs():
    """The packages built from a copy of the tree as it is (not only what is committed),
    without its build directories: the directory of the .debs and .changes."""
    if os.geteuid() != 0:
        pytest.skip("installing packages needs root")
    for tool in ("dpkg-buildpackage", "dh", "lintian"):
        if shutil.which(tool) is None:
            pytest.skip(tool + " not installed")
    for p in PKGS:
        if known_to_dpkg(p):
            pytest.skip(p + " is installed on this machine already: not touching it")
    work = tempfile.mkdtemp(prefix="phub-deb.")
    try:
        src = os.path.join(work, "src")
        os.mkdir(src)
        tar = subprocess.Popen(["tar", "-C", ROOT, "--exclude=./.git",
                                "--exclude-tag-all=build.ninja", "-cf", "-", "."],
                               stdout=subprocess.PIPE)
        subprocess.run(["tar", "-C", src, "-xf", "-"], stdin=tar.stdout, check=True)
        tar.stdout.close()
        assert tar.wait() == 0, "tar of the tree failed"
        log = os.path.join(work, "build.log")
        with open(log, "w") as f:
            p = subprocess.run(["nice", "dpkg-buildpackage", "-b", "-us", "-uc"], cwd=src,
                               stdout=f, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            with open(log, errors="replace") as f:
                pytest.fail("dpkg-buildpackage:\n" + "".join(f.readlines()[-30:]))
        shutil.rmtree(src)
        print("built: " + " ".join(sorted(os.path.basename(f)
                                          for f in glob.glob(os.path.join(work, "*.deb")))))
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


class Installed:
    """The packages installed with dpkg -i; files: every path dpkg -L lists for them."""

    def __init__(self, work):
        # PKG_*.deb: not PKG-dbgsym_*.deb
        self.debs = [f for p in PKGS for f in glob.glob(os.path.join(work, p + "_*.deb"))]
        self.installed = False
        self.files = []

    def install(self):
        # Purged afterwards even when dpkg -i fails half-way.
        self.installed = True
        p = subprocess.run(["dpkg", "-i"] + self.debs, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert p.returncode == 0, "dpkg -i:\n" + p.stdout
        listing = subprocess.run(["dpkg", "-L"] + PKGS, capture_output=True, text=True,
                                 check=True).stdout
        self.files = sorted(set(listing.splitlines()))

    def purge(self):
        self.installed = False
        return subprocess.run(["dpkg", "--purge"] + PKGS, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def installed(debs):
    inst = Installed(debs)
    try:
        inst.install()
        yield inst
    finally:
        if inst.installed:
            inst.purge()


def test_lintian(debs):
    # Clean but for the tags debian/*.lintian-overrides explain.
    p = subprocess.run(["lintian", "--fail-on", "error,warning"] +
                       glob.glob(os.path.join(debs, "*.changes")), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if [line for line in p.stdout.splitlines() if "running with root privileges" not in line]:
        print("lintian: " + p.stdout)
    assert p.returncode == 0, "lintian: " + p.stdout


def test_examples_check_config(installed):
    examples = sorted(glob.glob("/usr/share/phub/examples/*.json"))
    assert examples, "no example in /usr/share/phub/examples"
    bad = []
    for f in examples:
        p = clean("/usr/sbin/phub-pbox", "-c", f, "--check-config")
        out = p.stdout.splitlines()
        if p.returncode != 0:
            bad.append("installed phub-pbox --check-config %s: exit %d" % (f, p.returncode))
        if "# drivers from /usr/share/phub/drivers-cfg" not in out:
            bad.append("%s: profiles not from /usr/share/phub/drivers-cfg" % f)
        with open(f) as fh:
            tap = '"driver": "tap"' in fh.read()
        if tap and "# tap steering program /usr/share/phub/bpf/steer_tap.bpf.o" not in out:
            bad.append("%s: BPF object not found where installed" % f)
    assert not bad, "\n".join(bad)


def test_setup_check(installed):
    p = clean("phub-setup", "--check", "/usr/share/phub/examples/virtual-rack.json")
    assert p.returncode == 0, "installed phub-setup --check: " + p.stdout
    assert "no PCI NICs in this configuration" in p.stdout, "phub-setup: " + p.stdout


def test_units_verify(installed):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    for unit in ("phub-pbox@.service", "phub-exporter@.service"):
        p = subprocess.run(["systemd-analyze", "verify", "/lib/systemd/system/" + unit],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert p.returncode == 0, "systemd-analyze verify %s: exit %d" % (unit, p.returncode)
        assert not p.stdout, "systemd-analyze verify %s: %s" % (unit, p.stdout)


def test_exporter(installed):
    # The exporter where the docs say it is.
    if subprocess.run(["/usr/bin/python3", "-c", "import prometheus_client"],
                      capture_output=True).returncode != 0:
        pytest.skip("no prometheus_client for /usr/bin/python3")
    p = subprocess.run(["phub-exporter", "--list-metrics"], capture_output=True, text=True,
                       env=CLEAN_ENV)
    assert "phub_pushes_total" in p.stdout.splitlines(), "installed phub-exporter " \
        "--list-metrics:\n" + p.stdout + p.stderr


def test_monitoring_files(installed):
    for f in ("phub-alerts.yml", "phub-dashboard.json"):
        path = "/usr/share/phub/monitoring/" + f
        assert os.path.isfile(path), "no " + path


def test_libphub_dev(installed, tmp_path):
    # A program built against the installed header and pkg-config file.
    (tmp_path / "w.c").write_text("""#include <phub.h>
#include <stdio.h>

int
main(void)
{
	/* Resolved from libphub.so.0 at load time: the program runs only if it is there. */
	const char *(*f)(const struct phub *) = phub_last_error;

	printf("%s\\n", f != NULL ? "linked" : "unlinked");
	return 0;
}
""")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "phub"], capture_output=True,
                           text=True, check=True).stdout.split()
    w = str(tmp_path / "w")
    p = subprocess.run(["cc", "-o", w, str(tmp_path / "w.c")] + flags, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, "cc against libphub-dev:\n" + p.stdout
    assert subprocess.run([w], capture_output=True, text=True).stdout == "linked\n", \
        "the program against libphub.so.0 did not run"
    ldd = subprocess.run(["ldd", w], capture_output=True, text=True).stdout
    assert [line for line in ldd.splitlines()
            if "libphub.so.0 => /usr/lib/" in line or "libphub.so.0 => /lib/" in line], \
        "not linked to the installed libphub.so.0: " + ldd


def test_python3_phub(installed):
    # The installed package finds the installed libphub.so.0, away from any tree.
    p = subprocess.run(["/usr/bin/python3", "-c", "import phub, phub._lib as l; "
                        "print(phub.__file__); print(l.load()._name)"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, cwd="/",
                       env={"PATH": "/usr/bin:/bin"})
    out = p.stdout.splitlines()
    assert p.returncode == 0, "import phub from python3-phub: " + p.stdout
    assert out[0] == "/usr/lib/python3/dist-packages/phub/__init__.py", \
        "phub not imported from the package: " + p.stdout
    assert out[-1] == "libphub.so.0", "phub did not load libphub.so.0: " + p.stdout


@pytest.fixture
def installed_programs(installed, monkeypatch):
    """The rack fixture (conftest.py, requested after this one) runs the installed appliance
    and phub-bench."""
    monkeypatch.setenv("PHUB_PBOX", "/usr/sbin/phub-pbox")
    monkeypatch.setenv("PHUB_BENCH", "/usr/bin/phub-bench")


def test_rack(installed_programs, rack):
    # The installed appliance in the virtual rack against the installed phub-bench, verified
    # (test_pbox_rack.py's workers-2).
    assert rack.pbox_bin == "/usr/sbin/phub-pbox" and rack.bench_bin == "/usr/bin/phub-bench"
    rack.up(2)
    r = rack.bench(2, "--layout", rack.layout(MIXED), "--iterations", 4, "--optimizer", "sgd")
    expect(r, 'r["verified"]', 'r["bitwise"]', "r['workers'] == 2")


def test_purge(installed):
    p = installed.purge()
    assert p.returncode == 0, "purge:\n" + p.stdout
    left = [f for f in installed.files
            if f != "/." and os.path.exists(f) and not os.path.isdir(f)]
    left += [d for d in ("/usr/share/phub", "/usr/share/doc/phub-pbox", "/var/lib/phub",
                         "/etc/phub", "/run/phub") if os.path.exists(d)]
    left += [p + " still known to dpkg" for p in PKGS if known_to_dpkg(p)]
    assert not left, "left after purge: %s" % left
