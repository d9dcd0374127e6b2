"""A cluster of any size for the dashboard's browser tests and benchmark, built from recorded hosts.

Every node is a recorded snapshot's expected description (``tests/data/hosts/<family>/<scenario>/
expected.json``) with its identity changed the way a real fleet differs: hostnames, TPU slice
names and worker ids (what the KubeRay TPU webhook sets as ``TPU_NAME``/``TPU_WORKER_ID``), chip
coordinates of each worker's 2x2 block in the slice (as the recorded v6e 4x4 workers 0 and 3
have them), NVLink clique ids and tray ranks, UltraServer ids, GPU UUIDs. PCIe paths come from
:func:`ray_accel_ext.cluster.topology.pcie_paths` run on the snapshot itself. The rest goes through
the code the dashboard runs on a live cluster: :func:`~ray_accel_ext.cluster.inventory.assemble`
over ``ray.nodes()``-shaped dicts and a ``placement_group_table()``-shaped dict,
:func:`~ray_accel_ext.cluster.dashboard.merge_holders` over rows shaped like the raylet's worker
stats and Ray's state API, :class:`~ray_accel_ext.cluster.dashboard.MetricsHistory` over
Prometheus text with the metric names and labels of Ray's reporter agent, and
:func:`~ray_accel_ext.cluster.dashboard.build_document`.

The mix repeats every 39 nodes: two TPU v6e 4x4 slices (4 hosts each, every fifth slice missing a
host), one GB200 NVL72 NVLink domain of 18 trays (every third with 16), four H100 DGX hosts in a
rack, one Trn2 UltraServer (4 hosts), one degraded v6e host (metadata server timed out), one L4
host and a CPU-only host; the last unit is cut short to hit the size exactly.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import uuid
from functools import lru_cache
from typing import Any

from ray_accel_ext.cluster.dashboard import MetricsHistory, build_document, merge_holders
from ray_accel_ext.cluster.dashboard.document import accelerator_resources
from ray_accel_ext.cluster.dashboard.holders import HolderReport
from ray_accel_ext.cluster.inventory import assemble
from ray_accel_ext.cluster.topology import pcie_paths
from ray_accel_ext.host import open_host
from ray_accel_ext.labels import (
    FABRIC_DOMAIN,
    FABRIC_WORKER,
    GPU_DOMAIN,
    NODE_ID,
    RACK,
    TPU_SLICE_NAME,
    TPU_WORKER_ID,
)
from ray_accel_ext.node.discovery import discover
from tests.support.paths import HOSTS

__all__ = ["synthetic_cluster", "snapshot_cluster", "demo_snapshots", "SNAPSHOT_OF"]

SNAPSHOT_OF = {
    "tpu": "tpu/gke-v6e-4x4-worker0",
    "gb200": "nvidia_gpu/gb200-nvl72-tray",
    "h100": "nvidia_gpu/h100-sxm-8gpu-dgx",
    "trn2u": "neuron/trn2u-48xlarge-node1",
    "degraded": "tpu/gce-v6e-4-metadata-timeout",
    "l4": "nvidia_gpu/l4-single-pcie",
}
_UNITS = ("tpu", "gb200", "tpu", "h100", "trn2u", "degraded", "l4", "cpu")


@lru_cache(maxsize=None)
def _recorded(kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(expected.json, pcie paths) of a snapshot; the paths computed on the snapshot's own sysfs."""
    snap = HOSTS / SNAPSHOT_OF.get(kind, kind)
    expected = json.loads((snap / "expected.json").read_text())
    host = open_host(snap)
    return expected, pcie_paths(host, discover(host))


def _node_id(i: int) -> str:
    return hashlib.sha224(f"synthetic-node-{i}".encode()).hexdigest()


def _gpu_uuid(host: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host}.{index}"))


