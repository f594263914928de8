#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The installed appliance without its build tree: meson install --destdir, then what an operator runs.
#
#   build/ --meson install --destdir--> $dest/usr/local/
#                                         sbin/phub-pbox --check-config  on  share/phub/examples/*.json
#                                         sbin/phub-setup --check        (no PCI NICs here)
#                                         lib/systemd/system/*.service   systemd-analyze verify
#                                         share/man/man{1,8}/*           man -l
#
# Usage: install.sh destdir|setup|pci BUILD_DIR SOURCE_DIR
#   destdir  the install and the installed programs' checks above
#   setup    phub-setup for real (root): hugepages for a vdev-only config, then --undo
#   pci      phub-setup --check on a fake sysfs of a two-node host with an E810 on node 1, and a
#            fake root (PHUB_SETUP_ROOT) with or without the ice PMD and the E810 DDP package

set -euo pipefail

mode=$1
build=$(realpath "$2")
src=$(realpath "$3")
work=$(mktemp -d /tmp/phub-install.XXXXXX)
fails=0

cleanup() {
	rm -rf "$work"
}
trap cleanup EXIT

indent() {
	local line
	while IFS= read -r line; do
		printf '  %s\n' "$line"
	done
}

fail() {
	echo "FAIL: $*" >&2
	fails=$((fails + 1))
}

