#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Measures what a link impairment does to a stream of numbered UDP datagrams: the loss rate,
# the lengths of loss bursts, the duplicates and the reordering, for the virtual rack's BPF
# impairment and delay line.
#
#   loss_pattern.py recv PORT COUNT OUT.json    (in the receiving namespace; start it first)
#   loss_pattern.py send ADDR PORT COUNT        (in the sending namespace)
#
# The receiver stops 1 s after the last datagram or after 30 s, and writes
# {"sent", "received", "unique", "duplicates", "loss", "bursts", "mean_burst", "max_burst",
#  "reordered", "max_extent"}: a datagram is reordered when one with a higher number arrived
# before it (RFC 4737); its extent is how many datagrams after it arrived first.
import json
import socket
import struct
import sys
import time


def send(addr, port, count):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(count):
        s.sendto(struct.pack("!I", i) + b"\0" * 60, (addr, port))
        # Paced a little: the receiver must not be the one that drops.
        if i % 64 == 63:
            time.sleep(0.001)
    s.sendto(b"end!", (addr, port))


def recv(port, count, out):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, 33, 1 << 25)  # SO_RCVBUFFORCE: root, no rmem_max cap
    s.bind(("0.0.0.0", port))
    seen = {}
    arrivals = []
    s.settimeout(30)
    deadline = time.time() + 30
    try:
        while time.time() < deadline:
            data, _ = s.recvfrom(2048)
            if len(data) < 4:
                continue
            if data == b"end!":
                # Stragglers of the stream may still be queued: drain for a second.
                s.settimeout(1)
                continue
            n = struct.unpack("!I", data[:4])[0]
            seen[n] = seen.get(n, 0) + 1
            arrivals.append(n)
    except socket.timeout:
        pass
    bursts, run = [], 0
    for i in range(count):
        if i in seen:
            if run:
                bursts.append(run)
            run = 0
        else:
            run += 1
    if run:
        bursts.append(run)
    lost = count - len(seen)
    reordered, max_extent, highest, first = 0, 0, -1, set()
    tree = [0] * (count + 1)  # Fenwick tree: how many of the numbers <= i arrived so far
    for n in arrivals:
        if n in first or n >= count:
            continue  # a duplicate is not a reordering
        first.add(n)
        if n < highest:
            reordered += 1
            # Extent: later-numbered datagrams that came before it.
            i, not_later = n + 1, 0
            while i > 0:
                not_later += tree[i]
                i -= i & -i
            max_extent = max(max_extent, len(first) - 1 - not_later)
        highest = max(highest, n)
        i = n + 1
        while i <= count:
            tree[i] += 1
            i += i & -i
    r = {
        "sent": count,
        "received": sum(seen.values()),
        "unique": len(seen),
        "duplicates": sum(v - 1 for v in seen.values()),
        "loss": lost / count,
        "bursts": len(bursts),
        "mean_burst": (sum(bursts) / len(bursts)) if bursts else 0.0,
        "max_burst": max(bursts) if bursts else 0,
        "reordered": reordered,
        "max_extent": max_extent,
    }
    with open(out, "w") as f:
        json.dump(r, f)
    print(json.dumps(r))


if __name__ == "__main__":
    if sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "recv":
        recv(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit("usage: loss_pattern.py (send ADDR PORT COUNT | recv PORT COUNT OUT)")
