# SPDX-License-Identifier: BSD-3-Clause
"""Probes a rack scenario runs inside a namespace (ip netns exec NS python3 -m phubrack.probe):
ICMP echo on a raw socket (iputils may not be installed), a one-exchange TCP session, an HTTP
GET (a service on the namespace's loopback).

  ping HOST [COUNT]      COUNT (3) echo requests, each answered within 2 s, else exit 1
  serve HOST PORT        accept one TCP connection (20 s), answer "SSH-2.0-pbox-host " + what
                         it sent
  hello HOST PORT        connect, send "hello", print the answer
  get URL                print the body of an HTTP GET (5 s), exit 1 when it fails
  udp-echo HOST PORT     send back every UDP datagram to HOST:PORT until 5 s pass without one
  udp-count HOST PORT N  send N numbered datagrams of 1 KB to HOST:PORT (an echo), print how
                         many distinct ones came back
  udp-rtt HOST PORT N    N round trips to HOST:PORT (an echo) one after another, print the
                         shortest in ms
  udp-blast HOST PORT N  send N datagrams of 32 bytes to HOST:PORT, paced a little
"""

import os
import socket
import struct
import sys
import time
import urllib.request


def _csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    s += s >> 16
    return ~s & 0xffff


def ping(host, count=3):
    r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    r.settimeout(2)
    for seq in range(count):
        body = struct.pack("!BBHHH", 8, 0, 0, os.getpid() & 0xffff, seq) + b"phub-ping"
        body = body[:2] + struct.pack("!H", _csum(body + b"\0")) + body[4:]
        r.sendto(body, (host, 0))
        while True:
            pkt, src = r.recvfrom(2048)
            ihl = (pkt[0] & 15) * 4
            if (src[0] == host and pkt[ihl] == 0
                    and struct.unpack("!H", pkt[ihl + 6:ihl + 8])[0] == seq):
                break
    return count


def serve(host, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(1)
    s.settimeout(20)
    c, _ = s.accept()
    c.sendall(b"SSH-2.0-pbox-host " + c.recv(64))


def hello(host, port):
    c = socket.create_connection((host, port), timeout=10)
    c.sendall(b"hello")
    return c.recv(64).decode()


def udp_echo(host, port, idle=5.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, port))
    s.settimeout(idle)
    try:
        while True:
            data, peer = s.recvfrom(2048)
            s.sendto(data, peer)
    except socket.timeout:
        pass


def udp_count(host, port, n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    seen = set()

    def drain(wait):
        s.settimeout(wait)
        try:
            while True:
                seen.add(s.recv(2048).split(b".")[0])
        except socket.timeout:
            pass
    for i in range(n):
        s.settimeout(None)  # a full send buffer waits; only the receive is bounded
        s.sendto(b"%d" % i + b"." * 1000, (host, port))
        drain(0.005)
    drain(1.0)
    return len(seen)


def udp_rtt(host, port, n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    best = None
    for i in range(n):
        t = time.monotonic()
        s.sendto(b"%d" % i, (host, port))
        s.recvfrom(64)
        rtt = (time.monotonic() - t) * 1e3
        best = rtt if best is None else min(best, rtt)
    return best


def udp_blast(host, port, n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(n):
        s.sendto(b"x" * 32, (host, port))
        # Paced, so that only the link's impairment drops any.
        if i % 50 == 49:
            time.sleep(0.002)


def main(argv):
    if len(argv) >= 2 and argv[0] == "ping":
        print("%d echo replies" % ping(argv[1], int(argv[2]) if len(argv) > 2 else 3))
    elif len(argv) == 3 and argv[0] == "serve":
        serve(argv[1], int(argv[2]))
    elif len(argv) == 3 and argv[0] == "hello":
        print(hello(argv[1], int(argv[2])))
    elif len(argv) == 2 and argv[0] == "get":
        try:
            sys.stdout.write(urllib.request.urlopen(argv[1], timeout=5).read().decode())
        except OSError as e:
            sys.stderr.write("%s: %s\n" % (argv[1], e))
            return 1
    elif len(argv) == 3 and argv[0] == "udp-echo":
        udp_echo(argv[1], int(argv[2]))
    elif len(argv) == 4 and argv[0] == "udp-count":
        print(udp_count(argv[1], int(argv[2]), int(argv[3])))
    elif len(argv) == 4 and argv[0] == "udp-rtt":
        print("%.1f" % udp_rtt(argv[1], int(argv[2]), int(argv[3])))
    elif len(argv) == 4 and argv[0] == "udp-blast":
        udp_blast(argv[1], int(argv[2]), int(argv[3]))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
