"""Make the dashboard screenshots in ``docs/`` (desktop size, 1600 px wide, headless Chromium).

    .venv/bin/python -m tests.support.dashboard_screenshot docs

The cluster is the synthetic one of :mod:`tests.support.synthetic_cluster` (every node a recorded
host snapshot with its identity changed; holders, placement groups and metrics in the shapes
Ray's raylets, state API and metrics exporters give them), 240 nodes for the detail views and
1,000 for the overview, served by the real ``DashboardServer``. Writes:

* ``dashboard.png``: the overview with a TPU v6e 4x4 slice opened and one of its hosts selected
  (the README image);
* ``dashboard-tpu-slice.png``: a v6e 4x4 slice missing a host, as its chip grid in slice
  coordinates with host boundaries and the placement group holding it;
* ``dashboard-nvlink-domain.png``: a GB200 NVL72 NVLink domain with 16 of its 18 trays, in rank
  order around the NVLink switch, half of it held by a serving placement group;
* ``dashboard-host.png``: an H100 DGX as lstopo draws it, with its ``nvidia-smi topo -m`` matrix,
  a lost GPU and the doctor's advice;
* ``dashboard-overview.png``: 1,000 nodes, domains collapsed to tiles, largest first.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import quote

from ray_accel_ext.cluster.dashboard import DashboardServer
from tests.support.chromium import Browser
from tests.support.dashboard_checks import READY
from tests.support.synthetic_cluster import synthetic_cluster

WIDTH = 1600


def _clip(b: Browser, selector: str, pad: int = 8) -> dict[str, float]:
    r = json.loads(b.evaluate(f"JSON.stringify((() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                              " return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; })())"))
    return {"x": max(0, r["x"] - pad), "y": max(0, r["y"] - pad), "width": r["width"] + 2 * pad, "height": r["height"] + 2 * pad}


def _key(domain: dict) -> str:
    return quote(f"{domain['level']}:{domain['id']}", safe="")


def main(argv: list[str] | None = None) -> int:
    out = Path((argv or sys.argv[1:] or ["docs"])[0])
    doc = synthetic_cluster(240)
    big = synthetic_cluster(1000)
    nodes = {n["node_id"]: n for n in doc["nodes"]}
    held_slice = next(d for d in doc["domains"] if d["kind"] == "tpu-slice" and d["placement_groups"])
    gap_slice = next(d for d in doc["domains"] if d["kind"] == "tpu-slice" and d["complete"] is False)
    nvl = next(d for d in doc["domains"] if d["kind"] == "nvlink-domain" and d["placement_groups"] and d["complete"] is False
               ) if any(d["kind"] == "nvlink-domain" and d["placement_groups"] and d["complete"] is False for d in doc["domains"]) else \
        next(d for d in doc["domains"] if d["kind"] == "nvlink-domain" and d["placement_groups"])
    dgx = next(n for n in doc["nodes"] if n["hostname"].startswith("dgx-h100") and n["degraded"])
    with DashboardServer(lambda: doc, refresh_s=3600) as server, DashboardServer(lambda: big, refresh_s=3600) as big_server, \
            Browser(width=WIDTH, height=1000) as b:
        w0 = held_slice["nodes"][0]
        b.navigate(server.url + f"#open={_key(held_slice)}&host={w0}&device=tpu:1", ready=READY)
        b.screenshot(out / "dashboard.png")

        b.navigate(server.url + f"#open={_key(gap_slice)}", ready=READY)
        b.screenshot(out / "dashboard-tpu-slice.png", clip=_clip(b, "article.tile.open"))

        b.navigate(server.url + f"#open={_key(nvl)}&host={nvl['nodes'][0]}&device=nvidia_gpu:0", ready=READY)
        b.screenshot(out / "dashboard-nvlink-domain.png", clip=_clip(b, "article.tile.open"))

        b.navigate(server.url + f"#host={dgx['node_id']}&device=nvidia_gpu:0", ready=READY)
        b.evaluate("document.querySelector('.details-col').style.maxHeight = 'none'")
        b.screenshot(out / "dashboard-host.png", clip=_clip(b, ".details-col"))

        b.navigate(big_server.url + "#sort=size", ready=READY)
        b.screenshot(out / "dashboard-overview.png")
    print(f"wrote {out}/dashboard*.png ({len(nodes)} and {len(big['nodes'])} nodes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
