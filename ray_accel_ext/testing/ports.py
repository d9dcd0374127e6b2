"""Loopback TCP ports for simulated clusters and test servers, each handed out once per process.

Binding port 0 and closing the socket lets the kernel give the same port to the next caller, so
two components of one node could get one port and ``ray start`` refused to start ("Ray component
... is trying to use a port number ... that is used by other components",
``ray/_private/parameter.py`` ``update_pre_selected_port``, Ray 2.60).

Here ports come from a band just below the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default), where the kernel never
picks one for ``bind(0)`` or an outgoing connection. Each process starts at a random offset in
the band and walks it, never returning a port twice and skipping any port something listens on.
Another process can still bind a port between this check and Ray's own bind; the cluster kit
then sees Ray's error (:func:`is_port_collision`) and starts that node again on fresh ports.
"""

from __future__ import annotations

import random
import re
import socket
import threading

__all__ = ["free_port", "is_port_collision", "PORT_COLLISION_PATTERNS"]

_BAND_WIDTH = 12_000
_DEFAULT_EPHEMERAL_LOW = 32768  # Linux default net.ipv4.ip_local_port_range low end
_lock = threading.Lock()
_handed: set[int] = set()
_cursor: list[int] = []

# What Ray prints when a port it was given is taken (Ray 2.60): its own pre-start check
# (parameter.py), the dashboard-port check (services.py "already occupied"), and the OS error a
# component reports when its bind fails (errno 98, also in gRPC's "Failed to add port").
PORT_COLLISION_PATTERNS = (
    r"is trying to use a port number \d+ that is used by other components",
    r"because it's already occupied",
    r"address already in use",
    r"failed to bind to",
)
_COLLISION_RE = re.compile("|".join(PORT_COLLISION_PATTERNS), re.IGNORECASE)


def is_port_collision(log_text: str) -> bool:
    """Whether a ``ray start`` log says it failed because a port was taken."""
    return bool(_COLLISION_RE.search(log_text or ""))


def _band() -> tuple[int, int]:
    low = _DEFAULT_EPHEMERAL_LOW
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    end = max(2048, min(low, 65536))
    return max(1024, end - _BAND_WIDTH), end


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def free_port() -> int:
    """A loopback port no one listens on now and that this process has not handed out before."""
    start, end = _band()
    width = end - start
    with _lock:
        if not _cursor:
            _cursor.append(random.SystemRandom().randrange(width))
        for _ in range(width):
            port = start + _cursor[0] % width
            _cursor[0] += 1
            if port in _handed or _listening(port):
                continue
            _handed.add(port)
            return port
    raise RuntimeError(f"no free loopback port left in {start}-{end - 1}")
