"""Inventory assembly from Ray's answers (no cluster needed): grouping, placement groups, marks.

The inputs have the exact shapes of ``ray.nodes()``, ``ray.util.placement_group_table()`` and the
probe task's result; the multi-node path through real Ray is in tests/cluster/test_dashboard.py.
"""

from __future__ import annotations

from ray_accel_ext.cluster.inventory import assemble
from ray_accel_ext.model import Device, Fabric, NodeDescription, NodeInventory, Sku


def _node(node_id: str, labels: dict[str, str], head: bool = False) -> dict:
    resources = {"CPU": 1.0, f"node:127.0.0.{len(node_id)}": 1.0}
    if head:
        resources["node:__internal_head__"] = 1.0
    return {"NodeID": node_id, "Alive": True, "NodeManagerAddress": "127.0.0.1", "NodeManagerHostname": "vm",
            "Labels": {"ray.io/node-id": node_id, **labels}, "Resources": resources}


def _probe(hostname: str, fabric: Fabric | None = None, n: int = 4) -> dict:
    desc = NodeDescription(
        backend="tpu", sku=Sku(vendor="google", name="tpu-v6e", generation="v6e"), resource_name="TPU",
        resource_quantity=n, devices=tuple(Device(index=i, id=f"chip{i}") for i in range(n)), fabric=fabric,
    )
    return {"inventory": NodeInventory(descriptions=(desc,)).to_dict(), "hostname": hostname}


def test_grouping_placement_groups_and_marks():
    slice_a = Fabric(kind="tpu-slice", id="slice-a", hosts=4, worker=0, topology="4x4", product="v6e-16")
    nodes = [
        _node("a" * 56, {"rayaccel.io/fabric-domain": "slice-a", "rayaccel.io/fabric-hosts": "4",
                         "rayaccel.io/fabric-worker": "1", "rayaccel.io/fabric-topology": "4x4"}),
        _node("b" * 56, {"rayaccel.io/fabric-domain": "slice-a", "rayaccel.io/fabric-hosts": "4",
                         "rayaccel.io/fabric-worker": "0"}),
        _node("c" * 56, {"rayaccel.io/rack": "r7"}),
        _node("d" * 56, {"rayaccel.io/discovery": "degraded"}, head=True),
        {**_node("e" * 56, {}), "Alive": False},
    ]
    probes = {"a" * 56: _probe("w1", slice_a), "b" * 56: _probe("w0", slice_a), "c" * 56: "GetTimeoutError: probe timed out"}
    pgs = {
        "pg1": {"name": "train", "state": "CREATED", "strategy": "STRICT_SPREAD",
                "bundles": {0: {"TPU": 4.0}, 1: {"TPU": 4.0}}, "bundles_to_node_id": {0: "a" * 56, 1: "b" * 56}},
        "pg2": {"name": "waiting", "state": "PENDING", "strategy": "PACK", "bundles": {0: {"GPU": 8.0}},
                "bundles_to_node_id": {0: ""}},
        "pg3": {"name": "gone", "state": "REMOVED", "strategy": "PACK", "bundles": {}, "bundles_to_node_id": {}},
    }
    health = {"c" * 56: {"status": "degraded", "reasons": ["rdma nic mlx5_0 disappeared after the node started"]}}
    inv = assemble(nodes, probes, pgs, health=health)

    assert [(d.level, d.id, d.kind) for d in inv.domains] == [
        ("fabric", "slice-a", "tpu-slice"), ("rack", "r7", "rack"), ("host", "vm", "host")]
    slice_dom = inv.domains[0]
    assert slice_dom.node_ids == ["b" * 56, "a" * 56]  # worker order
    assert slice_dom.expected_hosts == 4 and slice_dom.complete is False and slice_dom.product == "v6e-16"
    assert slice_dom.placement_groups == ["pg1"]
    assert [p.name for p in inv.placement_groups] == ["train", "waiting"]
    waiting = inv.placement_groups[1]
    assert waiting.domains == [] and waiting.bundles[0]["node_id"] is None

    rack = inv.node("c" * 56)
    assert rack.inventory is None and rack.degraded
    assert rack.reasons() == ["inventory probe failed: GetTimeoutError: probe timed out",
                              "rdma nic mlx5_0 disappeared after the node started"]
    head = inv.node("d" * 56)
    assert head.is_head and head.reasons() == ["started with rayaccel.io/discovery=degraded (see the node's ray start log)"]
    assert inv.node("a" * 56).hostname == "w1" and not inv.node("a" * 56).degraded
    data = inv.to_dict()
    assert data["summary"] == {"nodes": 4, "domains": 3, "degraded": 2, "placement_groups": 2, "devices": 8}
    assert "e" * 56 not in {n["node_id"] for n in data["nodes"]}
