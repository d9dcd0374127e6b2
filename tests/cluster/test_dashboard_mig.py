"""The dashboard draws each GPU in MIG mode with its instances inside it (headless Chromium over
a document built from the MIG snapshots)."""

from __future__ import annotations

import json

from ray_accel_ext.cluster.dashboard import DashboardServer
from tests.support.chromium import Browser, require_chromium
from tests.support.dashboard_checks import READY
from tests.support.synthetic_cluster import snapshot_cluster

require_chromium()

MIG = ["nvidia_gpu/a100-80gb-mig-homogeneous", "nvidia_gpu/h100-80gb-mig-mixed", "nvidia_gpu/h100-partly-mig"]
_DRAWN = """JSON.stringify([...document.querySelectorAll('#overview g.host')].map(h => ({
  node: h.dataset.nodeId,
  gpus: h.querySelectorAll('rect.chip[data-device]').length,
  mig: [...h.querySelectorAll('rect.chip[data-mig-gpu]')].map(r => r.dataset.migGpu),
  instances: [...h.querySelectorAll('rect.mig-instance')].map(r => r.dataset.partition)})))"""


def test_mig_gpus_are_drawn_with_their_instances_inside():
    doc = snapshot_cluster(MIG)
    with DashboardServer(lambda: doc, refresh_s=3600) as server, Browser(width=1400, height=900) as browser:
        browser.navigate(server.url + "#open=all", ready=READY)
        assert browser.console == [], browser.console
        drawn = {h["node"]: h for h in json.loads(browser.evaluate(_DRAWN))}
    for node in doc["nodes"]:
        desc = node["inventory"]["descriptions"][0]
        parts = desc.get("partitions", [])
        seen = drawn[node["node_id"]]
        assert seen["gpus"] == len(desc["devices"])
        assert seen["mig"] == list(dict.fromkeys(p["device"] for p in parts))
        assert seen["instances"] == [p["id"] for p in parts]
