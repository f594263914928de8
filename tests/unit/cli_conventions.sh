#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The command-line conventions of docs/index.md hold for every binary and script: --help exits
# 0 with a "usage:" line and no line of shell source, --version prints "NAME VERSION" with the
# tree's VERSION file, and each deprecated spelling still works and says so on stderr.
#
# Usage: cli_conventions.sh SOURCE_ROOT [NAME=PATH...]   (the built binaries; absent: not built)

set -uo pipefail

root=$1
shift
version=$(cat "$root/VERSION")
tmp=$(mktemp -d)
prefix=clitest-$$
trap 'rm -rf "$tmp" "/var/run/dpdk/$prefix" "${XDG_RUNTIME_DIR:-/nonexistent}/dpdk/$prefix"' EXIT
failed=0

fail()
{
	echo "FAIL: $*"
	failed=1
}

# check_prog NAME CMD...: --help and --version of CMD.
check_prog()
{
	local name=$1 rc out
	shift

	rc=0
	timeout 30 "$@" --help >"$tmp/help" 2>"$tmp/help.err" || rc=$?
	if ((rc != 0)); then
		fail "$name --help: exit $rc"
		head -3 "$tmp/help.err"
	elif ! grep -qi '^usage:' "$tmp/help"; then
		fail "$name --help: no line starting with 'usage:'"
	elif grep -nE '^[[:space:]]*#|\$\(|;;|^[[:space:]]*(set -|esac|fi$|done$)' "$tmp/help" \
			>"$tmp/code"; then
		fail "$name --help prints source code:"
		head -3 "$tmp/code"
	else
		echo "PASS: $name --help ($(wc -l <"$tmp/help") lines)"
	fi
	rc=0
	out=$(timeout 30 "$@" --version 2>&1) || rc=$?
	if ((rc != 0)) || [ "$out" != "$name $version" ]; then
		fail "$name --version: exit $rc, printed '$out', want '$name $version'"
	else
		echo "PASS: $name --version: $out"
	fi
}

# check_alias WHAT WANT_RC OLD NEW CMD...: CMD (with the old spelling OLD in it) exits WANT_RC
# and says on stderr that OLD is deprecated and to use NEW.
check_alias()
{
	local what=$1 want_rc=$2 old=$3 new=$4 rc=0
	shift 4

	timeout 60 "$@" >"$tmp/alias.out" 2>"$tmp/alias.err" || rc=$?
	if ((rc != want_rc)); then
		fail "$what: exit $rc, want $want_rc"
		head -5 "$tmp/alias.err"
	elif ! grep -qF -- "$old is deprecated: use $new" "$tmp/alias.err"; then
		fail "$what: no '$old is deprecated: use $new' on stderr"
		head -5 "$tmp/alias.err"
	else
		echo "PASS: $what: $old still works and says to use $new"
	fi
}

# check_quiet WHAT WANT_RC CMD...: the canonical spelling, no deprecation line.
check_quiet()
{
	local what=$1 want_rc=$2 rc=0
	shift 2

	timeout 60 "$@" >"$tmp/q.out" 2>"$tmp/q.err" || rc=$?
	if ((rc != want_rc)); then
		fail "$what: exit $rc, want $want_rc"
		head -5 "$tmp/q.err"
	elif grep -q deprecated "$tmp/q.err"; then
		fail "$what: a canonical spelling warned: $(grep deprecated "$tmp/q.err")"
	else
		echo "PASS: $what: canonical spelling, no warning"
	fi
}

