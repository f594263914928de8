#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Writes the seed corpus of fuzz_engine.c: scripts of 16-byte operations that take the
# fuzz job through whole iterations (every rank pushes every segment), with PULLs,
# duplicates, a rejoin and a LEAVE, for each dtype and optimizer byte.
import os
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "engine")
os.makedirs(out, exist_ok=True)

# chunks of the fuzz job: keys 5, 70, 33 elements, 32-element chunks, 16-element segments
CHUNKS = [(0, 1), (1, 2), (2, 2), (3, 1), (4, 2), (5, 1)]  # (chunk, segments)


def op(kind, rank, chunk=0, seg=0, iter_delta=0, flags=4, token_sel=0, fill=b"\x00\x00\x80\x3f\x00"):
    # seg byte encodes seg_index (seg % 3) and seg_count (1 + seg // 3 % 3)
    return struct.pack("<BBBBBBbbbBB5s", kind, rank, token_sel, 0, chunk, seg, iter_delta, 0, 0, 0, flags, fill)


def seg_byte(index, count):
    return index + 3 * (count - 1)


def iteration(ops, ranks=3):
    for rank in range(ranks):
        for chunk, nseg in CHUNKS:
            for s in range(nseg):
                ops.append(op(0, rank, chunk, seg_byte(s, nseg)))


for first in range(0, 18, 3):
    ops = [op(3, r) for r in range(3)]
    iteration(ops)
    ops.append(op(2, 1, 1, seg_byte(1, 2)))           # pull of the finished iteration
    ops.append(op(0, 0, 1, seg_byte(0, 2), flags=2))  # late retransmit
    iteration(ops)
    ops.append(op(4, 2))                               # leave
    with open(os.path.join(out, "script_%02d" % first), "wb") as f:
        f.write(bytes([first]) + b"".join(ops))

# hostile: garbage tokens, sources, dtypes and offsets
ops = [op(3, r) for r in range(3)]
for i in range(40):
    ops.append(struct.pack("<BBBBBBbbbBB5s", i % 3, i % 4, i & 1, i % 2, i % 9, i % 7,
                           (i % 5) - 2, (i % 3) - 1, (i % 5) - 2, i % 4, i, b"\xff\x7f\x80\x00\x01"))
with open(os.path.join(out, "hostile"), "wb") as f:
    f.write(b"\x04" + b"".join(ops))
