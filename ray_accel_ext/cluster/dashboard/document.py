"""The ``/api/cluster`` document: the one thing the page renders and ``ray-accel cluster --format json`` prints.

It is :meth:`ClusterInventory.to_dict` (schema 1: ``summary``, ``domains``, ``nodes``,
``placement_groups``) plus, per node:

* ``occupancy``: per accelerator resource, ``total``, ``reserved`` (placement-group bundles on the
  node), ``used`` (holders outside a placement group), ``free``;
* ``devices``: per backend, one entry per device: ``state`` (``free``, ``held``, ``missing``),
  the ``holders`` (ids) and the latest ``utilization`` / ``memory_used`` / ``memory_total``,
  with ``history`` (``[[unix time, value], ...]``) for sparklines;
* ``advice``: each coded problem (``problems``) in plain words with the ``ray-accel doctor`` fix;
* ``ray_dashboard``: the path of the node's page in Ray's dashboard;

and at the top ``label_keys`` and ``group_by`` (the label keys the page reads), ``holders``
(tasks and actors holding accelerators, with the devices Ray gave them), ``project_metrics``
(placements and discovery totals with their history), ``sources`` (what answered) and
``ray_dashboard`` (its URL, when it runs). ``docs/operations.md`` documents every field.
"""

from __future__ import annotations

from typing import Any

from ...findings import finding_of
from ...labels import ACCELERATOR_TYPE, BLOCK, CLUSTER, DISCOVERY, FABRIC_DOMAIN, FABRIC_WORKER, RACK, SKU, partition_resource
from ...placement.choose import ACCELERATOR_RESOURCES
from ..inventory import ClusterInventory, ClusterNode
from .holders import HolderReport
from .metrics import MetricsHistory

__all__ = ["build_document", "accelerator_resources", "DOCUMENT_SCHEMA"]

DOCUMENT_SCHEMA = 1

# The label keys the page reads (it never spells a key itself), and those it offers to group by.
LABEL_KEYS = {"fabric_domain": FABRIC_DOMAIN, "fabric_worker": FABRIC_WORKER, "rack": RACK, "block": BLOCK, "cluster": CLUSTER,
              "accelerator_type": ACCELERATOR_TYPE, "sku": SKU, "discovery": DISCOVERY}
GROUP_BY = ("rack", "block", "cluster", "accelerator_type", "sku", "discovery")

# Ray dashboard routes (ray/dashboard/client/src/App.tsx, the 2.60 build; a hash router).
RAY_NODE_PAGE = "#/cluster/nodes/{node_id}"
RAY_ACTOR_PAGE = "#/actors/{id}"
RAY_TASK_PAGE = "#/jobs/{job_id}/tasks/{id}"


def accelerator_resources(inv: ClusterInventory) -> list[str]:
    """The resources devices are scheduled by: Ray's accelerator names plus every family's."""
    names = set(ACCELERATOR_RESOURCES)
    for n in inv.nodes:
        for d in n.inventory.descriptions if n.inventory else ():
            names.add(d.resource_name)
            names.update(partition_resource(p.profile) for p in d.partitions)
    return sorted(names)


def _slot_to_device(desc) -> Any:
    """Ray's instance slot of ``desc.resource_name`` -> device index (None when not 1:1 or per core)."""
    n = len(desc.devices)
    q = int(desc.resource_quantity)
    if n and q == n:
        return lambda s: s if 0 <= s < n else None
    cores = desc.devices[0].cores if desc.devices else None
    if n and cores and q == n * cores:
        return lambda s: s // cores if 0 <= s < q else None
    return lambda s: None


def _ray_page(holder: dict[str, Any]) -> str:
    if holder["kind"] == "actor":
        return RAY_ACTOR_PAGE.format(id=holder["id"])
    return RAY_TASK_PAGE.format(job_id=holder["job_id"] or "", id=holder["id"]) if holder["job_id"] else "#/jobs"


def _occupancy(node: ClusterNode, resources: list[str], pg_bundles: list[dict[str, Any]], holders: list[dict[str, Any]]) -> dict:
    out = {}
    for res in resources:
        total = float(node.resources.get(res, 0.0))
        if not total:
            continue
        reserved = sum(float(b["resources"].get(res, 0.0)) for b in pg_bundles)
        used = sum(float(h["resources"].get(res, 0.0)) for h in holders if not h["placement_group_id"])
        out[res] = {"total": total, "reserved": reserved, "used": used, "free": max(0.0, total - reserved - used)}
    return out


def _device_metrics(node: ClusterNode, desc, history: MetricsHistory | None) -> dict[int, dict[str, Any]]:
    if history is None:
        return {}
    family = {"GPU": "gpu", "TPU": "tpu"}.get(desc.resource_name)
    if family is None:
        return {}
    latest = history.device(node.node_id)
    by_uuid = {d.id: d.index for d in desc.devices}
    out: dict[int, dict[str, Any]] = {}
    for key, s in latest.items():
        if not key.startswith(family + ":"):
            continue
        index = by_uuid.get(s.uuid, s.index) if s.uuid else s.index
        out[index] = {
            "utilization": s.utilization, "memory_used": s.memory_used, "memory_total": s.memory_total,
            "history": {m: history.series("dev", node.node_id, family, str(s.index), m) for m in ("utilization", "memory_used")},
        }
    return out


