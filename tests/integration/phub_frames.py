# SPDX-License-Identifier: BSD-3-Clause
"""PHub datagrams as an on-path host sees them: Ethernet frames captured on a bridge or a
router, parsed just enough to copy, damage and forge them, and the recording and sending loops
around them (auth_attacker.py on a rack's ToR, ring_auth_attacker.py on the spine)."""

import socket
import struct
import time

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

    def ip_csum(self):
        """The IP header's checksum after a change to the header."""
        self.raw[self.ip + 10:self.ip + 12] = b"\0\0"
        self.raw[self.ip + 10:self.ip + 12] = struct.pack(
            "!H", csum16(bytes(self.raw[self.ip:self.udp])))
        return self

    def lengths(self):
        """IP and UDP lengths and the IP checksum after the datagram's size changed."""
        self.raw[self.ip + 2:self.ip + 4] = struct.pack("!H", len(self.raw) - 14)
        self.raw[self.udp + 4:self.udp + 6] = struct.pack("!H", len(self.raw) - self.udp)
        return self.ip_csum()

    def key_at(self):
        """Where the ephemeral key of a JOIN or RING_HELLO ends its header: before the MAC's
        extension."""
        return self.phub + self.hdr_len - TRAILER - 32

    def payload_flipped(self, rng):
        """A copy with one random bit of the payload flipped."""
        g = self.copy()
        at = g.phub + g.hdr_len + rng.randrange(len(g.raw) - g.phub - g.hdr_len)
        g.raw[at] ^= 1 << rng.randrange(8)
        return g.no_udp_csum()

    def iteration_flipped(self):
        """A copy with the low bit of the header's iteration flipped."""
        g = self.copy()
        g.raw[g.phub + 39] ^= 1
        return g.no_udp_csum()

    def tag_flipped(self):
        """A copy with the top bit of the tag's last byte flipped."""
        g = self.copy()
        g.raw[g.phub + g.hdr_len - 1] ^= 0x80
        return g.no_udp_csum()

    def forged_tag(self, rng):
        """A copy with a fresh sequence number on the same channel and a made-up tag."""
        g = self.copy()
        t = g.phub + g.hdr_len - TRAILER
        channel, = struct.unpack("!H", g.raw[t:t + 2])
        g.raw[t:t + 8] = struct.pack("!Q", (channel << 48) | (1 << 40) | rng.randrange(1 << 20))
        g.raw[t + 8:t + 24] = bytes(rng.randrange(256) for _ in range(16))
        return g.no_udp_csum()

    def stripped(self, key=0):
        """A copy without the MAC's extension nor flag AUTH: the header of a plain datagram;
        without the key bytes of an ephemeral key before the extension as well."""
        g = self.copy()
        hl = g.hdr_len - TRAILER - key
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


def record(sock, seconds, take, done):
    """The frames take(raw, addr) makes of the PHub frames sock receives (None: not kept),
    until done() or for seconds at most."""
    frames = []
    end = time.monotonic() + seconds
    sock.settimeout(0.2)
    while time.monotonic() < end and not done():
        try:
            raw, addr = sock.recvfrom(65535)
        except socket.timeout:
            continue
        if is_phub(raw):
            f = take(raw, addr)
            if f is not None:
                frames.append(f)
    return frames


class Attack:
    """Sends batches of frames, each by the socket out_for(frame) names (None: not sent), and
    counts them in report under the drop reason they must be counted under at the PBox."""

    def __init__(self, report, out_for):
        self.report = report
        self.out_for = out_for
        report.setdefault("expect", {})
        report.setdefault("attempts", {})
        report.setdefault("sent", 0)

    def send(self, label, reason, batch):
        batch = [f for f in batch if self.out_for(f) is not None]
        for f in batch:
            self.out_for(f).send(bytes(f.raw))
            time.sleep(0.0005)
        self.report["expect"][reason] = self.report["expect"].get(reason, 0) + len(batch)
        self.report["attempts"][label] = len(batch)
        self.report["sent"] += len(batch)
