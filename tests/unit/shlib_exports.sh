#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# libphub.so.0 exports exactly the functions phub.h declares, under its soname.
#   shlib_exports.sh LIBPHUB_SO PHUB_H
set -euo pipefail
so=$1
hdr=$2

soname=$(objdump -p "$so" | awk '$1 == "SONAME" { print $2 }')
if [ "$soname" != "libphub.so.0" ]; then
	echo "soname is '$soname', not libphub.so.0" >&2
	exit 1
fi
# Function declarations in phub.h: a line starting with a type, then "phub_name(".
declared=$(grep -oE '^[a-z].*[ *]phub_[a-z_]+\(' "$hdr" | grep -v 'static inline' |
	grep -oE 'phub_[a-z_]+\($' | tr -d '(' | sort -u)
exported=$(nm -D --defined-only "$so" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' |
	sort -u)
if [ "$declared" != "$exported" ]; then
	echo "phub.h declares:" >&2
	echo "$declared" >&2
	echo "libphub.so exports:" >&2
	echo "$exported" >&2
	exit 1
fi
echo "libphub.so.0 exports the $(echo "$exported" | wc -l) functions of phub.h"
