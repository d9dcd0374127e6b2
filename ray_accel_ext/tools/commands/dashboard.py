"""``ray-accel dashboard``: a web page of the cluster's accelerators on http://127.0.0.1:PORT/.

Domains as groups of hosts, each host's devices with their fabric links and nearest NICs, the
placement groups occupying each domain, and degraded nodes with their reasons. The page refreshes
itself; the inventory is gathered again every ``--refresh`` seconds. Stop with Ctrl-C.
"""

from __future__ import annotations

import argparse
import time

from ...cluster.dashboard import DashboardServer
from ...cluster.inventory import InventoryCollector


def register(sub) -> None:
    p = sub.add_parser("dashboard", help="serve a web page of the cluster's accelerators on localhost", description=__doc__)
    p.add_argument("--address", metavar="ADDR", help="Ray cluster address (default: $RAY_ADDRESS, else auto)")
    p.add_argument("--port", type=int, default=8266, metavar="N", help="port on 127.0.0.1 (default 8266; 0 picks one)")
    p.add_argument("--refresh", type=float, default=3.0, metavar="SECONDS", help="inventory refresh interval (default 3)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    collector = InventoryCollector(args.address)
    with DashboardServer(lambda: collector.gather().to_dict(), port=args.port, refresh_s=args.refresh) as server:
        print(f"ray-accel dashboard: {server.url} (Ctrl-C to stop)", flush=True)
        while True:
            time.sleep(3600)