class _Builder:
    def __init__(self, evil: str) -> None:
        self.evil = evil
        self.ray_nodes: list[dict[str, Any]] = []
        self.probes: dict[str, Any] = {}
        self.health: dict[str, Any] = {}
        self.pgs: dict[str, Any] = {}
        self.workers: dict[str, list[dict[str, Any]]] = {}
        self.actors: list[dict[str, Any]] = []
        self.tasks: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}

    def _count(self, kind: str) -> int:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return self.counts[kind] - 1

    def node(self, kind: str, hostname: str, *, labels: dict[str, str] | None = None, desc_edit=None,
             resources: dict[str, float] | None = None) -> str:
        i = len(self.ray_nodes)
        node_id = _node_id(i)
        hostname = hostname + self.evil
        if kind == "cpu":
            base_labels, base_res, probe = {"rayaccel.io/discovery": "ok", "rayaccel.io/schema": "1"}, {}, {"descriptions": []}
            pcie: dict[str, Any] = {}
        else:
            expected, pcie = _recorded(kind)
            base_labels, base_res = dict(expected["ray"]["labels"]), dict(expected["ray"]["resources"])
            probe = {"descriptions": copy.deepcopy(expected["descriptions"]), "problems": copy.deepcopy(expected["problems"])}
            for desc in probe["descriptions"]:
                if self.evil:
                    desc["problems"] = [*desc["problems"], f"synthetic reason {self.evil}"] if kind == "degraded" else desc["problems"]
                if desc_edit is not None:
                    desc_edit(desc)
        base_labels.update(labels or {})
        base_labels[NODE_ID] = node_id
        if self.evil:
            base_labels["example.com/note"] = self.evil
            base_labels["example.com/" + self.evil] = "key"
        res = {"CPU": 8.0, "memory": 64e9, f"node:10.0.{i // 250}.{i % 250}": 1.0, **base_res, **(resources or {})}
        if i == 0:
            res["node:__internal_head__"] = 1.0
        self.ray_nodes.append({
            "NodeID": node_id, "Alive": True, "Labels": base_labels, "Resources": res,
            "NodeManagerAddress": f"10.0.{i // 250}.{i % 250}", "NodeManagerHostname": hostname,
            "NodeManagerPort": 40000, "MetricsExportPort": 8080,
        })
        self.probes[node_id] = {"inventory": {**probe, "elapsed_s": 0.05}, "hostname": hostname, "root": None, "pcie": pcie}
        return node_id

    def pg(self, name: str, node_ids: list[str], per_bundle: dict[str, float], state: str = "CREATED") -> str:
        pg_id = hashlib.sha1(f"pg-{name}".encode()).hexdigest()[:36]
        self.pgs[pg_id] = {
            "placement_group_id": pg_id, "name": name + self.evil, "strategy": "STRICT_SPREAD", "state": state,
            "bundles": {i: dict(per_bundle) for i in range(len(node_ids))},
            "bundles_to_node_id": {i: (nid if state == "CREATED" else "") for i, nid in enumerate(node_ids)},
        }
        return pg_id

    def actor(self, node_id: str, name: str, resource: str, slots: list[int], pg_id: str | None, job: str = "02000000") -> None:
        actor_id = hashlib.md5(f"actor-{node_id}-{name}".encode()).hexdigest()[:24] + job
        worker_id = hashlib.sha224(f"worker-{actor_id}".encode()).hexdigest()
        pid = 1000 + len(self.actors) + len(self.tasks)
        self.workers.setdefault(node_id, []).append({"worker_id": worker_id, "pid": pid, "actor_id": actor_id, "job_id": job,
                                                     "used": {resource: slots}})
        self.actors.append({"actor_id": actor_id, "class_name": "TrainWorker" + self.evil, "name": name + self.evil,
                            "state": "ALIVE", "job_id": job, "node_id": node_id, "pid": pid,
                            "required_resources": {resource: float(len(slots)), "CPU": 1.0}, "placement_group_id": pg_id})

    def task(self, node_id: str, name: str, resource: str, slots: list[int], job: str = "03000000") -> None:
        task_id = hashlib.md5(f"task-{node_id}-{name}".encode()).hexdigest()[:40] + job
        worker_id = hashlib.sha224(f"worker-{task_id}".encode()).hexdigest()
        pid = 1000 + len(self.actors) + len(self.tasks)
        self.workers.setdefault(node_id, []).append({"worker_id": worker_id, "pid": pid, "actor_id": "f" * 32, "job_id": job,
                                                     "used": {resource: slots}})
        self.tasks.append({"task_id": task_id, "name": name + self.evil, "func_or_class_name": name, "state": "RUNNING",
                           "type": "NORMAL_TASK", "job_id": job, "node_id": node_id, "worker_id": worker_id, "worker_pid": pid,
                           "required_resources": {resource: float(len(slots))}, "placement_group_id": None, "actor_id": None})

    # -- units ----------------------------------------------------------------------------

    def tpu_slice(self, budget: int) -> None:
        k = self._count("tpu")
        name = f"v6e-slice-{k:03d}{self.evil}"
        present = [w for w in range(4) if not (k % 5 == 4 and w == 2)][:budget]
        ids = []
        for w in present:
            ox, oy = (w % 2) * 2, (w // 2) * 2

            def edit(desc, w=w, ox=ox, oy=oy):
                desc["fabric"].update(id=name, worker=w, hostnames=[f"{name}-w-{j}" for j in range(4)])
                for d, (dx, dy) in zip(desc["devices"], ((0, 0), (1, 0), (0, 1), (1, 1))):
                    d["coords"] = [ox + dx, oy + dy]

            res = {name: 1.0, **({"TPU-v6e-16-head": 1.0} if w == 0 else {})}
            ids.append(self.node("tpu", f"gke-tpu-v6e-{k:03d}-w{w}", desc_edit=edit, resources=res, labels={
                TPU_SLICE_NAME: name, TPU_WORKER_ID: str(w), FABRIC_DOMAIN: name, FABRIC_WORKER: str(w),
                RACK: f"sb{(k * 2 + w // 2) % 40}"}))
        if k % 3 == 0 and len(ids) == 4:
            pg = self.pg(f"jax-train-{k:03d}", ids, {"TPU": 4.0})
            for nid in ids:
                self.actor(nid, f"jax-worker-{k:03d}", "TPU", [0, 1, 2, 3], pg)
        elif k % 3 == 1 and ids:
            self.task(ids[0], f"tpu-eval-{k:03d}", "TPU", [0, 1])

    def gb200(self, budget: int) -> None:
        k = self._count("gb200")
        domain = f"{uuid.uuid5(uuid.NAMESPACE_DNS, f'nvl72-{k}')}.{32766 - k}{self.evil}"
        trays = [t for t in range(18) if not (k % 3 == 2 and t in (7, 12))][:budget]
        ids = []
        for t in trays:
            host = f"nvl72-d{k:02d}-tray{t:02d}"

            def edit(desc, t=t, host=host):
                desc["fabric"].update(id=domain, worker=t)
                for d in desc["devices"]:
                    d["id"] = _gpu_uuid(host, d["index"])

            ids.append(self.node("gb200", host, desc_edit=edit, labels={GPU_DOMAIN: domain, FABRIC_DOMAIN: domain,
                                                                       FABRIC_WORKER: str(t)}))
        if k % 2 == 0 and len(ids) >= 8:
            pg = self.pg(f"llm-serve-nvl72-{k:02d}", ids[:8], {"GPU": 4.0})
            for nid in ids[:8]:
                self.actor(nid, f"vllm-replica-{k:02d}", "GPU", [0, 1, 2, 3], pg)
        if k % 2 == 1 and len(ids) >= 4:
            self.pg(f"llm-pending-{k:02d}", ids[:4], {"GPU": 4.0}, state="PENDING")

    def h100(self, budget: int) -> None:
        for _ in range(min(4, budget)):
            k = self._count("h100")
            host = f"dgx-h100-{k:03d}"

            def edit(desc, host=host):
                desc["fabric"].update(id=host)
                for d in desc["devices"]:
                    d["id"] = _gpu_uuid(host, d["index"])

            nid = self.node("h100", host, desc_edit=edit, labels={FABRIC_DOMAIN: host, RACK: f"h100-rack-{k // 4:02d}"})
            if k % 2 == 0:
                self.task(nid, f"finetune-{k:03d}", "GPU", [0, 1, 2, 3])
            if k % 7 == 3:
                self.health[nid] = {"status": "degraded", "added": [], "events": [],
                                    "reasons": [f"accelerator 0000:1a:00.0 (0x10de:0x2330) disappeared after the node started{self.evil}"],
                                    "problems": [{"code": "device-gone", "message": "accelerator 0000:1a:00.0 (0x10de:0x2330) "
                                                  f"disappeared after the node started{self.evil}"}],
                                    "missing": [{"key": "pci:0000:1a:00.0", "kind": "accelerator", "pci_address": "0000:1a:00.0"}]}

    def trn2u(self, budget: int) -> None:
        k = self._count("trn2u")
        server = f"{hashlib.md5(f'us-{k}'.encode()).hexdigest()[:16]}{self.evil}"
        for w in range(min(4, budget)):
            def edit(desc, w=w):
                desc["fabric"].update(id=server, worker=w)
                for d in desc["devices"]:
                    d["coords"] = [d["coords"][0], d["coords"][1], w]

            nid = self.node("trn2u", f"trn2u-{k:02d}-n{w}", desc_edit=edit, labels={FABRIC_DOMAIN: server, FABRIC_WORKER: str(w)})
            if w == 0:
                self.actor(nid, f"neuron-train-{k:02d}", "neuron_cores", list(range(16)), None)

    def single(self, kind: str, budget: int) -> None:
        k = self._count(kind)
        if budget <= 0:
            return
        host = {"degraded": "tpu-v6e-md-timeout", "l4": "g2-l4", "cpu": "cpu"}[kind] + f"-{k:03d}"
        labels = {RACK: f"misc-rack-{k % 8}"} if kind != "degraded" else {}

        def edit(desc):
            if desc.get("fabric"):
                desc["fabric"].update(id=host + self.evil)
            for d in desc["devices"]:
                d["id"] = _gpu_uuid(host, d["index"]) if desc["resource_name"] == "GPU" else d["id"]

        if kind == "l4":
            labels[FABRIC_DOMAIN] = host + self.evil
        self.node(kind, host, labels=labels, desc_edit=edit)


def _exposition(b: _Builder, rounds: int, r: int) -> dict[str, str]:
    """Prometheus text per node for round ``r``, as Ray's reporter agent names and labels it."""
    texts: dict[str, str] = {}
    for i, n in enumerate(b.ray_nodes):
        probe = b.probes[n["NodeID"]]["inventory"]["descriptions"]
        lines = []
        tags = f'IsHeadNode="false",RayNodeType="worker",SessionName="session_synthetic",ip="{n["NodeManagerAddress"]}"'
        for desc in probe:
            for d in desc["devices"]:
                phase = math.sin((r + i * 0.7 + d["index"]) / 3.0)
                util = round(50 + 45 * phase, 1)
                if desc["resource_name"] == "GPU":
                    dev = f'GpuDeviceName="{desc["sku"]["product"]}",GpuIndex="{d["index"]}",GpuUuid="{d["id"]}",{tags}'
                    used_mib = int((d["memory_bytes"] or 0) / 2**20 * (0.3 + 0.3 * (phase + 1)))
                    total_mib = int((d["memory_bytes"] or 0) / 2**20)
                    lines += [f"ray_node_gpus_utilization{{{dev}}} {util}", f"ray_node_gram_used{{{dev}}} {used_mib}",
                              f"ray_node_gram_available{{{dev}}} {total_mib - used_mib}"]
                elif desc["resource_name"] == "TPU":
                    dev = f'TpuDeviceName="tpu{d["index"]}",TpuIndex="{d["index"]}",TpuTopology="4x4",TpuType="v6e",{tags}'
                    total = d["memory_bytes"] or 0
                    lines += [f"ray_tpu_tensorcore_utilization{{{dev}}} {util}",
                              f"ray_tpu_memory_used{{{dev}}} {int(total * (0.2 + 0.3 * (phase + 1)))}",
                              f"ray_tpu_memory_total{{{dev}}} {total}"]
        if i == 0:
            lines += [f'ray_rayaccel_placements_total{{outcome="ready",level="fabric",{tags}}} {10 + r}',
                      f'ray_rayaccel_placements_total{{outcome="timeout",level="fabric",{tags}}} {r // 4}',
                      f'ray_rayaccel_nodes{{discovery="ok",{tags}}} {len(b.ray_nodes) - b.counts.get("degraded", 0)}',
                      f'ray_rayaccel_nodes{{discovery="degraded",{tags}}} {b.counts.get("degraded", 0)}']
        texts[n["NodeID"]] = "\n".join(lines) + "\n"
    return texts


def synthetic_cluster(size: int, *, evil: str = "", rounds: int = 12) -> dict[str, Any]:
    """The ``/api/cluster`` document of a ``size``-node cluster (see the module doc).

    ``evil`` is appended to every string the cluster supplies (hostnames, a label, slice and
    domain ids, reasons, placement-group, actor and task names) to test that the page shows it
    as text. ``rounds`` metric scrapes make the sparklines.
    """
    b = _Builder(evil)
    unit = 0
    while len(b.ray_nodes) < size:
        budget = size - len(b.ray_nodes)
        kind = _UNITS[unit % len(_UNITS)]
        unit += 1
        if kind == "tpu":
            b.tpu_slice(budget)
        elif kind == "gb200":
            b.gb200(budget)
        elif kind == "h100":
            b.h100(budget)
        elif kind == "trn2u":
            b.trn2u(budget)
        else:
            b.single(kind, budget)
    inv = assemble(b.ray_nodes, b.probes, b.pgs, health=b.health, ray_version="2.60.0")
    report = HolderReport(merge_holders(b.workers, b.actors, b.tasks, accelerator_resources(inv)))
    history = MetricsHistory(keep=rounds)
    t0 = inv.gathered_at - rounds * 3
    for r in range(rounds):
        history.record(t0 + r * 3, _exposition(b, rounds, r))
    return build_document(inv, holders=report, metrics=history, ray_dashboard="http://10.0.0.0:8265")


def demo_snapshots() -> list[str]:
    """The snapshots ``ray-accel demo`` runs on (``ci/build_demo_hosts.py``), relative to tests/data/hosts."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_demo_hosts", HOSTS.parents[2] / "ci" / "build_demo_hosts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [rel for _name, rel in module.DEMO_NODES]


def snapshot_cluster(snapshots: list[str], used: dict[str, dict[str, list[int]]] | None = None) -> dict[str, Any]:
    """The document of a cluster with one node per recorded snapshot, each exactly as recorded
    (its expected description, labels and resources), assembled as ``ray-accel cluster`` does.
    ``used``: per snapshot, the resource slots one worker there holds (as its raylet reports them)."""
    b = _Builder("")
    for rel in snapshots:
        expected, _ = _recorded(rel)
        hostname = (HOSTS / rel / "rootfs/proc/sys/kernel/hostname").read_text().strip()
        node_id = b.node(rel, hostname)
        if rel in (used or {}):
            b.workers.setdefault(node_id, []).append({"worker_id": node_id[:40] + "w" * 16, "pid": 7, "job_id": "01000000",
                                                      "actor_id": "f" * 32, "used": used[rel]})
    inv = assemble(b.ray_nodes, b.probes, {}, ray_version="2.60.0")
    report = HolderReport(merge_holders(b.workers, None, None, accelerator_resources(inv)))
    return build_document(inv, holders=report)
