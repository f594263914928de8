# SPDX-License-Identifier: BSD-3-Clause
# shellcheck shell=bash
# What every script's command line shares (docs/index.md "Command-line conventions"): --help
# from the script's header comment, --version, and the warning of a deprecated spelling.
# Sourced, never run.

# cli_help FILE: the header comment of FILE from line 3 (after the shebang and SPDX lines) up to
# its first line of code, without the comment marks: the help text is written once, above the
# code, and never shows a line of code.
cli_help()
{
	sed -n '3,${/^#/!q;s/^# \{0,1\}//;p;}' "$1"
}

# cli_version PROG: "PROG VERSION", the tree's VERSION file (the binaries' PHUB_VERSION).
cli_version()
{
	printf '%s %s\n' "$1" "$(cat "$(dirname "${BASH_SOURCE[0]}")/../VERSION")"
}

# cli_deprecated PROG OLD NEW: one line on stderr; the old spelling still works.
cli_deprecated()
{
	echo "$1: $2 is deprecated: use $3" >&2
}
