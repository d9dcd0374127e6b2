"""The conformance suite's live isolation check: a real ``ray start`` node through the hook, and
tasks that hold the backend's devices, each step failing with its own message."""

from __future__ import annotations

import os
from typing import Any

from ..backend import AcceleratorBackend
from ..model import NodeDescription
from .settings import Snapshot

__all__ = ["check_isolation", "barrier_actor"]


def _ask(resource: str, n: int) -> dict[str, Any]:
    return {"num_gpus": n} if resource == "GPU" else {"resources": {resource: n}}


def barrier_actor():
    """A Ray actor class whose ``wait`` holds every caller until ``n`` have arrived, so that the
    holders a test compares provably hold their devices at the same time."""
    import ray

    @ray.remote(num_cpus=0)
    class Barrier:
        def __init__(self, n: int) -> None:
            import asyncio

            self.n, self.arrived, self.event = n, 0, asyncio.Event()

        async def wait(self) -> None:
            self.arrived += 1
            if self.arrived >= self.n:
                self.event.set()
            await self.event.wait()

    return Barrier


def _remotes(resource: str, variables: tuple[str, ...]):
    import ray

    Barrier = barrier_actor()

    @ray.remote(num_cpus=0)
    def held(barrier=None) -> dict[str, Any]:
        if barrier is not None:
            ray.get(barrier.wait.remote())
        ids = ray.get_runtime_context().get_accelerator_ids().get(resource)
        return {"ids": None if ids is None else sorted(ids), "env": {v: os.environ.get(v) for v in variables}}

    return Barrier, held


def _expected(backend: AcceleratorBackend, desc: NodeDescription, ids: list[str]) -> dict[str, str]:
    by_index = {str(d.index): d for d in desc.devices}
    return dict(backend.visible_devices_env([by_index[i] for i in ids if i in by_index]))


def _check_one(backend, desc, seen: dict[str, Any], n: int, what: str, log: str) -> list[str]:
    resource = backend.resource_name
    if seen["ids"] is None:
        return [f"step ids ({what}): get_accelerator_ids() in the task has no {resource!r} key: Ray's workers on the node "
                f"have no manager for {resource} (device isolation not installed; see the ray start log)\n{log}"]
    if len(set(seen["ids"])) != n:
        return [f"step ids ({what}): the task holding {n} {resource} got ids {seen['ids']} (Ray gives per-unit ids only "
                f"to unit-instance resources: RAY_custom_unit_instance_resources)\n{log}"]
    want = _expected(backend, desc, seen["ids"])
    got = {k: seen["env"].get(k) for k in want}
    if got != want:
        return [f"step variable ({what}): the task holding ids {seen['ids']} sees {got}, but "
                f"{backend.name}.visible_devices_env(those devices) declares {want}: the variable never reached the worker"]
    return []


def check_isolation(backend: AcceleratorBackend, desc: NodeDescription, snapshot: Snapshot) -> None:
    """Assert the isolation steps on a fresh one-node cluster started from ``snapshot``."""
    import ray

    from ..testing.cluster import SimulatedCluster

    resource = backend.resource_name
    probe_env = backend.visible_devices_env(list(desc.devices[:2]))
    variables = tuple(dict.fromkeys([*probe_env, *([backend.visible_devices_env_var] if backend.visible_devices_env_var else [])]))
    with SimulatedCluster() as cluster:
        cluster.add_node(snapshot.path, name="isolation", num_cpus=1)
        cluster.connect()
        log = "--- ray start log ---\n" + cluster.node("isolation").log()[-1500:]
        barrier_cls, held = _remotes(resource, variables)
        barrier = barrier_cls.remote(2)
        pair = ray.get([held.options(**_ask(resource, 1)).remote(barrier) for _ in range(2)], timeout=120)
        errors = [e for seen in pair for e in _check_one(backend, desc, seen, 1, "two concurrent one-unit tasks", log)]
        if not errors and set(pair[0]["ids"]) & set(pair[1]["ids"]):
            errors.append(f"step disjoint: two concurrent one-unit tasks got the same {resource} ids {pair[0]['ids']}")
        if not errors:
            two = ray.get(held.options(**_ask(resource, 2)).remote(), timeout=120)
            errors += _check_one(backend, desc, two, 2, "one two-unit task", log)
    assert not errors, f"{backend.name}: device isolation on a live Ray node:\n  " + "\n  ".join(errors)
