"""Many "hosts" on one machine: H network namespaces on one bridge.

    with Hosts(8, prefix="g48") as hosts:
        subprocess.Popen(hosts.wrap(3, ["./scale", ...]))   # runs in host 3

Host i is namespace {prefix}{pid}h{i} with interface `gnh` (the same name in every
host), address 10.79.{i // 250}.{i % 250 + 1}/16 (IPv4) or fd79::{i + 1}/64 (ipv6=True:
the hosts then have no IPv4 address but loopback's), and loopback up. The hosts' veths
meet on a bridge that lives in one more namespace, {prefix}{pid}br, so nothing is added
to the machine's own network. gonccl's host identity includes the network namespace:
ranks of one host share memory, ranks of different hosts talk TCP over the bridge.

Needs root and iproute2. Every namespace is removed on exit from the `with`, however
it ends; namespaces of this prefix whose creating process is gone (a killed run) are
removed when the next Hosts starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

IFNAME = "gnh"


def why_not() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        return "needs iproute2 (ip) and util-linux (nsenter)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {probe.stderr.strip()}"
    return None


def _ip(*args: str) -> None:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")


def _batch(lines: list[str], netns: str | None = None) -> None:
    """Runs iproute2 commands in one `ip -batch` (one process for many links)."""
    cmd = ["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"]
    res = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"ip -batch failed: {res.stderr.strip()}")


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def remove_stale(prefix: str) -> None:
    """Removes namespaces {prefix}{pid}... whose process {pid} no longer exists."""
    for name in _namespaces():
        if not name.startswith(prefix):
            continue
        digits = ""
        for ch in name[len(prefix):]:
            if not ch.isdigit():
                break
            digits += ch
        if digits and not os.path.exists(f"/proc/{digits}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


class Hosts:
    """H network namespaces on one bridge (see the module doc)."""

    def __init__(self, n: int, prefix: str = "gnch", ipv6: bool = False):
        if n < 1 or n > 1000:
            raise ValueError(f"hosts: 1 to 1000, got {n}")
        self.n, self.ipv6 = n, ipv6
        self.prefix = prefix
        self.base = f"{prefix}{os.getpid()}"
        self.bridge_ns = f"{self.base}br"
        self.names = [f"{self.base}h{i}" for i in range(n)]

    def addr(self, i: int) -> str:
        """Host i's address (no prefix length, no brackets)."""
        return f"fd79::{i + 1:x}" if self.ipv6 else f"10.79.{i // 250}.{i % 250 + 1}"

    def __enter__(self) -> Hosts:
        remove_stale(self.prefix)
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def _up(self) -> None:
        _ip("netns", "add", self.bridge_ns)
        for name in self.names:
            _ip("netns", "add", name)
        # The veth pairs are made from the bridge's namespace: each host's end moves to
        # its host and is named IFNAME there.
        lines = ["link set lo up", "link add br0 type bridge", "link set br0 up"]
        for i, name in enumerate(self.names):
            lines += [f"link add v{i} type veth peer name {IFNAME} netns {name}",
                      f"link set v{i} master br0", f"link set v{i} up"]
        _batch(lines, self.bridge_ns)
        for i, name in enumerate(self.names):
            addr = f"{self.addr(i)}/64 nodad" if self.ipv6 else f"{self.addr(i)}/16"
            _batch(["link set lo up", f"addr add {addr} dev {IFNAME}", f"link set {IFNAME} up"], name)
        deadline = time.time() + 10
        pending = list(range(self.n))
        while pending:
            pending = [i for i in pending if "LOWER_UP" not in subprocess.run(
                ["ip", "-n", self.names[i], "link", "show", IFNAME], capture_output=True, text=True).stdout]
            if pending and time.time() > deadline:
                raise RuntimeError(f"hosts {pending[:8]}: {IFNAME} did not come up")
            if pending:
                time.sleep(0.05)

    def down(self) -> None:
        """Removes every namespace of this set (idempotent)."""
        present = set(_namespaces())
        for name in [*self.names, self.bridge_ns]:
            if name in present:
                subprocess.run(["ip", "netns", "del", name], capture_output=True)

    def wrap(self, i: int, argv: list[str]) -> list[str]:
        """argv run in host i's network namespace (nsenter execs it: the same pid)."""
        return ["nsenter", f"--net=/run/netns/{self.names[i]}", *argv]

    def pids(self, i: int) -> list[int]:
        """The processes in host i's namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.names[i]], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]
