# SPDX-License-Identifier: BSD-3-Clause
"""The installed appliance without its build tree, and phub-setup (meson: install-destdir,
install-setup, install-pci, one class each).

  build/ --meson install --destdir--> DEST/usr/local/
                                        sbin/phub-pbox --check-config
                                            on share/phub/examples/*.json
                                        sbin/phub-setup --check        (no PCI NICs here)
                                        lib/systemd/system/*.service   systemd-analyze verify
                                        share/man/man{1,8}/*           man -l

TestDestdir: the install and the installed programs' checks above.
TestSetup: phub-setup for real (root): hugepages for a vdev-only config, then --undo.
TestPci: phub-setup --check on a fake sysfs of a two-node host with an E810 on node 1, and a
fake root (PHUB_SETUP_ROOT) with or without the ice PMD and the E810 DDP package.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.abspath(os.environ.get("PHUB_BUILD_DIR") or os.path.join(ROOT, "build"))
PBOX = os.path.join(BUILD, "app", "pbox", "phub-pbox")
SETUP = os.path.join(ROOT, "scripts", "phub-setup")
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def run(*cmd, env=None, clean=False):
    """CMD with its output (stdout and stderr together) captured. clean: with no PHUB_*
    variable and away from the tree, so that only the installed defaults count."""
    base = {"PATH": PATH} if clean else dict(os.environ)
    return subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, cwd="/" if clean else None,
                          env=dict(base, **(env or {})))


def show(out):
    for line in out.splitlines():
        print("  " + line)


def lines(out, prefix):
    return [line for line in out.splitlines() if line.startswith(prefix)]


class Install:
    """What meson install --destdir made: dest, the configured prefix, and prefix and data
    (share/phub) under dest."""

    def __init__(self, dest):
        self.dest = dest
        options = json.loads(subprocess.run(["meson", "introspect", BUILD, "--buildoptions"],
                                            capture_output=True, text=True, check=True).stdout)
        self.configured = [o["value"] for o in options if o["name"] == "prefix"][0]
        self.prefix = dest + self.configured
        self.data = os.path.join(self.prefix, "share", "phub")


class TestDestdir:
    @pytest.fixture(scope="class")
    def inst(self):
        work = tempfile.mkdtemp(prefix="phub-install.")
        try:
            subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--destdir",
                            os.path.join(work, "dest"), "--quiet"], check=True,
                           stdout=subprocess.DEVNULL)
            yield Install(os.path.join(work, "dest"))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_files(self, inst):
        missing = [f for f in ("sbin/phub-pbox", "sbin/phub-setup", "bin/phub-bench",
                               "bin/phub-plan", "include/phub.h", "share/man/man8/phub-pbox.8",
                               "share/man/man8/phub-setup.8", "share/man/man1/phub-bench.1",
                               "share/man/man1/phub-plan.1", "share/phub/bpf/steer_tap.bpf.o",
                               "share/phub/bpf/xdp_pbox.bpf.o",
                               "lib/systemd/system/phub-pbox@.service",
                               "lib/systemd/system/phub-setup@.service")
                   if not os.path.exists(os.path.join(inst.prefix, f))]
        for name in ("libphub.a", "phub.pc"):
            if not glob.glob(os.path.join(inst.prefix, "**", name), recursive=True):
                missing.append(name)
        missing += ["profile " + f for f in glob.glob(os.path.join(ROOT, "drivers-cfg", "*.json"))
                    if not os.path.isfile(os.path.join(inst.data, "drivers-cfg",
                                                       os.path.basename(f)))]
        assert not missing, "not installed: %s" % missing

    def test_examples_check_config(self, inst):
        # Every example passes, with the installed profiles and the installed BPF object.
        examples = sorted(glob.glob(os.path.join(inst.data, "examples", "*.json")))
        assert examples, "no example installed"
        bad = []
        for f in examples:
            p = run(os.path.join(inst.prefix, "sbin", "phub-pbox"), "-c", f, "--check-config",
                    clean=True)
            out = p.stdout
            if p.returncode != 0:
                bad.append("%s: exit %d" % (f, p.returncode))
            with open(f) as fh:
                text = fh.read()
            # Honest: every declared job says what it trains (so it was checked), no peer idles.
            checked = [line for line in lines(out, "# jobs[")
                       if re.match(r"^# jobs\[[0-9]+\] .*: [0-9]+ MB \(", line)]
            if len(checked) != text.count('"nonce"'):
                bad.append("%s: not every declared job was checked: %s" % (
                    f, lines(out, "# jobs[")))
            bad += ["%s: %s" % (f, line) for line in lines(out, "# peers[")]
            if "# drivers from %s/drivers-cfg" % inst.data not in out.splitlines():
                bad.append("%s: profiles not taken from %s/drivers-cfg: %s" % (
                    f, inst.data, lines(out, "# drivers from")))
            if '"driver": "tap"' in text and ("# tap steering program %s/bpf/steer_tap.bpf.o" %
                                              inst.data) not in out.splitlines():
                bad.append("%s: BPF object not found where installed: %s" % (
                    f, [line for line in out.splitlines() if "steering program" in line]))
        print("installed phub-pbox --check-config: %d examples checked" % len(examples))
        assert not bad, "\n".join(bad)

    def test_drivers_dir_override(self, inst):
        # An override still wins over the installed default.
        drivers = os.path.join(ROOT, "drivers-cfg")
        out = run(os.path.join(inst.prefix, "sbin", "phub-pbox"), "-c",
                  os.path.join(inst.data, "examples", "virtual-rack.json"), "--check-config",
                  env={"PHUB_DRIVERS_DIR": drivers}, clean=True).stdout
        assert "# drivers from " + drivers in out.splitlines(), "PHUB_DRIVERS_DIR ignored:\n" + out

    def test_setup_check_virtual_rack(self, inst):
        # phub-setup --check changes nothing and says what it would do; no PCI NICs here.
        p = run(os.path.join(inst.prefix, "sbin", "phub-setup"), "--check",
                os.path.join(inst.data, "examples", "virtual-rack.json"), clean=True)
        show(p.stdout)
        assert p.returncode == 0, "phub-setup --check virtual-rack.json: exit %d" % p.returncode
        assert "no PCI NICs in this configuration" in p.stdout, "no word on PCI NICs"
        assert "eal.no_huge is true" in p.stdout, "no word on hugepages"

    def test_setup_check_baremetal_refused(self, inst):
        # The bare-metal example names NICs this machine lacks: refused, each with what to fix.
        p = run(os.path.join(inst.prefix, "sbin", "phub-setup"), "--check",
                os.path.join(inst.data, "examples", "baremetal-2nic.json"), clean=True)
        show(p.stdout)
        assert p.returncode == 1, "exit %d, not 1" % p.returncode
        assert re.search(r"ports\[0\] \(nic0\): no PCI device 0000:3b:00\.0 on this host.*"
                         r"fix ports\[0\]\.device", p.stdout), "the missing NIC is not named " \
            "with its fix"

    def test_units_verify(self, inst, tmp_path):
        # The units, with their programs where this install put them.
        if shutil.which("systemd-analyze") is None:
            pytest.skip("systemd-analyze not installed: unit verification skipped")
        for f in glob.glob(os.path.join(inst.prefix, "lib", "systemd", "system", "*.service")):
            with open(f) as fh:
                text = fh.read().replace(inst.configured + "/sbin", inst.prefix + "/sbin")
            (tmp_path / os.path.basename(f)).write_text(text)
        shutil.copy(tmp_path / "phub-pbox@.service", tmp_path / "phub-pbox@t.service")
        p = run("systemd-analyze", "verify", tmp_path / "phub-pbox@t.service",
                env={"MANPATH": os.path.join(inst.prefix, "share", "man")})
        assert p.returncode == 0, "systemd-analyze verify: exit %d: %s" % (p.returncode, p.stdout)
        # verify exits 0 on many warnings: any line is one.
        assert not p.stdout, "systemd-analyze verify: " + p.stdout
        print("systemd-analyze verify: clean")

    def test_man_pages(self, inst):
        pages = glob.glob(os.path.join(inst.prefix, "share", "man", "man*", "*"))
        assert pages
        bad = []
        for f in pages:
            p = subprocess.run(["man", "--warnings", "-l", f], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="80"))
            if p.returncode != 0 or p.stderr:
                bad.append("man %s: exit %d %s" % (f, p.returncode, p.stderr))
        assert not bad, "\n".join(bad)


HP_NODE = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"


def read_int(path):
    with open(path) as f:
        return int(f.read())


class TestSetup:
    """phub-setup for real on a vdev-only config with hugepages: reserve, then undo."""

    @pytest.fixture(scope="class")
    def setup(self, tmp_path_factory):
        if not os.access(HP_NODE, os.W_OK):
            pytest.skip("no writable %s (root and hugetlbfs needed)" % HP_NODE)
        work = tmp_path_factory.mktemp("setup")
        cfg = work / "hp.json"
        cfg.write_text(json.dumps({
            "eal": {"lcores": [0, 1], "memory_mb": 64, "no_huge": False,
                    "file_prefix": "phub-setup-t"},
            "drivers_dir": os.path.join(ROOT, "drivers-cfg"),
            "ports": [{"name": "n0", "device": "net_null0", "driver": "null",
                       "ipv4": "10.99.0.1/24", "mtu": 1500, "lcores": [1]}],
            "idle": {"policy": "adaptive"},
            "checkpoint": {"dir": str(work / "ckpt")}}))
        s = {"cfg": cfg, "work": work, "state": work / "state", "before": read_int(HP_NODE),
             "undone": False}
        s["env"] = {"PHUB_SETUP_STATE_DIR": str(s["state"])}
        s["run"] = run(SETUP, "--pbox", PBOX, cfg, env=s["env"])
        s["after"] = read_int(HP_NODE)
        show(s["run"].stdout)
        yield s
        if not s["undone"]:
            run(SETUP, "--undo", cfg, env=s["env"])

    def test_reserves(self, setup):
        out = setup["run"].stdout
        assert setup["run"].returncode == 0, "phub-setup: exit %d" % setup["run"].returncode
        assert "no PCI NICs in this configuration" in out, "no word on PCI NICs"
        assert "n0: vdev net_null0" in out, "the vdev is not reported"
        assert (setup["work"] / "ckpt").is_dir(), "checkpoint.dir not created"
        with open("/proc/mounts") as f:
            assert " hugetlbfs " in f.read(), "no hugetlbfs mounted after phub-setup"
        before, after = setup["before"], setup["after"]
        if before >= 32:
            assert after == before, "hugepages changed from %d to %d though enough" % (before,
                                                                                      after)
        else:
            assert after == 32, "64 MB of hugepages: 32 pages expected, %d reserved (from %d)" \
                % (after, before)
            assert (setup["state"] / "setup-hp.json").is_file(), "no state file for --undo"

    def test_undo(self, setup):
        p = run(SETUP, "--undo", setup["cfg"], env=setup["env"])
        setup["undone"] = True
        show(p.stdout)
        assert p.returncode == 0, "phub-setup --undo: exit %d" % p.returncode
        undone = read_int(HP_NODE)
        assert undone == setup["before"], "--undo left %d hugepages, %d before" % (
            undone, setup["before"])
        assert not (setup["state"] / "setup-hp.json").exists(), "--undo left its state file"


class FakeHost:
    """A fake sysfs (PHUB_SYSFS_ROOT, which lib/config reads too) of a two-node host with an
    E810 at 0000:3b:00.0 on node 1 in IOMMU group 12, CPUs 0-1 online and none isolated; and a
    fake root (PHUB_SETUP_ROOT) with Debian 12's files of the ice PMD and the E810 DDP
    package. A test removes what it wants missing."""

    def __init__(self, d):
        self.sys, self.root = d / "sys", d / "root"
        nic = self.sys / "bus/pci/devices/0000:3b:00.0"
        for sub in (nic, self.sys / "bus/pci/drivers/ice", self.sys / "kernel/iommu_groups/12",
                    self.sys / "devices/system/cpu/cpu0/node0",
                    self.sys / "devices/system/cpu/cpu1/node1"):
            sub.mkdir(parents=True)
        (nic / "numa_node").write_text("1\n")
        (nic / "driver").symlink_to(self.sys / "bus/pci/drivers/ice")
        (self.sys / "devices/system/cpu/online").write_text("0-1\n")
        (self.sys / "devices/system/cpu/isolated").write_text("")
        for n in (0, 1):
            hp = self.sys / ("devices/system/node/node%d/hugepages/hugepages-2048kB" % n)
            hp.mkdir(parents=True)
            (hp / "nr_hugepages").write_text("0\n")
        self.pmds = self.root / "usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0"
        self.pmds.mkdir(parents=True)
        self.ice_pmd = self.pmds / "librte_net_ice.so.23"
        self.ice_pmd.write_text("")
        ddp = self.root / "lib/firmware/intel/ice/ddp"
        ddp.mkdir(parents=True)
        self.ddp = ddp / "ice-1.3.30.0.pkg"
        self.ddp.write_text("")
        self.iommu_group = self.sys / "kernel/iommu_groups/12"
        self.cfg = d / "pci.json"
        self.cfg.write_text(self.config("ice"))

    @staticmethod
    def config(driver):
        return json.dumps({
            "eal": {"lcores": [0, 1], "memory_mb": 64, "no_huge": False,
                    "file_prefix": "phub-pci-t"},
            "drivers_dir": os.path.join(ROOT, "drivers-cfg"),
            "ports": [{"name": "nic0", "device": "0000:3b:00.0", "driver": driver,
                       "ipv4": "10.20.0.1/16", "mtu": 9000, "lcores": [1]}],
            "idle": {"policy": "poll"}})

    def check(self, cfg=None):
        p = run(SETUP, "--check", "--pbox", PBOX, cfg or self.cfg,
                env={"PHUB_SYSFS_ROOT": str(self.sys), "PHUB_SETUP_ROOT": str(self.root)})
        show(p.stdout)
        return p.returncode, p.stdout

    def refused(self, pattern, what, cfg=None):
        """--check exits 1 and says PATTERN (what: the failure's words otherwise): its
        output."""
        rc, out = self.check(cfg)
        assert rc == 1, "exit %d, not 1" % rc
        assert re.search(pattern, out), what
        return out

    def hugepages(self, node):
        return read_int(self.sys / ("devices/system/node/node%d/hugepages/hugepages-2048kB/"
                                    "nr_hugepages" % node))


class TestPci:
    @pytest.fixture
    def host(self, tmp_path):
        return FakeHost(tmp_path)

    def test_no_ddp_package(self, host):
        # Refused, naming the package that brings it.
        host.ddp.unlink()
        host.refused(r"nic0 \(ice\): no E810 DDP package in .*apt install firmware-misc-nonfree",
                     "firmware-misc-nonfree not named")

    def test_no_ice_pmd(self, host):
        # Refused, naming Debian's package of it (not "bound to vfio-pci?").
        host.ice_pmd.unlink()
        out = host.refused(r"nic0 \(ice\): DPDK's ice PMD \(librte_net_ice\.so\) is not "
                           r"installed.*apt install librte-net-ice23", "librte-net-ice23 not named")
        assert "no E810 DDP" not in out, "the DDP package present is still refused"

    def test_no_iommu(self, host):
        # vfio-pci is refused, with the kernel options that fix it; the hugepages go to the
        # NIC's node; the polling CPU that is not isolated is named.
        host.iommu_group.rmdir()
        out = host.refused(r"nic0 \(0000:3b:00\.0\): vfio-pci needs the IOMMU.*intel_iommu=on "
                           r"iommu=pt", "the refusal does not say what to fix")
        assert "would reserve 32 hugepages of 2 MB on NUMA node 1 " in out, \
            "the hugepages do not go to the NIC's node 1"
        assert "on NUMA node 0" not in out, "hugepages asked on node 0, which has no port"
        assert re.search(r"CPUs \[1\] poll .* not isolated: boot with isolcpus=1", out), \
            "the polling CPU that is not isolated is not named"

    def test_iommu_binds_vfio(self, host):
        # With an IOMMU group the NIC would be bound from ice to the profile's vfio-pci.
        rc, out = host.check()
        assert rc == 0, "exit %d" % rc
        assert "would bind nic0 (0000:3b:00.0) from ice to vfio-pci" in out, \
            "the binding to vfio-pci is not planned"
        assert "nic0 (ice): PMD librte_net_ice found" in out, "the ice PMD not reported"
        # --check changes nothing.
        assert host.hugepages(0) == 0 and host.hugepages(1) == 0, "--check changed the hugepages"

    def test_mlx5_needs_rdma_core(self, host, tmp_path):
        # The verbs provider and rdma-core are named when missing.
        cfg = tmp_path / "mlx5.json"
        cfg.write_text(host.config("mlx5"))
        (host.pmds / "librte_net_mlx5.so.23").write_text("")
        out = host.refused("apt install ibverbs-providers rdma-core", "no provider named", cfg)
        assert "rdma-core is not installed" in out, "rdma-core not named"
