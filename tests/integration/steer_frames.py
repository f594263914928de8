#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The raw frames of the tap steering test (test_steer_tap.py), written on a worker's eth0 by
a packet socket: VLAN-tagged UDP (802.1Q, and 802.1ad + 802.1Q) to every data port, ARP, ICMP
and IPv6 frames (the machine has no 802.1Q module and no ping).

usage: steer_frames.py MAC DST_IP BASE QUEUES COUNT
"""

import socket
import struct
import sys

from phub_frames import csum16 as csum


def main(argv):
    mac, dst_ip = argv[0], argv[1]
    base, queues, count = map(int, argv[2:5])
    dst = bytes.fromhex(mac.replace(":", ""))
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind(("eth0", 0))
    src = s.getsockname()[4]
    src_ip = socket.inet_aton(dst_ip.rsplit(".", 1)[0] + ".101")
    dst_ip = socket.inet_aton(dst_ip)

    def ipv4(proto, payload):
        h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, 64, proto, 0,
                        src_ip, dst_ip)
        return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload

    def udp(dport, data=b"steer"):
        u = struct.pack("!HHHH", 40000, dport, 8 + len(data), 0) + data
        pseudo = src_ip + dst_ip + struct.pack("!BBH", 0, 17, len(u))
        c = csum(pseudo + u) or 0xffff
        return ipv4(17, u[:6] + struct.pack("!H", c) + u[8:])

    def eth(ethertype, payload, tags=(), to=dst):
        hdr = to + src
        for tpid, vid in tags:
            hdr += struct.pack("!HH", tpid, vid)
        return hdr + struct.pack("!H", ethertype) + payload

    for k in range(queues):
        for _ in range(count):
            s.send(eth(0x0800, udp(base + 1 + k), tags=[(0x8100, 100)]))
            s.send(eth(0x0800, udp(base + 1 + k), tags=[(0x88a8, 10), (0x8100, 20)]))
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, src, src_ip, b"\0" * 6, dst_ip)
    icmp = struct.pack("!BBHHH", 8, 0, 0, 1, 1) + b"ping"
    icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
    ipv6_udp = struct.pack("!IHBB16s16s", 6 << 28, 8, 17, 64, b"\xfd" + b"\0" * 15,
                           b"\xfd" + b"\0" * 14 + b"\1") + struct.pack("!HHHH", 40000, base + 1,
                                                                       8, 0)
    for _ in range(5):
        s.send(eth(0x0806, arp, to=b"\xff" * 6))
        s.send(eth(0x0800, ipv4(1, icmp)))
        s.send(eth(0x86dd, ipv6_udp))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
