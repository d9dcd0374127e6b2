"""``ray-accel dashboard``: a web page of the cluster's accelerators on http://127.0.0.1:PORT/.

Domains as groups of hosts, each host's devices with their fabric links and nearest NICs, the
placement groups occupying each domain, and degraded nodes with their reasons. The page refreshes
itself; the inventory is gathered again every ``--refresh`` seconds. Stop with Ctrl-C.
"""

from __future__ import annotations

import argparse
import errno
import time

from ...cluster.dashboard import DashboardServer
from ...cluster.inventory import InventoryCollector
from ...errors import RayAccelError
from ._common import port_number


def register(sub) -> None:
    p = sub.add_parser("dashboard", help="serve a web page of the cluster's accelerators on localhost", description=__doc__)
    p.add_argument("--address", metavar="ADDR", help="Ray cluster address (default: $RAY_ADDRESS, else auto)")
    p.add_argument("--port", type=port_number, default=8266, metavar="N", help="port on 127.0.0.1 (default 8266; 0 picks one)")
    p.add_argument("--refresh", type=float, default=3.0, metavar="SECONDS", help="inventory refresh interval (default 3)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import ray  # noqa: F401 - without Ray, say so now instead of serving a page that cannot fill

    collector = InventoryCollector(args.address)
    try:
        server = DashboardServer(lambda: collector.gather().to_dict(), port=args.port, refresh_s=args.refresh)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise RayAccelError(f"port {args.port} on 127.0.0.1 is in use: pick another with --port, or --port 0 "
                                "for a free one") from None
        raise RayAccelError(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}") from None
    with server:
        print(f"ray-accel dashboard: {server.url} (Ctrl-C to stop)", flush=True)
        while True:
            time.sleep(3600)
