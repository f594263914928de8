#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The on-path host of test_ring_auth_rack.py: in the spine's namespace it sees every frame
between the PBoxes of an authenticated ring job (on each rack's spine port), records them,
then replays, reorders, flips bits in, forges and strips the MAC of ring datagrams
(RING_REDUCE, RING_GATHER, RING_ACKV) and RING_HELLOs, and offers HELLOs of a neighbour
without auth, each sent straight into the PBox it was for. Prints a JSON report of what it
sent, by the drop reason each attempt must be counted under at the PBoxes (docs/protocol.md
section 12).

usage: ring_auth_attacker.py SPINE_PREFIX SECONDS REPORT GO_FILE
Records for SECONDS (at most) until it has ring datagrams and HELLOs, then attacks once the
file GO_FILE exists (the test makes it when the ring is quiet: every attempt's fate is known).
"""

import json
import os
import random
import socket
import struct
import sys
import time

from phub_frames import ETH_P_ALL, F_AUTH, Attack, Frame, record

PACKET_OUTGOING = 4
OP_RING_REDUCE, OP_RING_GATHER, OP_RING_HELLO, OP_RING_HELLO_ACK = 0x40, 0x41, 0x43, 0x44
OP_RING_ACKV = 0x45
CAP_AUTH = 0x8
HELLO_CAPS = 86         # the caps field in RING_HELLO's body


def main():
    prefix, seconds, out, go = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
    rng = random.Random(25)
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    ports = {}              # a PBox's spine address -> the spine port that reaches it
    seen = {"data": 0, "hellos": 0}
    since = {}

    def take(raw, addr):
        """Frames as they enter the spine from a PBox's port (each once)."""
        if not addr[0].startswith(prefix) or addr[2] == PACKET_OUTGOING:
            return None
        f = Frame(raw, addr[0])
        ports[socket.inet_ntoa(f.raw[26:30])] = f.port
        seen["data"] += f.opcode in (OP_RING_REDUCE, OP_RING_GATHER)
        seen["hellos"] += f.opcode in (OP_RING_HELLO, OP_RING_HELLO_ACK)
        return f

    def done():
        data, hellos = seen["data"], seen["hellos"]
        # Enough; or the test says the ring is quiet now: its data is what there is, and
        # keep-alive HELLOs come for a few seconds more.
        if data >= 400 and hellos >= 4:
            return True
        if not os.path.exists(go):
            return False
        since.setdefault("go", time.monotonic())
        return data and (hellos >= 4 or (hellos and time.monotonic() - since["go"] > 6))

    frames = record(sock, seconds, take, done)
    end = time.monotonic() + seconds
    while not os.path.exists(go) and time.monotonic() < end:
        time.sleep(0.05)
    data = [f for f in frames if f.opcode in (OP_RING_REDUCE, OP_RING_GATHER)]
    ackvs = [f for f in frames if f.opcode == OP_RING_ACKV]
    hellos = [f for f in frames if f.opcode in (OP_RING_HELLO, OP_RING_HELLO_ACK)]
    report = {"recorded": len(frames), "data_seen": len(data), "ackvs_seen": len(ackvs),
              "hellos_seen": len(hellos),
              "plain_seen": sum(1 for f in data + ackvs + hellos if not f.flags & F_AUTH),
              "hellos_without_cap_auth": sum(
                  1 for f in hellos
                  if not struct.unpack("!H", f.raw[f.phub + f.hdr_len + HELLO_CAPS:
                                                   f.phub + f.hdr_len + HELLO_CAPS + 2])[0]
                  & CAP_AUTH),
              "expect": {}, "attempts": {}, "sent": 0}
    if not data or not ackvs or not hellos:
        json.dump(report, open(out, "w"), indent=1)
        print("recorded no ring datagram, RING_ACKV or RING_HELLO", file=sys.stderr)
        return 1
    # Each goes out of the spine port that reaches its PBox, straight to it (no bridge that
    # could learn the PBox's MAC on this side).
    outs = {}
    for ip, port in ports.items():
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((port, 0))
        outs[ip] = s

    send = Attack(report, lambda f: outs.get(f.dst)).send
    n = min(150, len(data))
    m = min(50, len(ackvs))
    # Replays: ring datagrams, RING_ACKVs and HELLOs sent again as they were.
    send("replay-data", "auth_replay", data[-n:])
    send("replay-ackv", "auth_replay", ackvs[-m:])
    send("replay-hello", "auth_replay", hellos[-8:])
    # Reordered: older ones, shuffled (each was taken once already).
    older = data[:n]
    rng.shuffle(older)
    send("reorder-data", "auth_replay", older)
    # Bit flips: a payload bit of a ring datagram (fp32 sums: nothing parses them), the
    # iteration in the header, a bit of the tag; the tag of RING_ACKVs and HELLOs, and the
    # ephemeral key in a HELLO (a key swapped in).
    flips = []
    for f in data[-n:]:
        flips += [f.payload_flipped(rng), f.iteration_flipped()]
    flips += [f.tag_flipped() for f in data[-n:] + ackvs[-m:] + hellos[-4:]]
    for f in hellos[-4:]:
        g = f.copy()
        g.raw[g.key_at() + rng.randrange(32)] ^= 1 << rng.randrange(8)
        flips.append(g.no_udp_csum())
    send("bit-flip", "auth_bad_tag", flips)
    # Forged with the sniffed job id, position and token: a sequence number far ahead and a
    # made-up tag; and the same datagram stripped of its extension, as a plain one.
    forged = [f.forged_tag(rng) for f in data[-n:] + ackvs[-m:]]
    plain = [f.stripped() for f in data[-n:] + ackvs[-m:]]
    send("forged-tag", "auth_bad_tag", forged)
    send("forged-plain", "auth_missing", plain)
    # A neighbour that does not authenticate: the HELLO without its extension and cap AUTH
    # (the nonce's proof still right) is refused.
    stripped = []
    for f in hellos[-2:]:
        g = f.stripped(key=32)
        g.raw[g.phub + g.raw[g.phub + 5] + HELLO_CAPS + 1] &= ~CAP_AUTH & 0xFF
        stripped.append(g)
    send("hello-without-auth", "auth_missing", stripped)
    json.dump(report, open(out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