# Run with no PHUB_* variable and away from the tree: only the installed defaults count.
clean_env() {
	(cd / && env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@")
}

destdir() {
	local dest=$work/dest configured prefix data out f rc
	meson install -C "$build" --no-rebuild --destdir "$dest" --quiet >/dev/null
	configured=$(meson introspect "$build" --buildoptions | python3 -c \
		'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"][0])')
	prefix=$dest$configured
	data=$prefix/share/phub

	for f in sbin/phub-pbox sbin/phub-setup bin/phub-bench bin/phub-plan include/phub.h \
		share/man/man8/phub-pbox.8 share/man/man8/phub-setup.8 share/man/man1/phub-bench.1 \
		share/man/man1/phub-plan.1 share/phub/bpf/steer_tap.bpf.o share/phub/bpf/xdp_pbox.bpf.o \
		lib/systemd/system/phub-pbox@.service lib/systemd/system/phub-setup@.service; do
		[ -e "$prefix/$f" ] || fail "not installed: $f"
	done
	[ -n "$(find "$prefix" -name libphub.a)" ] || fail "not installed: libphub.a"
	[ -n "$(find "$prefix" -name phub.pc)" ] || fail "not installed: phub.pc"
	for f in "$src"/drivers-cfg/*.json; do
		[ -f "$data/drivers-cfg/$(basename "$f")" ] || fail "profile not installed: $f"
	done

	# Every example passes, with the installed profiles and the installed BPF object.
	for f in "$data"/examples/*.json; do
		rc=0
		out=$(clean_env "$prefix/sbin/phub-pbox" -c "$f" --check-config) || rc=$?
		[ "$rc" = 0 ] || fail "installed phub-pbox --check-config $f: exit $rc"
		# Honest: every declared job says what it trains (so it was checked), no peer idles.
		[ "$(grep -cE '^# jobs\[[0-9]+\] .*: [0-9]+ MB \(' <<< "$out")" = "$(grep -c '"nonce"' "$f")" ] ||
			fail "$f: not every declared job was checked: $(grep '^# jobs\[' <<< "$out")"
		if grep -q '^# peers\[' <<< "$out"; then
			fail "$f: $(grep '^# peers\[' <<< "$out")"
		fi
		echo "$out" | grep -qx "# drivers from $data/drivers-cfg" ||
			fail "$f: profiles not taken from $data/drivers-cfg: $(echo "$out" | grep 'drivers from')"
		if grep -q '"driver": "tap"' "$f"; then
			echo "$out" | grep -qx "# tap steering program $data/bpf/steer_tap.bpf.o" ||
				fail "$f: BPF object not found where installed: $(echo "$out" | grep 'steering program')"
		fi
	done
	echo "installed phub-pbox --check-config: $(find "$data"/examples -name '*.json' | wc -l) examples checked"

	# An override still wins over the installed default.
	out=$(clean_env PHUB_DRIVERS_DIR="$src/drivers-cfg" "$prefix/sbin/phub-pbox" \
		-c "$data/examples/virtual-rack.json" --check-config)
	echo "$out" | grep -qx "# drivers from $src/drivers-cfg" || fail "PHUB_DRIVERS_DIR ignored"

	# phub-setup --check changes nothing and says what it would do; no PCI NICs here.
	rc=0
	out=$(clean_env "$prefix/sbin/phub-setup" --check "$data/examples/virtual-rack.json" 2>&1) ||
		rc=$?
	indent <<< "$out"
	[ "$rc" = 0 ] || fail "phub-setup --check virtual-rack.json: exit $rc"
	echo "$out" | grep -q "no PCI NICs in this configuration" || fail "phub-setup: no word on PCI NICs"
	echo "$out" | grep -q "eal.no_huge is true" || fail "phub-setup: no word on hugepages"
	# The bare-metal example names NICs this machine lacks: refused, each with what to fix.
	rc=0
	out=$(clean_env "$prefix/sbin/phub-setup" --check "$data/examples/baremetal-2nic.json" 2>&1) ||
		rc=$?
	indent <<< "$out"
	[ "$rc" = 1 ] || fail "phub-setup --check baremetal-2nic.json: exit $rc, not 1"
	echo "$out" | grep -q "ports\[0\] (nic0): no PCI device 0000:3b:00.0 on this host.*fix ports\[0\].device" ||
		fail "phub-setup: the missing NIC is not named with its fix"

	# The units, with their programs where this install put them, and their man pages.
	if ! command -v systemd-analyze >/dev/null; then
		echo "systemd-analyze not installed: unit verification skipped"
	else
		mkdir "$work/units"
		for f in "$prefix"/lib/systemd/system/*.service; do
			sed "s|$configured/sbin|$prefix/sbin|g" "$f" > "$work/units/$(basename "$f")"
		done
		cp "$work/units/phub-pbox@.service" "$work/units/phub-pbox@t.service"
		out=$(MANPATH=$prefix/share/man systemd-analyze verify \
			"$work/units/phub-pbox@t.service" 2>&1) || fail "systemd-analyze verify: exit $?"
		# verify exits 0 on many warnings: any line is one.
		[ -z "$out" ] || fail "systemd-analyze verify: $out"
		echo "systemd-analyze verify: clean"
	fi
	for f in "$prefix"/share/man/man*/*; do
		out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$f" 2>&1 >/dev/null) || fail "man $f"
		[ -z "$out" ] || fail "man $f: $out"
	done
}

# phub-setup for real on a vdev-only config with hugepages: reserve, then undo.
setup() {
	local cfg=$work/hp.json state=$work/state before after undone node out
	node=/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages
	[ -w "$node" ] || { echo "SKIP: no writable $node (root and hugetlbfs needed)"; exit 77; }
	cat > "$cfg" <<EOF
{ "eal": { "lcores": [0, 1], "memory_mb": 64, "no_huge": false, "file_prefix": "phub-setup-t" },
  "drivers_dir": "$src/drivers-cfg",
  "ports": [ { "name": "n0", "device": "net_null0", "driver": "null", "ipv4": "10.99.0.1/24",
               "mtu": 1500, "lcores": [1] } ],
  "idle": { "policy": "adaptive" },
  "checkpoint": { "dir": "$work/ckpt" } }
EOF
	before=$(cat "$node")
	out=$(PHUB_SETUP_STATE_DIR=$state "$src/scripts/phub-setup" --pbox "$build/app/pbox/phub-pbox" \
		"$cfg" 2>&1) || fail "phub-setup: exit $?"
	indent <<< "$out"
	after=$(cat "$node")
	echo "$out" | grep -q "no PCI NICs in this configuration" || fail "no word on PCI NICs"
	echo "$out" | grep -q "n0: vdev net_null0" || fail "the vdev is not reported"
	[ -d "$work/ckpt" ] || fail "checkpoint.dir not created"
	grep -q " hugetlbfs " /proc/mounts || fail "no hugetlbfs mounted after phub-setup"
	if [ "$before" -ge 32 ]; then
		[ "$after" = "$before" ] || fail "hugepages changed from $before to $after though enough"
	else
		[ "$after" = 32 ] || fail "64 MB of hugepages: 32 pages expected, $after reserved (from $before)"
		[ -f "$state/setup-hp.json" ] || fail "no state file for --undo"
	fi
	out=$(PHUB_SETUP_STATE_DIR=$state "$src/scripts/phub-setup" --undo "$cfg" 2>&1) ||
		fail "phub-setup --undo: exit $?"
	indent <<< "$out"
	undone=$(cat "$node")
	[ "$undone" = "$before" ] || fail "--undo left $undone hugepages, $before before"
	[ ! -e "$state/setup-hp.json" ] || fail "--undo left its state file"
}

# phub-setup --check against a fake two-node sysfs (PHUB_SYSFS_ROOT, which lib/config reads
# too): the NIC's node decides where the hugepages go, the IOMMU decides whether vfio-pci can.
pci() {
	local sys=$work/sys cfg=$work/pci.json out rc
	mkdir -p "$sys/bus/pci/devices/0000:3b:00.0" "$sys/bus/pci/drivers/ice" \
		"$sys/devices/system/cpu/cpu0/node0" "$sys/devices/system/cpu/cpu1/node1" \
		"$sys/kernel/iommu_groups"
	echo 1 > "$sys/bus/pci/devices/0000:3b:00.0/numa_node"
	ln -s "$sys/bus/pci/drivers/ice" "$sys/bus/pci/devices/0000:3b:00.0/driver"
	echo 0-1 > "$sys/devices/system/cpu/online"
	: > "$sys/devices/system/cpu/isolated"
	for n in 0 1; do
		mkdir -p "$sys/devices/system/node/node$n/hugepages/hugepages-2048kB"
		echo 0 > "$sys/devices/system/node/node$n/hugepages/hugepages-2048kB/nr_hugepages"
	done
	cat > "$cfg" <<JSON
{ "eal": { "lcores": [0, 1], "memory_mb": 64, "no_huge": false, "file_prefix": "phub-pci-t" },
  "drivers_dir": "$src/drivers-cfg",
  "ports": [ { "name": "nic0", "device": "0000:3b:00.0", "driver": "ice",
               "ipv4": "10.20.0.1/16", "mtu": 9000, "lcores": [1] } ],
  "idle": { "policy": "poll" } }
JSON
	# The packages' files as Debian 12 puts them: the ice PMD and the E810 DDP package.
	local root=$work/root pmds=$work/root/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0
	mkdir -p "$pmds" "$root/lib/firmware/intel/ice/ddp"
	export PHUB_SETUP_ROOT=$root
	: > "$pmds/librte_net_ice.so.23"
	# Without the DDP package: refused, naming the package that brings it.
	rc=0
	out=$(PHUB_SYSFS_ROOT=$sys "$src/scripts/phub-setup" --check \
		--pbox "$build/app/pbox/phub-pbox" "$cfg" 2>&1) || rc=$?
	[ "$rc" = 1 ] || fail "no DDP package: exit $rc, not 1"
	grep -q "nic0 (ice): no E810 DDP package in .*apt install firmware-misc-nonfree" <<< "$out" ||
		fail "no DDP package: firmware-misc-nonfree not named: $out"
	: > "$root/lib/firmware/intel/ice/ddp/ice-1.3.30.0.pkg"
	# Without the PMD: refused, naming Debian's package of it (not "bound to vfio-pci?").
	rm "$pmds/librte_net_ice.so.23"
	rc=0
	out=$(PHUB_SYSFS_ROOT=$sys "$src/scripts/phub-setup" --check \
		--pbox "$build/app/pbox/phub-pbox" "$cfg" 2>&1) || rc=$?
	[ "$rc" = 1 ] || fail "no ice PMD: exit $rc, not 1"
	grep -q "nic0 (ice): DPDK's ice PMD (librte_net_ice.so) is not installed.*apt install librte-net-ice23" <<< "$out" ||
		fail "no ice PMD: librte-net-ice23 not named: $out"
	if grep -q "no E810 DDP" <<< "$out"; then
		fail "the DDP package present is still refused"
	fi
	: > "$pmds/librte_net_ice.so.23"
	# No IOMMU group: vfio-pci is refused, with the kernel options that fix it.
	rc=0
	out=$(PHUB_SYSFS_ROOT=$sys "$src/scripts/phub-setup" --check \
		--pbox "$build/app/pbox/phub-pbox" "$cfg" 2>&1) || rc=$?
	indent <<< "$out"
	[ "$rc" = 1 ] || fail "no IOMMU: exit $rc, not 1"
	grep -q "nic0 (0000:3b:00.0): vfio-pci needs the IOMMU.*intel_iommu=on iommu=pt" <<< "$out" ||
		fail "no IOMMU: the refusal does not say what to fix"
	grep -q "would reserve 32 hugepages of 2 MB on NUMA node 1 " <<< "$out" ||
		fail "the hugepages do not go to the NIC's node 1"
	if grep -q "on NUMA node 0" <<< "$out"; then
		fail "hugepages asked on node 0, which has no port"
	fi
	grep -q "CPUs \[1\] poll .* not isolated: boot with isolcpus=1" <<< "$out" ||
		fail "the polling CPU that is not isolated is not named"
	# With an IOMMU group the NIC would be bound from ice to the profile's vfio-pci.
	mkdir "$sys/kernel/iommu_groups/12"
	rc=0
	out=$(PHUB_SYSFS_ROOT=$sys "$src/scripts/phub-setup" --check \
		--pbox "$build/app/pbox/phub-pbox" "$cfg" 2>&1) || rc=$?
	indent <<< "$out"
	[ "$rc" = 0 ] || fail "with an IOMMU: exit $rc"
	grep -q "would bind nic0 (0000:3b:00.0) from ice to vfio-pci" <<< "$out" ||
		fail "the binding to vfio-pci is not planned"
	grep -q "nic0 (ice): PMD librte_net_ice found" <<< "$out" || fail "the ice PMD not reported"
	# An mlx5 port: the verbs provider and rdma-core are named when missing.
	sed 's/"driver": "ice"/"driver": "mlx5"/' "$cfg" > "$work/mlx5.json"
	: > "$pmds/librte_net_mlx5.so.23"
	rc=0
	out=$(PHUB_SYSFS_ROOT=$sys "$src/scripts/phub-setup" --check \
		--pbox "$build/app/pbox/phub-pbox" "$work/mlx5.json" 2>&1) || rc=$?
	[ "$rc" = 1 ] || fail "mlx5 without rdma-core: exit $rc, not 1"
	grep -q "apt install ibverbs-providers rdma-core" <<< "$out" || fail "mlx5: no provider named: $out"
	grep -q "rdma-core is not installed" <<< "$out" || fail "mlx5: rdma-core not named: $out"
	unset PHUB_SETUP_ROOT
	[ "$(cat "$sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages")" = 0 ] ||
		fail "--check changed the hugepages"
}

case $mode in
destdir) destdir ;;
setup) setup ;;
pci) pci ;;
*) echo "usage: $0 destdir|setup|pci BUILD SOURCE" >&2; exit 2 ;;
esac
if [ "$fails" -ne 0 ]; then
	echo "$fails failure(s)" >&2
	exit 1
fi
echo PASS
