"""The dashboard server's idle cost with no client, and the page's time to interactive in headless Chromium.

    .venv/bin/python benchmarks/dashboard.py [--idle-nodes 1000] [--idle-s 20] [--sizes 100 1000 5000]
                                             [--rounds 3] [--skip-idle] [--skip-page]

Each cluster is the synthetic one of ``tests/support/synthetic_cluster.py`` (recorded hosts:
TPU v6e slices, GB200 NVL72 domains, H100 racks, Trn2 UltraServers, degraded and CPU hosts;
holders, placement groups and 12 rounds of metrics), served by the real ``DashboardServer``.

Idle: the process's CPU time (``getrusage``) over ``--idle-s`` seconds of a server refreshing
every 2 s with no client, as a share of one core, for a source returning the same document each
refresh and one returning a new document object each time (what ``ClusterSource`` does), next to
the old behaviour measured the same way: the whole document serialised on every refresh.

Page, for each size, rounds interleaved, a fresh page load in one Chromium (Debian ``chromium``):

* time to interactive: the page's own ``performance.mark("interactive")``, set when the
  ``overview`` view (preloaded by the HTML) has been fetched, parsed and its first screens of
  collapsed domain tiles drawn, and the filter answers; measured from navigation start, so it
  includes the fetch;
* complete: ``performance.mark("complete")``, the whole document fetched and drawn, panels included;
* filter: a selector typed into the filter box until the hosts are hidden;
* open all: every domain's full picture drawn (``#open=all``, the test's view), to complete.

Prints the median of the rounds, the document sizes, and each size's ratio to the smallest.
Budget (issue 27): idle below 1 % of a core at 1,000 nodes; time to interactive under 1 s at 5,000.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_ext.cluster.dashboard import DashboardServer  # noqa: E402
from ray_accel_ext.cluster.dashboard.published import overview  # noqa: E402
from tests.support.chromium import Browser, chromium_path  # noqa: E402
from tests.support.dashboard_checks import READY  # noqa: E402
from tests.support.synthetic_cluster import synthetic_cluster  # noqa: E402

FILTER = "ray.io/accelerator-type=in(H100,GB200) rayaccel.io/discovery=ok"
REFRESH_S = 2.0
_MARK = "performance.getEntriesByName({!r})[0].startTime"
_FILTER_MS = ("(() => { const f = document.getElementById('filter'); const t0 = performance.now(); f.value = " + json.dumps(FILTER) +
              "; f.dispatchEvent(new Event('input')); document.body.offsetHeight; return performance.now() - t0; })()")


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _idle_share(start, stop, seconds: float) -> float:
    """CPU seconds per wall second of this process between ``start()`` and ``stop()``."""
    start()
    time.sleep(REFRESH_S)  # past the start-up serialisation
    cpu, wall = _cpu_s(), time.monotonic()
    time.sleep(seconds)
    used = (_cpu_s() - cpu) / (time.monotonic() - wall)
    stop()
    return used


def _old_behaviour(doc: dict):
    """What the server did before: the whole document serialised on every refresh."""
    done = threading.Event()

    def loop() -> None:
        generation = 0
        while not done.wait(REFRESH_S):
            generation += 1
            payload = dict(doc, dashboard={"generation": generation, "error": None, "refresh_s": REFRESH_S})
            json.dumps(payload, sort_keys=True, allow_nan=False, default=str).encode()

    thread = threading.Thread(target=loop, daemon=True)
    return thread.start, lambda: (done.set(), thread.join())


def _server(source):
    server = DashboardServer(source, refresh_s=REFRESH_S)
    return server.start, server.stop


def idle(nodes: int, seconds: float) -> None:
    doc = synthetic_cluster(nodes)
    size = len(json.dumps(doc)) / 2**20
    rows = [
        ("this server, the same document each refresh", _idle_share(*_server(lambda: doc), seconds)),
        ("this server, a new document object each refresh (as ClusterSource)",
         _idle_share(*_server(lambda: dict(doc, gathered_at=time.time())), seconds)),
        ("old behaviour: the whole document serialised every refresh", _idle_share(*_old_behaviour(doc), seconds)),
    ]
    old = rows[-1][1]
    print(f"\nserver with no client: {nodes} nodes ({size:.1f} MiB), refresh every {REFRESH_S:g} s, {seconds:g} s measured, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'what':<72} {'% of a core':>11} {'vs old':>7}")
    for what, share in rows:
        print(f"{what:<72} {100 * share:>11.2f} {share / old:>7.3f}")
    print("budget: below 1 % of a core")


def page(sizes: list[int], rounds: int) -> None:
    docs = {}
    for n in sizes:
        t0 = time.monotonic()
        docs[n] = synthetic_cluster(n)
        full, lean = (len(json.dumps(d, separators=(",", ":"))) / 2**20 for d in (docs[n], overview(docs[n])))
        print(f"built {n:>5} nodes: {len(docs[n]['domains'])} domains, {docs[n]['summary']['devices']} devices, "
              f"/api/cluster {full:.1f} MiB, overview view {lean:.1f} MiB ({time.monotonic() - t0:.0f} s)", flush=True)
    keys = ("tti", "complete", "filter", "open")
    results: dict[int, dict[str, list[float]]] = {n: {k: [] for k in keys} for n in sizes}
    servers = {n: DashboardServer(lambda d=docs[n]: d, refresh_s=3600).start() for n in sizes}
    try:
        with Browser(width=1600, height=1000, timeout_s=600) as b:
            for _ in range(rounds):
                for n in sizes:
                    b.navigate(servers[n].url, ready=READY, timeout_s=600)
                    results[n]["tti"].append(b.evaluate(_MARK.format("interactive")))
                    results[n]["complete"].append(b.evaluate(_MARK.format("complete")))
                    results[n]["filter"].append(b.evaluate(_FILTER_MS))
                    b.navigate(servers[n].url + "#open=all", ready=READY, timeout_s=600)
                    results[n]["open"].append(b.evaluate(_MARK.format("complete")))
    finally:
        for s in servers.values():
            s.stop()
    base = sizes[0]
    med = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in results.items()}
    print(f"\nmedian of {rounds} rounds, ms (ratio to {base} nodes); load average {os.getloadavg()[0]:.2f}")
    print(f"{'nodes':>6}  {'time to interactive':>20}  {'complete':>16}  {'filter':>16}  {'all domains open':>18}")
    for n in sizes:
        m = med[n]
        print(f"{n:>6}  " + "  ".join(f"{m[k]:>{w}.0f} ({m[k] / med[base][k]:>5.1f}x)"
                                      for k, w in (("tti", 10), ("complete", 6), ("filter", 6), ("open", 8))))
    print("budget: time to interactive under 1 s at 5,000 nodes")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle-nodes", type=int, default=1000)
    ap.add_argument("--idle-s", type=float, default=20.0)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-idle", action="store_true")
    ap.add_argument("--skip-page", action="store_true")
    args = ap.parse_args(argv)
    if not args.skip_idle:
        idle(args.idle_nodes, args.idle_s)
    if not args.skip_page:
        if chromium_path() is None:
            print("chromium not installed (apt-get install -y chromium)", file=sys.stderr)
            return 2
        page(args.sizes, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