def _units(desc) -> list[tuple[Any, int]]:
    """Each partition of ``desc`` with its unit of its profile's resource (Ray's slot: the
    instances of one profile counted in the description's order)."""
    seen: dict[str, int] = {}
    out = []
    for part in desc.partitions:
        out.append((part, seen.get(part.profile, 0)))
        seen[part.profile] = out[-1][1] + 1
    return out


def _devices(node: ClusterNode, holders: list[dict[str, Any]], history: MetricsHistory | None) -> dict[str, list[dict]]:
    missing = {m.get("pci_address") for m in (node.health or {}).get("missing", []) if m.get("pci_address")}
    failed = {d.get("device"): d.get("reason") for d in (node.health or {}).get("devices", []) if d.get("health") == 0}
    out: dict[str, list[dict]] = {}
    if node.inventory is None:  # not probed (a drained node takes no probe): the watcher's view
        for d in sorted((node.health or {}).get("devices", []), key=lambda d: str(d.get("index"))):
            if d.get("backend") and d.get("index") is not None:
                out.setdefault(d["backend"], []).append({"index": d["index"], "state": "failed" if d.get("health") == 0 else "free",
                                                         "holders": [], **({"fault": d["reason"]} if d.get("reason") else {})})
    for desc in node.inventory.descriptions if node.inventory else ():
        to_device = _slot_to_device(desc)
        held: dict[int, list[str]] = {}
        for h in holders:
            for slot in (h["slots"] or {}).get(desc.resource_name, []):
                index = to_device(slot)
                if index is not None:
                    held.setdefault(index, []).append(h["id"])
                    h["devices"].append([desc.backend, index])
        metrics = _device_metrics(node, desc, history)
        rows = []
        for d in desc.devices:
            state = "missing" if d.pci_address in missing else ("held" if d.index in held else "free")
            state = "failed" if d.id in failed else state
            rows.append({"index": d.index, "state": state, "holders": sorted(set(held.get(d.index, []))), **metrics.get(d.index, {}),
                         **({"fault": failed[d.id]} if d.id in failed else {})})
        for part, unit in _units(desc):  # MIG instances drawn inside their GPU; unit: Ray's slot
            ids = sorted({h["id"] for h in holders if unit in (h["slots"] or {}).get(partition_resource(part.profile), [])})
            state = "failed" if part.device in failed else ("held" if ids else "free")
            rows.append({"index": None, "partition": part.id, "profile": part.profile, "parent": part.device,
                         "state": state, "holders": ids})
        out[desc.backend] = rows
    return out


def build_document(
    inv: ClusterInventory,
    *,
    holders: HolderReport | None = None,
    metrics: MetricsHistory | None = None,
    ray_dashboard: str | None = None,
    errors: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The ``/api/cluster`` document (see the module doc); pure given its inputs."""
    doc = inv.to_dict()
    doc["document_schema"] = DOCUMENT_SCHEMA
    resources = accelerator_resources(inv)
    items = [h.to_dict() for h in holders.holders] if holders is not None else []
    for h in items:
        h["devices"] = []
        h["ray_dashboard"] = _ray_page(h)
    by_node: dict[str, list[dict]] = {}
    for h in items:
        by_node.setdefault(h["node_id"], []).append(h)
    bundles: dict[str, list[dict]] = {}
    for pg in inv.placement_groups:
        for b in pg.bundles:
            if b["node_id"]:
                bundles.setdefault(b["node_id"], []).append(b)
    totals = {"devices": 0, "free": 0, "held": 0, "missing": 0, "failed": 0}
    for node, entry in zip(inv.nodes, doc["nodes"]):
        mine = by_node.get(node.node_id, [])
        entry["occupancy"] = _occupancy(node, resources, bundles.get(node.node_id, []), mine)
        entry["devices"] = _devices(node, mine, metrics)
        entry["holders"] = [h["id"] for h in mine]
        entry["advice"] = [finding_of(p).to_dict() for p in node.problems()]
        entry["ray_dashboard"] = RAY_NODE_PAGE.format(node_id=node.node_id)
        for rows in entry["devices"].values():
            for row in rows:
                if "partition" in row:
                    continue  # a MIG instance: counted as its GPU
                totals["devices"] += 1
                totals[row["state"]] += 1
    doc["summary"].update({"devices_" + k: v for k, v in totals.items() if k != "devices"}, holders=len(items))
    doc["holders"] = items
    doc["project_metrics"] = metrics.project() if metrics is not None else {}
    doc["ray_dashboard"] = ray_dashboard
    doc["label_keys"] = dict(LABEL_KEYS)
    doc["group_by"] = [LABEL_KEYS[k] for k in GROUP_BY]
    doc["sources"] = {
        "holders": (holders.to_dict()["sources"] if holders is not None
                    else {"raylet_node_stats": "not asked", "ray_state_api": "not asked"}),
        "metrics": ({"nodes_scraped": metrics.nodes_scraped, "errors": dict(sorted(metrics.errors.items()))}
                    if metrics is not None else {"nodes_scraped": 0, "errors": {}}),
        **(errors or {}),
    }
    return doc

