# SPDX-License-Identifier: BSD-3-Clause
# shellcheck shell=bash
# What the benchmarks say about the machine's CPUs beside their figures: how busy they were
# while a run ran, and what a wake-up costs here. Sourced, never run; needs PHUB_ROOT.

# cpu_stat: the machine's CPU time so far in clock ticks, "busy total" (/proc/stat; busy counts
# interrupts and steal, idle counts iowait), so that a run's line says how busy the CPUs were
# while it ran: where they are all busy, the CPUs bind before the links do.
cpu_stat()
{
	local _ u n s i w x y z
	read -r _ u n s i w x y z _ </proc/stat
	echo "$((u + n + s + x + y + z)) $((u + n + s + i + w + x + y + z))"
}

# cpu_busy BEFORE: the share of the machine's CPU time that was busy since cpu_stat said BEFORE.
cpu_busy()
{
	local b0 t0 b1 t1
	read -r b0 t0 <<<"$1"
	read -r b1 t1 <<<"$(cpu_stat)"
	awk -v b="$((b1 - b0))" -v t="$((t1 - t0))" 'BEGIN { printf "%.2f", (t > 0 ? b / t : 0) }'
}

# sleep_cost: what a sleep of 1 us costs this machine (python/bench/cpu_window.py sleep-cost),
# as words: the PBoxes' idle sleeps and libphub's ppoll pay it at every wake-up, and where it
# is dear the CPUs bind sooner (docs/hierarchy.md).
sleep_cost()
{
	/usr/bin/python3 "$PHUB_ROOT/python/bench/cpu_window.py" sleep-cost |
		/usr/bin/python3 -c 'import json, sys; c = json.load(sys.stdin)
print("%.0f us of wall time, %.1f us of CPU" % (c["wall_us"], c["cpu_us"]))'
}
