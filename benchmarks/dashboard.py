"""The dashboard page's time to interactive for 100, 1,000 and 5,000 nodes, in headless Chromium.

    .venv/bin/python benchmarks/dashboard.py [--sizes 100 1000 5000] [--rounds 3]

Each cluster is the synthetic one of ``tests/support/synthetic_cluster.py`` (recorded hosts:
TPU v6e slices, GB200 NVL72 domains, H100 racks, Trn2 UltraServers, degraded and CPU hosts;
holders, placement groups and 12 rounds of metrics), served by the real ``DashboardServer``.
For each size, rounds interleaved, a fresh page load in one Chromium (Debian ``chromium``):

* time to interactive: the page's own ``performance.mark("interactive")``, set when the first
  ``/api/cluster`` has been fetched, parsed and drawn (domain tiles collapsed) and the filter
  answers; measured from navigation start, so it includes the fetch;
* filter: a selector typed into the filter box until the hosts are hidden;
* open all: every domain's full picture drawn (``#open=all``, the test's view), to interactive.

Prints the median of the rounds, the document size, and each size's ratio to the smallest.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ray_accel_ext.cluster.dashboard import DashboardServer  # noqa: E402
from tests.support.chromium import Browser, chromium_path  # noqa: E402
from tests.support.dashboard_checks import READY  # noqa: E402
from tests.support.synthetic_cluster import synthetic_cluster  # noqa: E402

FILTER = "ray.io/accelerator-type=in(H100,GB200) rayaccel.io/discovery=ok"
_TTI = "performance.getEntriesByName('interactive')[0].startTime"
_FILTER_MS = ("(() => { const f = document.getElementById('filter'); const t0 = performance.now(); f.value = " + json.dumps(FILTER) +
              "; f.dispatchEvent(new Event('input')); document.body.offsetHeight; return performance.now() - t0; })()")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if chromium_path() is None:
        print("chromium not installed (apt-get install -y chromium)", file=sys.stderr)
        return 2
    docs = {}
    for n in args.sizes:
        t0 = time.monotonic()
        docs[n] = synthetic_cluster(n)
        size = len(json.dumps(docs[n]))
        print(f"built {n:>5} nodes: {len(docs[n]['domains'])} domains, {docs[n]['summary']['devices']} devices, "
              f"/api/cluster {size / 2**20:.1f} MiB ({time.monotonic() - t0:.0f} s)", flush=True)
    results: dict[int, dict[str, list[float]]] = {n: {"tti": [], "filter": [], "open": []} for n in args.sizes}
    servers = {n: DashboardServer(lambda d=docs[n]: d, refresh_s=3600).start() for n in args.sizes}
    try:
        with Browser(width=1600, height=1000, timeout_s=600) as b:
            for _ in range(args.rounds):
                for n in args.sizes:
                    b.navigate(servers[n].url, ready=READY, timeout_s=600)
                    results[n]["tti"].append(b.evaluate(_TTI))
                    results[n]["filter"].append(b.evaluate(_FILTER_MS))
                    b.navigate(servers[n].url + "#open=all", ready=READY, timeout_s=600)
                    results[n]["open"].append(b.evaluate(_TTI))
    finally:
        for s in servers.values():
            s.stop()
    base = args.sizes[0]
    med = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in results.items()}
    print(f"\nmedian of {args.rounds} rounds, ms (ratio to {base} nodes)")
    print(f"{'nodes':>6}  {'time to interactive':>22}  {'filter':>16}  {'all domains open':>20}")
    for n in args.sizes:
        m = med[n]
        ratio = {k: m[k] / med[base][k] for k in m}
        print(f"{n:>6}  {m['tti']:>12.0f} ({ratio['tti']:>5.1f}x)  {m['filter']:>7.0f} ({ratio['filter']:>5.1f}x)"
              f"  {m['open']:>10.0f} ({ratio['open']:>5.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
