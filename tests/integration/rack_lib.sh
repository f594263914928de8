# SPDX-License-Identifier: BSD-3-Clause
# shellcheck shell=bash disable=SC2154 # vrack, pbox_bin, bench_bin: the sourcing script's
# What the fault, tenant and soak tests share: one virtual rack per scenario with phub-pbox in it,
# phub-bench runs in the workers' namespaces, reports checked with Python conditions, telemetry
# read with dpdk-telemetry.py, and counters of the workers' kernels. Sourced, not run.
#
# The caller sets vrack, pbox_bin, bench_bin and calls lib_init SEED first; lib_init picks the
# rack's name and id from SEED (so that scenarios never meet), makes $tmp, and sets the EXIT trap.

failed=0
pbox_args=()
bench_pids=()
python_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../python" && pwd)

# phubrack COMMAND ARGS...: the Python these tests need, python/phubrack (its __main__.py
# lists the commands).
phubrack()
{
	PYTHONPATH=$python_dir PYTHONDONTWRITEBYTECODE=1 python3 -m phubrack "$@"
}

# shellcheck disable=SC2317 # called by the EXIT trap
lib_cleanup()
{
	local pid
	for pid in "${bench_pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null
	done
	"$vrack" down --name "$rack" >/dev/null 2>&1
	rm -f /run/netns/"$rack"-j*
	rm -rf "$tmp"
}

