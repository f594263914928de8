#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The on-path host of test_auth_rack.py: it sees every frame of an authenticated job on the ToR
(a bridge that floods), records them, then replays, reorders, flips bits, forges with the
tokens it saw and JOINs with what it saw. Prints a JSON report of what it sent, by the drop
reason each attempt must be counted under at the PBox.

usage: auth_attacker.py IFACE PBOX_IP PUSHES REPORT
Records until it has seen PUSHES authenticated PUSHes (at most 60 s), then attacks at once, so
that the job is still running whatever the machine's speed.
"""

import json
import os
import random
import socket
import sys

import phub_frames
from phub_frames import ETH_P_ALL, F_AUTH, Attack, Frame

OP_JOIN, OP_PUSH, OP_PULL = 0x01, 0x10, 0x13


def record(sock, pbox, pushes):
    """Every frame to or from the PBox until PUSHES authenticated PUSHes went to it."""
    seen = 0

    def take(raw, _addr):
        nonlocal seen
        f = Frame(raw)
        if pbox not in (f.src, f.dst):
            return None
        seen += f.dst == pbox and f.opcode == OP_PUSH and bool(f.flags & F_AUTH)
        return f

    return phub_frames.record(sock, 60, take, lambda: seen >= pushes)


def main():
    iface, pbox, pushes, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    rng = random.Random(25)
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((iface, 0))
    frames = record(sock, pbox, pushes)
    to_pbox = [f for f in frames if f.dst == pbox]
    joins = [f for f in to_pbox if f.opcode == OP_JOIN]
    pushes = [f for f in to_pbox if f.opcode == OP_PUSH and f.flags & F_AUTH]
    from_pbox = [f for f in frames if f.src == pbox]
    report = {"recorded": len(frames), "joins_seen": len(joins), "pushes_seen": len(pushes),
              "plain_pushes_seen": sum(1 for f in to_pbox if f.opcode == OP_PUSH
                                       and not f.flags & F_AUTH),
              "expect": {}, "sent": 0}
    # A JOIN carries no nonce in clear: the body's nonce field (offset 64) is 0.
    report["join_nonces_in_clear"] = sum(
        1 for f in joins if f.raw[f.phub + f.hdr_len + 64:f.phub + f.hdr_len + 72] != bytes(8))
    if not pushes or not joins:
        json.dump(report, open(out, "w"), indent=1)
        print("recorded no authenticated PUSH or JOIN", file=sys.stderr)
        return 1

    send = Attack(report, lambda f: sock).send
    n = min(200, len(pushes))
    # Replays: worker -> PBox datagrams sent again as they were, source and all.
    send("replay", "auth_replay", pushes[-n:])
    # Reordered: the same in reverse order, and a shuffle of older ones.
    older = pushes[:n]
    rng.shuffle(older)
    send("reorder", "auth_replay", list(reversed(pushes[-n:])) + older)
    # Bit flips: one bit of the payload, one of the header (iteration), one of the tag.
    flips = []
    for f in pushes[-n:]:
        flips += [f.payload_flipped(rng), f.iteration_flipped(), f.tag_flipped()]
    send("bit-flip", "auth_bad_tag", flips)
    # Forged with the sniffed job id, rank and token: a fresh sequence number and a made-up
    # tag; and the same without flag AUTH, its header as a plain datagram.
    forged = [f.forged_tag(rng) for f in pushes[-n:]]
    plain = [f.stripped() for f in pushes[-n:]]
    send("forged-tag", "auth_bad_tag", forged)
    send("forged-plain", "auth_missing", plain)
    # JOINs with what it saw: the recorded JOIN from this host's own address (the session
    # lives: it must not move), and the JOIN with another ephemeral key in it (its MAC fails).
    mine = []
    my_mac = open(f"/sys/class/net/{iface}/address").read().strip()
    my_ip = socket.inet_aton(os.environ["ATTACKER_IP"])
    for f in joins:
        g = f.copy()
        g.raw[6:12] = bytes.fromhex(my_mac.replace(":", ""))
        g.raw[26:30] = my_ip
        mine.append(g.ip_csum().no_udp_csum())
    send("join-replay", "auth_join_replay", mine)
    other = []
    for f in joins:
        g = f.copy()
        k = g.key_at()
        g.raw[k:k + 32] = bytes(rng.randrange(256) for _ in range(32))
        other.append(g.no_udp_csum())
    send("join-other-key", "auth_bad_tag", other)
    # What the PBox sent to the workers, sent to them again: their libphub drops it. From
    # this host's MAC: frames with the PBox's would teach the virtual rack's bridge in front
    # of the PBox's tap that the PBox lives on the ToR's side (an L2 attack, not ours here).
    back = [f for f in from_pbox if f.flags & F_AUTH][-n:]
    for f in back:
        g = f.copy()
        g.raw[6:12] = bytes.fromhex(my_mac.replace(":", ""))
        sock.send(bytes(g.raw))
    report["replayed_to_workers"] = len(back)
    json.dump(report, open(out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
