# SPDX-License-Identifier: BSD-3-Clause
"""PHub datagrams as an on-path host sees them: Ethernet frames captured on a bridge or a
router, parsed just enough to copy, damage and forge them (auth_attacker.py on a rack's ToR,
ring_auth_attacker.py on the spine)."""

import socket
import struct

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
MAGIC = b"PH"
F_AUTH = 0x20
HDR = 56
TRAILER = 24            # the MAC's header extension: sequence number and tag


def csum16(data):
    """The Internet checksum of data (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


class Frame:
    """One Ethernet frame carrying a PHub datagram over IPv4/UDP, and the port it came in by."""

    def __init__(self, raw, port=None):
        self.raw = bytearray(raw)
        self.port = port
        ihl = (raw[14] & 0x0F) * 4
        self.ip = 14
        self.udp = 14 + ihl
        self.phub = self.udp + 8
        self.src = socket.inet_ntoa(raw[26:30])
        self.dst = socket.inet_ntoa(raw[30:34])
        self.src_port, self.dst_port = struct.unpack("!HH", raw[self.udp:self.udp + 4])
        p = self.phub
        self.opcode = raw[p + 3]
        self.flags = raw[p + 4]
        self.hdr_len = raw[p + 5]
        self.job_id, = struct.unpack("!I", raw[p + 8:p + 12])
        self.rank, = struct.unpack("!H", raw[p + 12:p + 14])
        self.token, = struct.unpack("!Q", raw[p + 24:p + 32])

    def copy(self):
        return Frame(bytes(self.raw), self.port)

    def no_udp_csum(self):
        """UDP checksum 0 (none, for IPv4): the datagram's own MAC is what must catch it."""
        self.raw[self.udp + 6:self.udp + 8] = b"\0\0"
        return self

    def lengths(self):
        """IP and UDP lengths and the IP checksum after the datagram's size changed."""
        self.raw[self.ip + 2:self.ip + 4] = struct.pack("!H", len(self.raw) - 14)
        self.raw[self.ip + 10:self.ip + 12] = b"\0\0"
        self.raw[self.ip + 10:self.ip + 12] = struct.pack(
            "!H", csum16(bytes(self.raw[self.ip:self.udp])))
        self.raw[self.udp + 4:self.udp + 6] = struct.pack("!H", len(self.raw) - self.udp)
        return self

    def forged_tag(self, rng):
        """A copy with a fresh sequence number on the same channel and a made-up tag."""
        g = self.copy()
        t = g.phub + g.hdr_len - TRAILER
        channel, = struct.unpack("!H", g.raw[t:t + 2])
        g.raw[t:t + 8] = struct.pack("!Q", (channel << 48) | (1 << 40) | rng.randrange(1 << 20))
        g.raw[t + 8:t + 24] = bytes(rng.randrange(256) for _ in range(16))
        return g.no_udp_csum()

    def stripped(self):
        """A copy without the MAC's extension nor flag AUTH: the header of a plain datagram."""
        g = self.copy()
        hl = g.hdr_len - TRAILER
        body = g.raw[g.phub + g.hdr_len:]
        g.raw[g.phub + 4] &= ~F_AUTH & 0xFF
        g.raw[g.phub + 5] = hl
        g.raw = g.raw[:g.phub + hl] + body
        return g.lengths().no_udp_csum()


def is_phub(raw):
    """An unfragmented IPv4/UDP frame whose payload starts with PHub's magic."""
    if len(raw) < 14 + 20 + 8 + HDR or struct.unpack("!H", raw[12:14])[0] != ETH_P_IP:
        return False
    if raw[23] != socket.IPPROTO_UDP or (raw[20] & 0x3F) or raw[21]:
        return False
    ihl = (raw[14] & 0x0F) * 4
    return raw[14 + ihl + 8:14 + ihl + 10] == MAGIC
