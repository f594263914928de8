# SPDX-License-Identifier: BSD-3-Clause
"""The PBox configuration (docs/config.md) of one virtual rack, as scripts/virtual-rack writes it.

Rack ID's PBox has one DPDK port per veth pv<p> (tap: a net_tap on pt<p>), address
10.ID.0.(1+p); a rack of a multi-rack has one more, "uplink", on the spine. The values below
are the virtual rack's, not the PBox's defaults: what the rack's tests and benchmarks assume.
"""

import json
import os

UDP_BASE_PORT = 47000
CHUNK_BYTES = 32768
# DPDK 22.11's net_tap drops frames above 1522 bytes on transmit: its ports carry MTU 1500
# datagrams whatever MTU the rack's links have.
TAP_MAX_MTU = 1500
# What an af_xdp port receives: its UMEM chunk (one mbuf, at most a 4 KB page) holds 512
# bytes of mbuf header and headrooms before the frame; larger frames are dropped by the kernel.
AF_XDP_MAX_PORT_MTU = 3442
DRIVERS = ("tap", "af_packet", "af_xdp")
UPLINK_PORT = "uplink"


def key_segments(elems, seg_elems=352, chunk_segments=23):
    """The segments of a key of ELEMS elements (docs/layout.md): chunks of CHUNK_SEGMENTS
    segments of SEG_ELEMS elements, the last segment of each chunk short. The defaults are
    the rack's fp32 at MTU 1500: 352 elements a segment, 23 segments (8096 elements) in a
    chunk of CHUNK_BYTES."""
    chunk = seg_elems * chunk_segments
    return sum(-(-min(chunk, elems - o) // seg_elems) for o in range(0, elems, chunk))


class RackConfigError(ValueError):
    """A rack the config writer refuses; str() says why."""


def eal_lcores(lcores, ncpu):
    """lcores 0 .. L; an id beyond the machine's CPUs is pinned to one that exists ("N@C",
    EAL's --lcores syntax), so a rack of more lcores than CPUs still starts."""
    return [i if i < ncpu else "%d@%d" % (i, i % ncpu) for i in range(lcores + 1)]


def port_mtu(driver, mtu):
    """The MTU of the PBox's DPDK ports: the links' MTU within what the driver can carry."""
    if driver == "tap":
        return min(mtu, TAP_MAX_MTU)
    if driver == "af_xdp":
        return min(mtu, AF_XDP_MAX_PORT_MTU)
    return mtu


def port_entry(driver, p, lcores):
    """Port p's device string and data lcores. af_packet and af_xdp: one queue pair, one
    lcore each (port p on lcore p+1); tap's queues are shared by every data lcore."""
    if driver == "tap":
        return "net_tap%d,iface=pt%d" % (p, p), list(range(1, lcores + 1))
    if driver == "af_packet":
        return ("net_af_packet%d,iface=pv%d,blocksz=16384,framesz=16384,framecnt=512,"
                "qpairs=1" % (p, p)), [p + 1]
    return "net_af_xdp%d,iface=pv%d,start_queue=0,queue_count=1" % (p, p), [p + 1]


def pbox_config(rack, rack_id, ports, lcores, mtu, driver, memory_mb, ckpt_dir,
                ckpt_interval, uplink=None, ncpu=None):
    """Rack RACK's PBox config as a dict. UPLINK (a multi-rack's rack): the PBox's address on
    the spine, served by one more port, "uplink", on veth pv<PORTS>; with af_packet and
    af_xdp the first data lcore serves it too."""
    if driver not in DRIVERS:
        raise RackConfigError("driver '%s': one of %s" % (driver, ", ".join(DRIVERS)))
    if not 1 <= rack_id <= 254:
        raise RackConfigError("rack id %d: 1..254" % rack_id)
    if ports < 1 or lcores < 1:
        raise RackConfigError("a rack has at least one port and one data lcore")
    if driver != "tap" and lcores < ports:
        raise RackConfigError("%s: one data lcore per port (%d ports, %d lcores)"
                              % (driver, ports, lcores))
    ncpu = ncpu or os.cpu_count() or 1
    entries = []
    for p in range(ports + (1 if uplink else 0)):
        device, port_lcores = port_entry(driver, p, lcores)
        name, addr = "p%d" % p, "10.%d.0.%d/24" % (rack_id, p + 1)
        if p == ports:
            name, addr = UPLINK_PORT, "%s/24" % uplink
            if driver != "tap":
                port_lcores = [1]
        entries.append({"name": name, "device": device, "driver": driver, "ipv4": addr,
                        "mtu": port_mtu(driver, mtu), "rx_desc": 1024, "tx_desc": 1024,
                        "lcores": port_lcores})
    return {
        "eal": {"lcores": eal_lcores(lcores, ncpu), "main_lcore": 0, "memory_mb": memory_mb,
                "no_huge": True, "file_prefix": "phub-%s" % rack, "extra_args": []},
        "ports": entries,
        "udp_base_port": UDP_BASE_PORT,
        "chunk_bytes": CHUNK_BYTES,
        "idle": {"policy": "adaptive", "spin_polls": 64, "max_sleep_us": 200},
        "jobs": [],
        # The rack's own checkpoints: another rack's jobs never come back here.
        "checkpoint": {"dir": ckpt_dir, "interval_iterations": ckpt_interval},
        "telemetry": {"enabled": True},
    }


def write(path, config):
    """Write the config to PATH whole or not at all (a PBox never reads half a file)."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
