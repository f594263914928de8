#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Shared set-up of README's two commands: install what is missing, configure, build.
#
# usage: scripts/setup.sh [BUILD_DIR [meson options...]]    (BUILD_DIR: default build)
#        scripts/setup.sh --help | --version
# or source it (". scripts/setup.sh") and call phub_setup BUILD_DIR [meson options...].
# Idempotent and quiet when everything is already there.

PHUB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Debian 12 packages: toolchain, the libraries named in meson.build, and the
# tools the demo and tests drive (iproute2 for namespaces, python3 for
# dpdk-telemetry.py and the summaries; debhelper, dpkg-dev and lintian for the packages,
# systemd for systemd-analyze verify, man-db for the man pages; torch and the rest for the
# Python binding's tests and examples; venv, setuptools and wheel for its pip install test;
# prometheus and its Python client for phub-exporter and its tests).
PHUB_PACKAGES=(
	build-essential pkg-config meson ninja-build clang llvm
	dpdk dpdk-dev libdpdk-dev libnuma-dev libbpf-dev libxdp-dev
	libjansson-dev libsodium-dev libssl-dev check
	python3 iproute2 procps ethtool shellcheck
	python3-torch python3-torchvision python3-sklearn python3-pytest python3-matplotlib
	python3-numpy python3-venv python3-setuptools python3-wheel
	debhelper dpkg-dev lintian systemd man-db
	prometheus python3-prometheus-client
)

phub_log()
{
	printf '[phub] %s\n' "$*" >&2
}

phub_install_packages()
{
	local missing=() pkg
	for pkg in "${PHUB_PACKAGES[@]}"; do
		if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; then
			missing+=("$pkg")
		fi
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		phub_log "missing packages: ${missing[*]}; run as root or install them first"
		return 1
	fi
	phub_log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null || { phub_log "apt-get update failed"; return 1; }
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		{ phub_log "apt-get install ${missing[*]} failed"; return 1; }
}

# phub_build DIR [meson options...]: configure DIR once, then build it.
phub_build()
{
	local dir=$1
	shift
	if [ ! -f "$PHUB_ROOT/$dir/build.ninja" ]; then
		phub_log "configuring $dir $*"
		meson setup "$PHUB_ROOT/$dir" "$PHUB_ROOT" "$@" >"$PHUB_ROOT/$dir.setup.log" 2>&1 ||
			{ cat "$PHUB_ROOT/$dir.setup.log" >&2; phub_log "meson setup $dir failed"; return 1; }
	fi
	phub_log "building $dir"
	ninja -C "$PHUB_ROOT/$dir" >"$PHUB_ROOT/$dir.build.log" 2>&1 ||
		{ tail -n 60 "$PHUB_ROOT/$dir.build.log" >&2; phub_log "build of $dir failed"; return 1; }
}

phub_setup()
{
	phub_install_packages || return 1
	phub_build "$@"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -euo pipefail
	# shellcheck source=scripts/cli.sh
	. "$PHUB_ROOT/scripts/cli.sh"
	case ${1:-} in
	-h | --help) cli_help "$0"; exit 0 ;;
	--version) cli_version setup.sh; exit 0 ;;
	esac
	phub_setup "${1:-build}" "${@:2}"
fi
