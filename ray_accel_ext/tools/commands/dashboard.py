"""``ray-accel dashboard``: a web page of the cluster's accelerators on http://127.0.0.1:PORT/.

Fabric domains as their shapes (TPU slice grids, NVLink trays, UltraServers), each host as an
lstopo-like diagram with its path-class matrix, the placement groups, tasks and actors holding
devices, per-device utilisation and memory where Ray exports them, and degraded nodes with the
doctor's advice. The page renders /api/cluster (the JSON `ray-accel cluster --format json`
prints) and refreshes itself; the cluster is read again every --refresh seconds. Stop with Ctrl-C.

Served on 127.0.0.1 only unless --host names another address, which needs a token
($RAY_ACCEL_DASHBOARD_TOKEN or --token-file): open http://HOST:PORT/?token=TOKEN once.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import time
from pathlib import Path

from ...cluster.dashboard import TOKEN_ENV, ClusterSource, DashboardRefused, DashboardServer
from ...cluster.reach import check_reachable, resolve_address
from ...errors import RayAccelError
from ._common import port_number


def register(sub) -> None:
    p = sub.add_parser("dashboard", help="serve a web page of the cluster's accelerators on localhost", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", metavar="ADDR", help="Ray cluster address (default: $RAY_ADDRESS, else auto)")
    p.add_argument("--host", default="127.0.0.1", metavar="ADDR",
                   help="address to listen on (default 127.0.0.1; anything else requires a token)")
    p.add_argument("--port", type=port_number, default=8266, metavar="N", help="port (default 8266; 0 picks one)")
    p.add_argument("--refresh", type=float, default=3.0, metavar="SECONDS", help="refresh interval (default 3)")
    p.add_argument("--token-file", metavar="FILE", help=f"file holding the access token (default: ${TOKEN_ENV})")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="a host name browsers use to reach the page (for the Host check; repeatable)")
    p.set_defaults(func=run)


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        text = Path(args.token_file).read_text().strip()
        if not text:
            raise DashboardRefused(f"the token file {args.token_file} is empty")
        return text
    return os.environ.get(TOKEN_ENV) or None


def run(args: argparse.Namespace) -> int:
    import ray  # noqa: F401 - without Ray, say so now instead of serving a page that cannot fill

    token = _token(args)
    server = listen(ClusterSource(args.address), host=args.host, port=args.port, refresh_s=args.refresh, token=token,
                    allowed_hosts=args.allow_host)
    target = resolve_address(args.address)
    try:
        if target != "auto":
            check_reachable(target)  # an address named but dead: exit 1 now, not a page that never fills
    except RayAccelError:
        server.close()
        raise
    return serve(server, refresh_s=args.refresh)


def listen(source: ClusterSource, *, host: str, port: int, **options) -> DashboardServer:
    """The dashboard's server on ``host:port``, not yet serving; a busy port is a one-line error."""
    try:
        return DashboardServer(source.document, host=host, port=port, **options)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise RayAccelError(f"port {port} on {host} is in use: pick another with --port, or --port 0 "
                                "for a free one") from None
        raise RayAccelError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def serve(server: DashboardServer, *, refresh_s: float, prefix: str = "ray-accel dashboard") -> int:
    """Serve until Ctrl-C; say in the terminal when the cluster cannot be read, and when it can again."""
    # Started with SIGINT ignored (a background job of a shell without job control, nohup), Python
    # installs no KeyboardInterrupt handler (docs.python.org/3/library/signal.html): Ctrl-C must
    # still stop the server (and the demo's cluster).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with server:
        hint = " (open it once with ?token=... to set the cookie)" if server.token else ""
        print(f"{prefix}: {server.url}{hint} (Ctrl-C to stop)", flush=True)
        shown = None
        while True:
            error = server.error
            if error != shown:
                if error:
                    print(f"{prefix}: cannot read the cluster: {error} (the page says so at the top; trying again "
                          f"every {refresh_s:g} s)", file=sys.stderr, flush=True)
                elif shown:
                    print(f"{prefix}: the cluster can be read again", file=sys.stderr, flush=True)
                shown = error
            time.sleep(min(refresh_s, 5.0))
