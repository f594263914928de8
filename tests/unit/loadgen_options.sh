#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# phub-loadgen refuses bad options before it touches a port: exit status 2 and a message that
# names the option (or the conflict), for each case below.
#
# Usage: loadgen_options.sh PHUB_LOADGEN

set -euo pipefail

loadgen=$1
prefix=lgopt-$$
trap 'rm -rf "/var/run/dpdk/$prefix" "${XDG_RUNTIME_DIR:-/nonexistent}/dpdk/$prefix"' EXIT
failed=0

# $1: the expected message (fixed string); the rest: phub-loadgen's options.
expect()
{
	local want=$1 out rc=0

	shift
	out=$(timeout 30 "$loadgen" -l 0 --no-huge --no-pci -m 64 --file-prefix "$prefix" \
		--log-level=lib.eal:error -- "$@" 2>&1) || rc=$?
	if ((rc != 2)) || ! grep -qF -- "$want" <<< "$out"; then
		echo "FAIL: phub-loadgen $*: exit $rc, want 2 and '$want'; got:"
		grep -v '^ \|^$' <<< "$out" | head -5
		failed=1
		return
	fi
	echo "PASS: phub-loadgen $*: $want"
}

expect "bad value for --bulk-workers: '65'" --bulk-workers 65
expect "bad value for --bulk-workers: 'two'" --bulk-workers=two
expect "bad value for --bulk-priority: '256'" --bulk-priority 256
expect "bad value for --priority: '-1'" --priority -1
expect "bad value for --bulk-window: 'x'" --bulk-window x
expect "bad value for -w: '0'" -w 0
expect "--bulk-workers runs a second job: not with --blast" --bulk-workers 2 --blast
expect "with --bulk-workers the second job's ports start at 65514" --bulk-workers 1 \
	--worker-port 65450
exit "$failed"