declare -A bin=()
for a in "$@"; do
	bin[${a%%=*}]=${a#*=}
done

# The binaries (those built here).
for name in phub-pbox phub-bench phub-plan phub-loadgen; do
	if [ -n "${bin[$name]:-}" ]; then
		check_prog "$name" "${bin[$name]}"
	else
		echo "SKIP: $name is not built here"
	fi
done
# phub-loadgen answers --help and --version before EAL, even after EAL options.
if [ -n "${bin[phub-loadgen]:-}" ]; then
	lg=${bin[phub-loadgen]}
	check_prog phub-loadgen "$lg" -l 0 --no-huge --no-pci --file-prefix "$prefix"
	eal=(-l 0 --no-huge --no-pci -m 64 --file-prefix "$prefix" --log-level=lib.eal:error --)
	# No port 7: options parsed (exit 1, not 2 for bad options), then the port refused.
	for o in "--pbox-ip 10.1.0.1|--server" "--window 4|--window-segments" \
		"--bulk-window 8|--bulk-window-segments" "--base-port 47000|--port"; do
		read -ra words <<<"${o%|*}"
		check_alias "phub-loadgen ${o%|*}" 1 "${words[0]}" "${o#*|}" \
			"$lg" "${eal[@]}" --dpdk-port 7 "${words[@]}"
	done
	check_quiet "phub-loadgen --server --window-segments --bulk-window-segments" 1 \
		"$lg" "${eal[@]}" --dpdk-port 7 --server 10.1.0.1 --window-segments 4 \
		--bulk-window-segments 8
fi
if [ -n "${bin[phub-bench]:-}" ]; then
	# The old --racks reaches the parser of --servers: its error names --servers.
	check_alias "phub-bench --racks" 2 --racks --servers \
		"${bin[phub-bench]}" --racks 127.0.0.1:0 --keys 1 --key-elems 10
	grep -qF -- "--servers: rack 0: ranks '0'" "$tmp/alias.err" ||
		fail "phub-bench --racks 127.0.0.1:0 did not reach --servers' parser"
	check_alias "phub-bench --racks --print-layout" 0 --racks --servers \
		"${bin[phub-bench]}" --racks 127.0.0.1:1 --keys 1 --key-elems 10 --print-layout
	check_quiet "phub-bench --servers --print-layout" 0 \
		"${bin[phub-bench]}" --servers 127.0.0.1:1 --keys 1 --key-elems 10 --print-layout
fi

# The scripts, from the tree.
check_prog phub-exporter /usr/bin/python3 "$root/app/phub-exporter/phub-exporter"
check_prog phub-setup /usr/bin/python3 "$root/scripts/phub-setup"
for s in bench-e2e bench-faults bench-figures bench-gloo bench-jobs bench-link \
	bench-packet-path bench-ring bench-torch demo setup.sh test virtual-rack; do
	check_prog "$s" bash "$root/scripts/$s"
done
# Deprecated spellings of scripts: parsed before --version, which then ends the run.
check_alias "bench-ring --build-dir" 0 --build-dir --build \
	bash "$root/scripts/bench-ring" --build-dir "$tmp" --version
check_alias "bench-figures --build-dir" 0 --build-dir --build \
	bash "$root/scripts/bench-figures" --build-dir "$tmp" --version
check_alias "bench-packet-path --build-dir" 0 --build-dir --build \
	bash "$root/scripts/bench-packet-path" --build-dir "$tmp" --version
check_alias "bench-packet-path --p3-window" 0 --p3-window --p3-window-segments \
	bash "$root/scripts/bench-packet-path" --p3-window 4 --version
check_alias "bench-packet-path --p3-bulk-window" 0 --p3-bulk-window --p3-bulk-window-segments \
	bash "$root/scripts/bench-packet-path" --p3-bulk-window 4 --version
check_alias "bench-gloo --rack" 0 --rack --name \
	bash "$root/scripts/bench-gloo" --rack x --version
check_alias "bench-jobs --rack" 0 --rack --name \
	bash "$root/scripts/bench-jobs" --rack x --version
check_quiet "bench-gloo --name" 0 bash "$root/scripts/bench-gloo" --name x --version
check_quiet "bench-jobs --name" 0 bash "$root/scripts/bench-jobs" --name x --version
for s in bench-ring bench-figures bench-packet-path bench-faults bench-jobs bench-e2e \
	bench-link bench-torch; do
	check_quiet "$s --build" 0 bash "$root/scripts/$s" --build "$tmp" --version
done
exit "$failed"
