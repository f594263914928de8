# SPDX-License-Identifier: BSD-3-Clause
"""The examples' way into a virtual rack: a worker process enters its namespace
(scripts/virtual-rack names them <rack>-w1, <rack>-w2, ...) before it opens any socket."""

import ctypes
import os

CLONE_NEWNET = 0x40000000


def enter_netns(name):
    """Move this process (its calling thread, before it starts others) into network namespace
    /run/netns/<name>; gloo then talks over the namespace's eth0."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(os.path.join("/run/netns", name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {name}: {os.strerror(err)}")
    finally:
        os.close(fd)
    os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