# lib_init SEED: rack name and id, server address, scratch directory, cleanup trap; skips (77)
# where the rack cannot run.
lib_init()
{
	if [ "$(id -u)" -ne 0 ]; then
		echo "SKIP: the virtual rack needs root (network namespaces)"
		exit 77
	fi
	if [ ! -c /dev/net/tun ]; then
		echo "SKIP: no /dev/net/tun for net_tap"
		exit 77
	fi
	id=$(( (16#$(printf '%s' "$1" | md5sum | cut -c1-4) % 100) + 150 ))
	rack="pf$id"
	server="10.$id.0.1"
	tmp=$(mktemp -d)
	trap lib_cleanup EXIT
}

fail()
{
	echo "FAIL: $*"
	failed=1
}

# rack_up WORKERS [virtual-rack up options...]: bring up the rack; if the function
# edit_config is defined it may change $tmp/pbox.json first; then start the PBox.
rack_up()
{
	local workers=$1
	shift
	"$vrack" down --name "$rack" >/dev/null 2>&1
	"$vrack" up --name "$rack" --id "$id" --workers "$workers" --config "$tmp/pbox.json" "$@" \
		>"$tmp/up.log" 2>&1 ||
		{ cat "$tmp/up.log"; echo "FAIL: the rack did not come up"; exit 1; }
	if declare -F edit_config >/dev/null; then
		edit_config "$tmp/pbox.json" || { echo "FAIL: editing the config"; exit 1; }
	fi
	"$vrack" pbox-start --name "$rack" --bin "$pbox_bin" -- "${pbox_args[@]}" \
		>"$tmp/pbox-start.log" 2>&1 ||
		{ cat "$tmp/pbox-start.log"; echo "FAIL: the PBox did not start"; exit 1; }
}

# rack_down_check: the PBox stops on SIGTERM and logged its clean stop and no error.
rack_down_check()
{
	"$vrack" pbox-stop --name "$rack" >/dev/null 2>&1 || fail "the PBox did not stop on SIGTERM"
	grep -q 'phub.pbox: stopped:' "/run/phub-vrack/$rack/pbox.log" ||
		fail "the PBox did not log its clean stop"
	if [ "$failed" -ne 0 ]; then
		echo "the PBox's log ends with:"
		grep -v 'lcore [0-9]*: serving' "/run/phub-vrack/$rack/pbox.log" | tail -n 20
	fi
}

# netns_alias PREFIX W1 W2 ...: /run/netns/<PREFIX>1 -> the rack's worker W1, and so on, so
# that a phub-bench with --netns-prefix PREFIX puts its rank i in worker W(i+1)'s namespace.
netns_alias()
{
	local prefix=$1 i=1 w
	shift
	for w in "$@"; do
		ln -sf "/run/netns/$rack-w$w" "/run/netns/$prefix$i"
		i=$((i + 1))
	done
}

# bench OUT WORKERS PREFIX [phub-bench options...]: run a job's workers in the foreground
# (ranks in namespaces PREFIX1, PREFIX2, ...), the JSON report in OUT, stderr in OUT.err.
# The initial-model round is an exchange too: under 20% loss its unluckiest segment can take
# more than libphub's default 10 s, so joining may take up to a minute.
bench()
{
	local out=$1 workers=$2 prefix=$3
	shift 3
	timeout 200 "$bench_bin" --server "$server" --workers "$workers" --netns-prefix "$prefix" \
		--json --quiet --timeout 100 --connect-timeout-ms 60000 "$@" >"$out" 2>"$out.err"
	local rc=$?
	if [ $rc -ne 0 ]; then
		fail "phub-bench $* exited $rc"
		tail -n 5 "$out.err"
	fi
	return $rc
}

# bench_bg OUT WORKERS PREFIX [options...]: the same in the background; bench_wait collects.
bench_bg()
{
	local out=$1 workers=$2 prefix=$3
	shift 3
	timeout 200 "$bench_bin" --server "$server" --workers "$workers" --netns-prefix "$prefix" \
		--json --quiet --timeout 100 --connect-timeout-ms 60000 "$@" >"$out" 2>"$out.err" &
	bench_pids+=($!)
	printf '%s %s\n' "$!" "$out" >>"$tmp/bg"
}

# bench_wait: wait for every background phub-bench; each must exit 0.
bench_wait()
{
	local pid out
	[ -f "$tmp/bg" ] || return 0
	while read -r pid out; do
		if ! wait "$pid"; then
			fail "phub-bench for $out failed"
			tail -n 5 "$out.err"
		fi
	done <"$tmp/bg"
	rm -f "$tmp/bg"
	bench_pids=()
}

# expect OUT PYTHON-CONDITION...: conditions on the report r.
expect()
{
	phubrack expect "$@" || fail "report $1 does not hold: ${*:2}"
}

# exact OUT...: each report verified byte for byte.
exact()
{
	local out
	for out in "$@"; do
		expect "$out" 'r["verified"]' 'r["bitwise"]'
	done
}

# telemetry OUT COMMAND...: the PBox's answers, merged into one JSON object in OUT.
telemetry()
{
	local out=$1
	shift
	printf '%s\n' "$@" | ip netns exec "$rack-pbox" dpdk-telemetry.py -f "phub-$rack" \
		2>/dev/null | phubrack merge "$out"
}

# link_tx_packets W: frames worker W's eth0 sent. Each datagram of a UDP GSO message counts
# (UDP OutDatagrams would count the message once), before the link's impairment drops any:
# the rack's BPF fallback loses them at the ToR's end. With sch_netem (a qdisc on eth0) the
# count is after netem's loss.
link_tx_packets()
{
	ip netns exec "$rack-w$1" cat /sys/class/net/eth0/statistics/tx_packets
}

# udp_in_csum_errors W: datagrams worker W's kernel dropped for a bad UDP checksum.
udp_in_csum_errors()
{
	# shellcheck disable=SC2016 # awk's fields
	ip netns exec "$rack-w$1" awk '/^Udp:/ { if (n++) print $8 }' /proc/net/snmp
}

# pin_arp W...: make each worker's neighbour entry for the PBox permanent (after a clean run
# has resolved it), so that an impaired link loses datagrams and not ARP replies.
pin_arp()
{
	local w mac
	for w in "$@"; do
		mac=$(ip -n "$rack-w$w" neigh show "$server" | awk '{ for (i = 1; i < NF; i++)
			if ($i == "lladdr") print $(i + 1) }')
		[ -n "$mac" ] || { fail "worker $w has no neighbour entry for $server"; continue; }
		ip -n "$rack-w$w" neigh replace "$server" lladdr "$mac" dev eth0 nud permanent
	done
}

# summary LABEL OUT: one line of the report's figures, for the log and the docs.
summary()
{
	phubrack summary "$1" "$2"
}
