"""Who holds which accelerators: the tasks and actors Ray has given devices to.

Two sources, joined by worker id (both measured on Ray 2.60):

* every raylet's ``GetNodeStats`` reply, the call ``ray memory`` makes
  (``ray/_private/internal_api.py`` ``node_stats``): each worker's ``used_resources`` holds, per
  resource, the instance *slots* Ray assigned, which are the device ids the worker sees
  (``CUDA_VISIBLE_DEVICES``, ``TPU_VISIBLE_CHIPS``, ``NEURON_RT_VISIBLE_CORES``;
  ``CoreWorkerStats`` in ``src/ray/protobuf/common.proto``). Needs no Ray dashboard;
* Ray's state API (``ray.util.state.list_actors`` / ``list_tasks``, served by the Ray dashboard):
  names, classes, jobs and placement groups of the holders.

Either may be missing (no Ray dashboard; another Ray version): the report says which, and keeps
what the other source gave. Nothing here raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Holder", "HolderReport", "merge_holders", "read_holders", "ray_dashboard_url"]

_NIL = {"", "0" * 32, "f" * 32, "0" * 56, "f" * 56}
# Inside a placement group a worker holds "<resource>_group_<bundle>_<pg id>" and
# "<resource>_group_<pg id>" (FormatPlacementGroupResource, src/ray/common/bundle_spec.cc).
_PG_RESOURCE = re.compile(r"^(?P<base>.+?)_group_(?:\d+_)?[0-9a-f]{36}$")
_TIMEOUT_S = 5.0


@dataclass
class Holder:
    """A task or actor holding accelerators on one node."""

    kind: str  # "actor" | "task"
    id: str
    node_id: str
    name: str = ""
    job_id: str | None = None
    worker_id: str | None = None
    pid: int | None = None
    placement_group_id: str | None = None
    resources: dict[str, float] = field(default_factory=dict)
    slots: dict[str, list[int]] | None = None  # resource -> instance slots; None when Ray did not say

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "id": self.id, "node_id": self.node_id, "name": self.name, "job_id": self.job_id,
            "worker_id": self.worker_id, "pid": self.pid, "placement_group_id": self.placement_group_id,
            "resources": dict(sorted(self.resources.items())),
            "slots": {k: sorted(v) for k, v in sorted(self.slots.items())} if self.slots is not None else None,
        }


@dataclass
class HolderReport:
    """The holders, and what could not be read (``None`` when the source answered)."""

    holders: list[Holder]
    node_stats_error: str | None = None
    state_api_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": [h.to_dict() for h in self.holders],
            "sources": {"raylet_node_stats": self.node_stats_error or "ok", "ray_state_api": self.state_api_error or "ok"},
        }


def _id(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.hex()
    text = str(value or "")
    return None if text in _NIL else text


def _row(row: Any) -> dict[str, Any]:
    if isinstance(row, Mapping):
        return dict(row)
    return {k: getattr(row, k) for k in dir(row) if not k.startswith("_") and not callable(getattr(row, k))}


def merge_holders(
    workers: Mapping[str, Iterable[Mapping[str, Any]]] | None,
    actors: Iterable[Any] | None,
    tasks: Iterable[Any] | None,
    accelerator_resources: Iterable[str],
) -> list[Holder]:
    """Holders from raylet worker stats (node id -> ``{"worker_id", "pid", "actor_id", "job_id",
    "used": {resource: [slot, ...]}}``) and state API rows (``ActorState`` / ``TaskState``, or
    their dicts). Pure; either source may be None."""
    wanted = set(accelerator_resources)
    holders: dict[tuple[str, str], Holder] = {}
    by_worker: dict[str, Holder] = {}
    by_actor: dict[str, Holder] = {}
    for node_id, rows in (workers or {}).items():
        for w in rows:
            used: dict[str, list[int]] = {}
            for name, slots in (w.get("used") or {}).items():
                m = _PG_RESOURCE.match(name)
                base = m["base"] if m else name
                if base in wanted and slots:
                    used[base] = sorted(set(used.get(base, [])) | {int(s) for s in slots})
            if not used:
                continue
            actor = _id(w.get("actor_id"))
            worker = _id(w.get("worker_id")) or ""
            h = Holder(kind="actor" if actor else "task", id=actor or worker, node_id=node_id, job_id=_id(w.get("job_id")),
                       worker_id=worker or None, pid=w.get("pid"), resources={k: float(len(v)) for k, v in used.items()},
                       slots=used)
            holders[(h.kind, h.id)] = h
            by_worker[worker] = h
            if actor:
                by_actor[actor] = h

    def accel(required: Any) -> dict[str, float]:
        return {k: float(v) for k, v in dict(required or {}).items() if k in wanted and v}

    for raw in actors or ():
        row = _row(raw)
        need = accel(row.get("required_resources"))
        actor = _id(row.get("actor_id"))
        if not actor or (not need and actor not in by_actor):
            continue
        h = by_actor.get(actor)
        if h is None:
            h = holders[("actor", actor)] = Holder(kind="actor", id=actor, node_id=_id(row.get("node_id")) or "", resources=need)
        h.name = str(row.get("name") or row.get("class_name") or "")
        h.job_id = _id(row.get("job_id")) or h.job_id
        h.pid = row.get("pid") or h.pid
        h.placement_group_id = _id(row.get("placement_group_id"))
        h.resources = need or h.resources
    for raw in tasks or ():
        row = _row(raw)
        if _id(row.get("actor_id")) or str(row.get("type", "NORMAL_TASK")) != "NORMAL_TASK":
            continue  # actor methods run inside the actor, which is the holder
        need = accel(row.get("required_resources"))
        worker = _id(row.get("worker_id")) or ""
        task = _id(row.get("task_id"))
        if not task or (not need and worker not in by_worker):
            continue
        h = by_worker.pop(worker, None)
        if h is not None:
            holders.pop((h.kind, h.id), None)
            h.id = task
        else:
            h = Holder(kind="task", id=task, node_id=_id(row.get("node_id")) or "", worker_id=worker or None, resources=need)
        holders[("task", task)] = h
        h.name = str(row.get("name") or row.get("func_or_class_name") or "")
        h.job_id = _id(row.get("job_id")) or h.job_id
        h.pid = row.get("worker_pid") or h.pid
        h.placement_group_id = _id(row.get("placement_group_id"))
        h.resources = need or h.resources
    return sorted(holders.values(), key=lambda h: (h.node_id, h.kind, h.name, h.id))


def _node_workers(address: str, port: int) -> list[dict[str, Any]]:
    # Private: the raylet RPC behind `ray memory` (ray/_private/internal_api.py, Ray 2.60).
    from ray._private.internal_api import node_stats

    reply = node_stats(address, port, include_memory_info=False)
    return [
        {"worker_id": w.worker_id.hex(), "pid": w.pid, "actor_id": w.actor_id.hex(), "job_id": w.job_id.hex(),
         "used": {k: [s.slot for s in v.resource_slots] for k, v in w.used_resources.items()}}
        for w in reply.core_workers_stats
    ]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def read_holders(views: Iterable[Any], accelerator_resources: Iterable[str], dashboard_url: str | None) -> HolderReport:
    """Ask every alive node's raylet and, when the Ray dashboard runs at ``dashboard_url``
    (:func:`ray_dashboard_url`), Ray's state API; see the module doc."""
    workers: dict[str, list[dict[str, Any]]] = {}
    stats_error = None
    targets = [v for v in views if v.address and v.manager_port]

    def one(view):
        try:
            return view, _node_workers(view.address, view.manager_port), None
        except Exception as exc:  # noqa: BLE001 - private API or unreachable node: counts still come from the state API
            return view, None, exc

    if targets:
        with ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
            for view, rows, exc in pool.map(one, targets):
                if rows is not None:
                    workers[view.node_id] = rows
                else:
                    stats_error = f"{view.hostname or view.node_id[:12]}: {_first_line(exc)}"
    actors = tasks = None
    state_error = None if dashboard_url else "Ray's state API is served by the Ray dashboard, which is not running"
    try:
        if state_error:
            raise LookupError(state_error)
        from ray.util.state import list_actors, list_tasks

        actors = list_actors(address=dashboard_url, filters=[("state", "=", "ALIVE")], detail=True, limit=10_000,
                             timeout=_TIMEOUT_S, raise_on_missing_output=False)
        tasks = list_tasks(address=dashboard_url, filters=[("state", "=", "RUNNING")], detail=True, limit=10_000,
                           timeout=_TIMEOUT_S, raise_on_missing_output=False)
    except LookupError:
        pass
    except Exception as exc:  # noqa: BLE001 - the state API needs the Ray dashboard, which is optional
        state_error = f"Ray's state API did not answer: {_first_line(exc)}"
    return HolderReport(merge_holders(workers, actors, tasks, accelerator_resources), stats_error, state_error)


def ray_dashboard_url() -> str | None:
    """``http://host:port`` of the connected cluster's Ray dashboard, from the GCS key Ray's own
    clients read (``ray/dashboard/utils.py`` ``ray_address_to_api_server_url``), or None."""
    try:
        from ray.experimental.internal_kv import _internal_kv_get

        value = _internal_kv_get("dashboard", namespace="dashboard")
    except Exception:  # noqa: BLE001 - not connected, or no dashboard
        return None
    return f"http://{value.decode()}" if value else None
