"""A free TCP port for a launcher's rendezvous (the bench's, the tests' harness)."""

import random
import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, below the kernel's range of
    ephemeral ports. A port from that range (what binding port 0 gives) can be taken by
    any socket another process opens before the ranks bind it (seen as torch's TCPStore
    failing with EADDRINUSE while other jobs ran); below it, only an explicit bind can."""
    lo = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    pick = random.Random()  # not the module's generator, which a caller may have seeded
    for _ in range(100 if lo > 2048 else 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", pick.randrange(lo // 2, lo)))
            except OSError:
                continue
            return s.getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
