#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Every relative link of README.md and docs/**/*.md names a file or folder of the tree, and none
# leads outside it (docs never point outside the tree).
#
# Usage: docs_links.sh SOURCE_DIR

set -euo pipefail

src=$(realpath "$1")
fails=0 links=0

while IFS= read -r md; do
	dir=$(dirname "$md")
	# Inline links [text](target); code spans may hold look-alikes, so drop them first.
	# shellcheck disable=SC2016 # the backquotes are sed's, not the shell's
	while IFS= read -r target; do
		target=${target%%#*}
		case $target in
		'' | http://* | https://* | mailto:*) continue ;;
		esac
		links=$((links + 1))
		if [[ $target == /* ]]; then
			echo "FAIL: ${md#"$src"/}: absolute link $target" >&2
			fails=$((fails + 1))
			continue
		fi
		path=$(realpath -m "$dir/$target")
		if [[ $path != "$src" && $path != "$src"/* ]]; then
			echo "FAIL: ${md#"$src"/}: $target leads outside the tree" >&2
			fails=$((fails + 1))
		elif [ ! -e "$path" ]; then
			echo "FAIL: ${md#"$src"/}: $target does not exist" >&2
			fails=$((fails + 1))
		fi
	done < <(sed 's/`[^`]*`//g' "$md" | grep -o '\]([^)[:space:]]*)' | sed 's/^](//; s/)$//' || true)
done < <(find "$src/README.md" "$src/docs" -name '*.md' | sort)

echo "$links relative links checked, $fails broken"
[ "$fails" -eq 0 ]
