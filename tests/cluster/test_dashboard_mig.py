"""The dashboard draws each GPU in MIG mode with its instances inside it, an instance a worker
holds drawn held (headless Chromium over a document built from the MIG snapshots)."""

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
  instances: [...h.querySelectorAll('rect.mig-instance')].map(r => r.dataset.partition),
  held: [...h.querySelectorAll('rect.mig-instance.state-held')].map(r => r.dataset.partition)})))"""
# A worker holding unit 2 of mig-1g.10gb (in a placement group: Ray's group resource names).
USED = {"nvidia_gpu/a100-80gb-mig-homogeneous": {"mig-1g.10gb_group_" + "a" * 36: [2], "CPU": [0]},
        "nvidia_gpu/h100-80gb-mig-mixed": {"mig-2g.20gb": [0]}}


def test_mig_gpus_are_drawn_with_their_instances_inside_and_held_instances_held():
    doc = snapshot_cluster(MIG, USED)
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
        rows = [r for r in node["devices"]["nvidia_gpu"] if "partition" in r]
        held = [r["partition"] for r in rows if r["state"] == "held"]
        assert seen["held"] == held and all(r["holders"] for r in rows if r["state"] == "held")
    by_host = {n["node_id"]: [r["partition"] for r in n["devices"]["nvidia_gpu"] if r.get("state") == "held"] for n in doc["nodes"]}
    expected = []
    for rel, node in zip(MIG, doc["nodes"]):
        parts = node["inventory"]["descriptions"][0]["partitions"]
        if rel.endswith("homogeneous"):
            expected.append([parts[2]["id"]])  # the third 1g.10gb instance: unit 2
        elif rel.endswith("mixed"):
            expected.append([p["id"] for p in parts if p["profile"] == "2g.20gb"])
        else:
            expected.append([])
    assert [by_host[n["node_id"]] for n in doc["nodes"]] == expected
    assert {r: o["total"] for r, o in doc["nodes"][1]["occupancy"].items()} == {
        "mig-1g.10gb": 1.0, "mig-2g.20gb": 1.0, "mig-3g.40gb": 1.0}
