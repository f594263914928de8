#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The man pages stay true to --help: every long option a program prints is in its man page.
#
# Usage: man_options.sh MAN_PAGE PROGRAM [ARGS...]   (ARGS: how to get the help text)

set -euo pipefail

page=$1
shift
help=$("$@" 2>&1 || true)
text=$(LC_ALL=C.UTF-8 MANWIDTH=200 man -l "$page" 2>/dev/null)
opts=$(grep -oE -- '--[a-z][a-z0-9-]+' <<< "$help" | sort -u)
[ -n "$opts" ] || { echo "FAIL: no option in the help of $*"; exit 1; }
missing=0
for o in $opts; do
	if ! grep -qF -- "$o" <<< "$text"; then
		echo "FAIL: $o (in $* --help) is not in $(basename "$page")"
		missing=1
	fi
done
[ "$missing" = 0 ] && echo "PASS: $(wc -w <<< "$opts") options of $* are in $(basename "$page")"
exit "$missing"
