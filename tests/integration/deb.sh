#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The Debian packages end to end: build the .debs from a copy of the tree, install them, run
# the installed appliance with no build tree, purge them and check nothing is left.
#
#   copy of the tree --dpkg-buildpackage -b--> phub-pbox, libphub0, libphub-dev, python3-phub
#                                              .debs --lintian
#        (deleted)                                   | dpkg -i
#                                                    v
#   /usr/sbin/phub-pbox --check-config /usr/share/phub/examples/*.json
#   systemd-analyze verify phub-{pbox,exporter}@.service; phub-exporter; cc $(pkg-config ...)
#   virtual rack: /usr/sbin/phub-pbox  <--UDP-->  /usr/bin/phub-bench x2 (verified)
#                                                    | dpkg --purge
#                                                    v
#   no file of the packages, no /usr/share/phub, /var/lib/phub, /etc/phub
#
# Usage: deb.sh SOURCE_DIR VIRTUAL_RACK TEST_PBOX_RACK_PY
# Brings up a rack: run it under the rack lock. Exits 77 when it cannot run here.

set -euo pipefail

src=$(realpath "$1")
vrack=$2
rack_test=$3
work=$(mktemp -d /tmp/phub-deb.XXXXXX)
pkgs=(phub-pbox libphub0 libphub-dev python3-phub)
installed=0
fails=0

cleanup() {
	if [ "$installed" = 1 ]; then
		dpkg --purge "${pkgs[@]}" >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*" >&2
	fails=$((fails + 1))
}

if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP: installing packages needs root"
	exit 77
fi
for tool in dpkg-buildpackage dh lintian; do
	command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
for p in "${pkgs[@]}"; do
	if dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "installed"; then
		echo "SKIP: $p is installed on this machine already: not touching it"
		exit 77
	fi
done

# A copy of the tree as it is (not only what is committed), without its build directories.
mkdir "$work/src"
tar -C "$src" --exclude=./.git --exclude-tag-all=build.ninja -cf - . | tar -C "$work/src" -xf -
if ! (cd "$work/src" && nice dpkg-buildpackage -b -us -uc) > "$work/build.log" 2>&1; then
	tail -n 30 "$work/build.log"
	echo "FAIL: dpkg-buildpackage" >&2
	exit 1
fi
rm -rf "$work/src"
debs=()
for p in "${pkgs[@]}"; do
	debs+=("$work/${p}_"*.deb)	# ${p}_: not ${p}-dbgsym_
done
echo "built: $(cd "$work" && find . -maxdepth 1 -name '*.deb' | tr '\n' ' ')"

# Lintian: clean but for the tags debian/*.lintian-overrides explain.
lint=$(lintian --fail-on error,warning "$work"/*.changes 2>&1) || fail "lintian: $lint"
if grep -qv 'running with root privileges' <<< "$lint"; then
	echo "lintian: $lint"
fi

dpkg -i "${debs[@]}" > "$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }
installed=1
dpkg -L "${pkgs[@]}" | sort -u > "$work/files"

# The installed programs, away from any tree and with no PHUB_* variable.
for f in /usr/share/phub/examples/*.json; do
	out=$(cd / && env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin /usr/sbin/phub-pbox -c "$f" \
		--check-config) || fail "installed phub-pbox --check-config $f"
	grep -qx "# drivers from /usr/share/phub/drivers-cfg" <<< "$out" ||
		fail "$f: profiles not from /usr/share/phub/drivers-cfg"
	if grep -q '"driver": "tap"' "$f"; then
		grep -qx "# tap steering program /usr/share/phub/bpf/steer_tap.bpf.o" <<< "$out" ||
			fail "$f: BPF object not found where installed"
	fi
done
out=$(cd / && env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin phub-setup --check \
	/usr/share/phub/examples/virtual-rack.json 2>&1) || fail "installed phub-setup --check: $out"
grep -q "no PCI NICs in this configuration" <<< "$out" || fail "phub-setup: $out"
if command -v systemd-analyze >/dev/null; then
	for unit in phub-pbox@.service phub-exporter@.service; do
		out=$(systemd-analyze verify "/lib/systemd/system/$unit" 2>&1) ||
			fail "systemd-analyze verify $unit: exit $?"
		[ -z "$out" ] || fail "systemd-analyze verify $unit: $out"
	done
fi
# The exporter and its monitoring files where the docs say they are.
if /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null; then
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin phub-exporter --list-metrics |
		grep -qx phub_pushes_total || fail "installed phub-exporter --list-metrics"
fi
for f in phub-alerts.yml phub-dashboard.json; do
	[ -f "/usr/share/phub/monitoring/$f" ] || fail "no /usr/share/phub/monitoring/$f"
done

# libphub-dev: a program built against the installed header and pkg-config file.
cat > "$work/w.c" <<'EOF'
#include <phub.h>
#include <stdio.h>

int
main(void)
{
	/* Resolved from libphub.so.0 at load time: the program runs only if it is there. */
	const char *(*f)(const struct phub *) = phub_last_error;

	printf("%s\n", f != NULL ? "linked" : "unlinked");
	return 0;
}
EOF
# shellcheck disable=SC2046 # pkg-config prints several words on purpose
cc -o "$work/w" "$work/w.c" $(pkg-config --cflags --libs phub) || fail "cc against libphub-dev"
[ "$("$work/w")" = linked ] || fail "the program against libphub.so.0 did not run"
# ldd's output taken whole first: grep -q leaves at its match, and the loader still writing the
# lines after it would die of SIGPIPE, which pipefail reports as a failure (seen once in CI).
out=$(ldd "$work/w")
grep -Eq "libphub.so.0 => (/usr)?/lib/" <<< "$out" ||
	fail "not linked to the installed libphub.so.0: $out"

# python3-phub: the installed package finds the installed libphub.so.0, away from any tree.
out=$(cd / && env -i PATH=/usr/bin:/bin /usr/bin/python3 -c \
	'import phub, phub._lib as l; print(phub.__file__); print(l.load()._name)' 2>&1) ||
	fail "import phub from python3-phub: $out"
grep -qx "/usr/lib/python3/dist-packages/phub/__init__.py" <<< "$(head -n 1 <<< "$out")" ||
	fail "phub not imported from the package: $out"
grep -qx "libphub.so.0" <<< "$(tail -n 1 <<< "$out")" || fail "phub did not load libphub.so.0: $out"

# The installed appliance in the virtual rack against the installed phub-bench, verified.
PHUB_VRACK=$vrack PHUB_PBOX=/usr/sbin/phub-pbox PHUB_BENCH=/usr/bin/phub-bench \
	PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -q -s -p no:cacheprovider \
	"$rack_test::test_workers[2]" ||
	fail "virtual rack with the installed phub-pbox and phub-bench"

dpkg --purge "${pkgs[@]}" > "$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "purge"; }
installed=0
while read -r f; do
	[ "$f" = /. ] && continue
	if [ -e "$f" ] && [ ! -d "$f" ]; then
		fail "left after purge: $f"
	fi
done < "$work/files"
for d in /usr/share/phub /usr/share/doc/phub-pbox /var/lib/phub /etc/phub /run/phub; do
	[ ! -e "$d" ] || fail "left after purge: $d"
done
for p in "${pkgs[@]}"; do
	! dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "installed" ||
		fail "$p still known to dpkg"
done
if [ "$fails" -ne 0 ]; then
	echo "$fails failure(s)" >&2
	exit 1
fi
echo PASS
