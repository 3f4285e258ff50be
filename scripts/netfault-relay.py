#!/usr/bin/env python3
"""A fault-injecting relay for the two hosts of scripts/two-hosts.sh (network namespaces).

Run inside host I's namespace, it takes every IP packet host I sends to the other host
(a /32 route to the other host through a TUN device, gncr) and puts it on the wire
itself (a raw socket bound to the veth, gnc), after doing to it what it was told:

  --delay MS --jitter MS   hold each packet MS +- JITTER ms (uniform; order kept)
  --stall-every S --stall MS   every S seconds, hold everything for MS ms
  --corrupt-every N        flip one bit of the TCP payload of every N-th packet that has
                           one, and fix the TCP checksum, so TCP takes it as sent

Packets from the other host reach host I directly: run one relay per host for both
directions. It prints one line of counts when it ends (SIGTERM or SIGINT).

    ip netns exec gonccl2h1 python3 scripts/netfault-relay.py --host 1 --delay 20 --jitter 10

Needs root (TUN, raw sockets, routes). Only the standard library.
"""

from __future__ import annotations

import argparse
import fcntl
import heapq
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
SO_BINDTODEVICE = 25


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def fold(x: int) -> int:
    while x >> 16:
        x = (x & 0xFFFF) + (x >> 16)
    return x


def flip_payload_bit(pkt: bytearray, rng: random.Random) -> bool:
    """Flips one bit of the TCP payload of IPv4 packet pkt, fixing the TCP checksum
    (RFC 1624); False if pkt carries no TCP payload."""
    if len(pkt) < 20 or pkt[0] >> 4 != 4 or pkt[9] != socket.IPPROTO_TCP:
        return False
    ihl = (pkt[0] & 0x0F) * 4
    total = struct.unpack_from("!H", pkt, 2)[0]
    thl = (pkt[ihl + 12] >> 4) * 4
    start, end = ihl + thl, min(total, len(pkt))
    if end <= start:
        return False
    j = rng.randrange(start, end)
    w = ihl + ((j - ihl) & ~1)  # the 16-bit word of the segment holding byte j
    old = struct.unpack_from("!H", pkt + b"\0", w)[0]
    pkt[j] ^= 1 << rng.randrange(8)
    new = struct.unpack_from("!H", pkt + b"\0", w)[0]
    hc = struct.unpack_from("!H", pkt, ihl + 16)[0]
    struct.pack_into("!H", pkt, ihl + 16, ~fold((~hc & 0xFFFF) + (~old & 0xFFFF) + new) & 0xFFFF)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", type=int, required=True, choices=(0, 1))
    ap.add_argument("--dev", default="gnc")
    ap.add_argument("--subnet", default="10.77.0")
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--jitter", type=float, default=0.0)
    ap.add_argument("--stall-every", type=float, default=0.0)
    ap.add_argument("--stall", type=float, default=0.0)
    ap.add_argument("--corrupt-every", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    me, other = f"{a.subnet}.{a.host + 1}", f"{a.subnet}.{2 - a.host}"
    rng = random.Random(a.seed)
    tun = open_tun("gncr")
    out = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    out.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, a.dev.encode())
    for cmd in (["ip", "link", "set", "gncr", "up"],
                ["ip", "route", "replace", f"{other}/32", "dev", "gncr", "src", me],
                ["sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0"],
                ["sysctl", "-qw", f"net.ipv4.conf.{a.dev}.rp_filter=0"]):
        subprocess.run(cmd, check=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    queue: list[tuple[float, int, bytes]] = []
    seq = last = 0
    counts = {"packets": 0, "flipped": 0, "with_payload": 0, "stalls": 0}
    stall_until = 0.0
    next_stall = time.monotonic() + a.stall_every if a.stall_every else float("inf")
    print("relay ready", flush=True)
    while not stop:
        now = time.monotonic()
        if now >= next_stall:
            stall_until, next_stall = now + a.stall / 1000, now + a.stall_every
            counts["stalls"] += 1
        release = max(now, stall_until)
        while queue and queue[0][0] <= now and now >= stall_until:
            _, _, pkt = heapq.heappop(queue)
            try:
                out.sendto(pkt, (other, 0))
            except OSError:
                pass  # the link is down: the packet is lost, as on a wire
        wait = 0.2
        if queue:
            wait = max(0.0, min(wait, max(queue[0][0], stall_until) - now))
        try:
            ready, _, _ = select.select([tun], [], [], wait)
        except InterruptedError:
            continue
        if not ready:
            continue
        for _ in range(64):  # drain a burst
            try:
                pkt = bytearray(os.read(tun, 65536))
            except BlockingIOError:
                break
            counts["packets"] += 1
            if a.corrupt_every:
                ihl = (pkt[0] & 0x0F) * 4
                if len(pkt) > ihl + 20 and pkt[9] == socket.IPPROTO_TCP and len(pkt) > ihl + (pkt[ihl + 12] >> 4) * 4:
                    counts["with_payload"] += 1
                    if counts["with_payload"] % a.corrupt_every == 0 and flip_payload_bit(pkt, rng):
                        counts["flipped"] += 1
            d = (a.delay + rng.uniform(-a.jitter, a.jitter)) / 1000 if a.delay else 0.0
            last = max(last, release + d)  # order kept: never before the previous packet
            seq += 1
            heapq.heappush(queue, (last, seq, bytes(pkt)))
            if not select.select([tun], [], [], 0)[0]:
                break
    subprocess.run(["ip", "route", "del", f"{other}/32", "dev", "gncr"], capture_output=True)
    print("relay " + " ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
