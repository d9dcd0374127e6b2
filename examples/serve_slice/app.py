"""A Ray Serve app whose model replica needs a whole slice, with a fallback accelerator pool.

* ``SliceModel``: one replica owns one whole domain (a TPU v6e 4x4 slice, else a GB200 NVLink
  domain: a fallback chain of :func:`ray_accel_ext.placement.reserve`) and runs one shard actor per
  host of it, in rank order (shard 0 on the reservation's ``rank0`` host). A keeper thread holds
  the domain: it checks the shards and the placement group every ``check_s``; when a host is lost
  (a shard call or ping fails, the group leaves ``CREATED``, a node leaves the node table) it stops
  using the slice at once, releases the reservation, and reserves a whole free domain again
  (avoiding the hosts it saw fail until Ray marks them dead), then serves from it. While it has no
  domain it answers ``{"slice": false}``, and a request whose shard call fails is answered
  ``{"slice": false, "reason": "lost"}``: no request fails because of the dead shard.
* ``PoolModel``: the fallback pool, replicas pinned by a label selector to another accelerator
  (default: L4 nodes).
* ``Router``: the HTTP ingress. Sends a request to the slice while it is held and has fewer than
  ``slice_capacity`` requests in flight, else (or when the slice says no) to the pool, so a burst
  overflows and no request is lost. Every request is counted in the ``rayaccel_serve_requests``
  Ray metric (tags ``route``, ``outcome``) and logged as one ``serve_request`` JSON line.

Run it on a cluster started with the hook (``RAY_START_HOOK=ray_accel_ext.ray_hook.start_hook``)::

    from ray import serve
    serve.start(http_options={"host": "127.0.0.1", "port": 8000})
    serve.run(build_app())
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import ray
from ray import serve

from ray_accel_ext import telemetry
from ray_accel_ext.errors import SchedulingError
from ray_accel_ext.labels import NODE_ID
from ray_accel_ext.placement import DomainRequest, reserve

DEFAULT_CHAIN = (
    DomainRequest(selector={"ray.io/accelerator-type": "TPU-V6E", "ray.io/tpu-topology": "4x4"}, complete=True,
                  deadline_s=2.0, name="v6e-4x4-slice"),
    DomainRequest(hosts=2, selector={"ray.io/accelerator-type": "GB200"}, deadline_s=5.0, name="gb200-nvlink"),
)
DEFAULT_POOL = {"ray.io/accelerator-type": "L4"}
# What a call to an actor on a lost host raises (Ray 2.60 ray.exceptions): the actor died or is
# unreachable, its node died, or its worker crashed.
_LOST = (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError,
         ray.exceptions.ObjectLostError)


@ray.remote(num_cpus=0, max_restarts=0)
class Shard:
    """The part of the model that lives on one host of the slice."""

    def forward(self, x: int, work_s: float) -> str:
        time.sleep(work_s)
        return ray.get_runtime_context().get_node_id()


class _Slice:
    """One reservation in use: its shards by rank, and which generation of the replica's slice."""

    def __init__(self, reservation, shards: list[Any], generation: int) -> None:
        self.reservation, self.shards, self.generation = reservation, shards, generation
        self.nodes = [r.node_id for r in reservation.ranks]


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=64)
class SliceModel:
    """One replica = one whole domain, held by a keeper thread that recovers it when a host is lost."""

    def __init__(self, chain: Sequence[DomainRequest] = DEFAULT_CHAIN, work_s: float = 0.05, retry_s: float = 1.0,
                 check_s: float = 1.0, call_timeout_s: float = 10.0):
        self._chain = tuple(chain)
        self._work_s, self._retry_s, self._check_s, self._call_timeout_s = work_s, retry_s, check_s, call_timeout_s
        self._lock = threading.Lock()
        self._active: _Slice | None = None
        self._generation = 0
        self._suspects: dict[str, float] = {}  # node id -> when its shard failed
        self._history: list[dict[str, Any]] = []
        self._lost: list[_Slice] = []  # given up, not released yet (the keeper does it)
        self._last_error: dict[str, Any] | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._reserve()
        threading.Thread(target=self._keep, name="slice-keeper", daemon=True).start()

    # -- the keeper -------------------------------------------------------------------------------

    def _steps(self) -> tuple[DomainRequest, ...]:
        """The chain, avoiding hosts whose shard failed until Ray marks them dead."""
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        self._suspects = {n: t for n, t in self._suspects.items() if n in alive and time.monotonic() - t < 300}
        if not self._suspects:
            return self._chain
        avoid = f"!in({','.join(sorted(self._suspects))})"
        return tuple(step if NODE_ID in step.selector else replace(step, selector={**step.selector, NODE_ID: avoid})
                     for step in self._chain)

    def _reserve(self) -> bool:
        t0 = time.monotonic()
        try:
            r = reserve(*self._steps())
        except SchedulingError as exc:
            self._last_error = exc.to_dict()
            return False
        t1 = time.monotonic()
        shards = [Shard.options(**r.rank_options(rank)).remote() for rank in range(len(r.ranks))]
        try:
            ray.get([s.forward.remote(0, 0.0) for s in shards], timeout=60)
        except (*_LOST, ray.exceptions.GetTimeoutError) as exc:
            self._last_error = {"error": type(exc).__name__, "message": str(exc)[:300]}
            self._discard(_Slice(r, shards, -1))
            return False
        with self._lock:
            self._generation += 1
            self._active = _Slice(r, shards, self._generation)
        self._history.append({"event": "reserved", "domain": r.domain, "generation": self._generation,
                              "at": time.time(), "reserve_s": round(t1 - t0, 3),
                              "shards_s": round(time.monotonic() - t1, 3),
                              "tried": [(a["domain"], a["outcome"]) for a in r.attempts]})
        telemetry.emit("serve_slice_reserved", domain=r.domain, step=r.step_name, rank0=r.rank0.node_id)
        return True

    def _discard(self, held: _Slice) -> None:
        for shard in held.shards:
            ray.kill(shard, no_restart=True)
        try:
            held.reservation.release()
        except Exception as exc:  # noqa: BLE001 - the claim is dropped by the registry once the group is gone
            self._last_error = {"error": type(exc).__name__, "message": str(exc)[:300]}

    def _lose(self, generation: int, reason: str, nodes: Sequence[str] = ()) -> None:
        """Stop using slice ``generation`` (requests go to the pool from now on); the keeper releases it."""
        with self._lock:
            held = self._active
            if held is None or held.generation != generation:
                return
            self._active = None
            self._lost.append(held)
            self._suspects.update(dict.fromkeys(nodes, time.monotonic()))
        self._history.append({"event": "lost", "domain": held.reservation.domain, "generation": generation,
                              "reason": reason, "at": time.time()})
        telemetry.emit("serve_slice_lost", domain=held.reservation.domain, reason=reason, nodes=list(nodes))
        self._wake.set()

    def _check(self, held: _Slice) -> None:
        from ray.util import placement_group_table

        state = placement_group_table(held.reservation.placement_group).get("state")
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        gone = [n for n in held.nodes if n not in alive]
        if state != "CREATED" or gone:
            self._lose(held.generation, f"placement group {state}" if state != "CREATED" else "node left", gone)
            return
        refs = {s.forward.remote(0, 0.0): node for s, node in zip(held.shards, held.nodes)}
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=self._call_timeout_s)
        failed = []
        for ref in ready:
            try:
                ray.get(ref)
            except _LOST:
                failed.append(refs[ref])
        if failed or pending:
            self._lose(held.generation, "shard unreachable", failed + [refs[r] for r in pending])

    def _keep(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                lost, self._lost = self._lost, []
            for old in lost:
                self._discard(old)
            held = self._active
            try:
                if held is None:
                    if not self._reserve():
                        self._wake.wait(self._retry_s)
                        self._wake.clear()
                    continue
                self._check(held)
            except Exception as exc:  # noqa: BLE001 - the keeper keeps going; the error is in status()
                self._last_error = {"error": type(exc).__name__, "message": str(exc)[:300]}
            self._wake.wait(self._check_s)
            self._wake.clear()

    # -- serving ----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Which domain this replica holds (or why none), and its history of domains."""
        held = self._active
        base = {"history": list(self._history), "generation": self._generation}
        if held is None:
            return {"slice": False, "error": self._last_error, **base}
        r = held.reservation
        return {"slice": True, "domain": r.domain, "step": r.step_name, "hosts": len(r.bundles),
                "rank0": r.rank0.node_id, "nodes": held.nodes, **base}

    async def __call__(self, x: int) -> dict[str, Any]:
        held = self._active
        if held is None:
            return {"slice": False}
        calls = [s.forward.remote(x, self._work_s) for s in held.shards]
        try:
            results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), self._call_timeout_s)
        except asyncio.TimeoutError:
            self._wake.set()  # let the keeper look now
            return {"slice": False, "reason": "slow"}
        lost = [node for node, res in zip(held.nodes, results) if isinstance(res, _LOST)]
        if lost:
            errors = sorted({type(res).__name__ for res in results if isinstance(res, _LOST)})
            self._lose(held.generation, f"shard call failed: {','.join(errors)}", lost)
            return {"slice": False, "reason": "lost"}
        if any(isinstance(res, BaseException) for res in results):
            return {"slice": False, "reason": "error"}
        return {"slice": True, "domain": held.reservation.domain, "hosts": len(set(results)),
                "generation": held.generation}

    def __del__(self) -> None:
        self._stop.set()
        held, self._active = self._active, None
        for h in [*self._lost, *([held] if held else [])]:
            try:
                self._discard(h)
            except Exception:  # noqa: BLE001 - the cluster may already be going away
                pass


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
class PoolModel:
    """A replica on the fallback accelerator pool."""

    def __init__(self, work_s: float = 0.05):
        self._work_s = work_s
        self._node = ray.get_runtime_context().get_node_id()

    async def __call__(self, x: int) -> dict[str, Any]:
        await asyncio.sleep(self._work_s)
        return {"node": self._node}


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1024)
class Router:
    """Ingress: slice while it is held and not saturated, else the pool."""

    def __init__(self, slice_model, pool_model, slice_capacity: int = 4):
        self._slice = slice_model
        self._pool = pool_model
        self._capacity = slice_capacity
        self._inflight = 0

    async def __call__(self, request) -> dict[str, Any]:
        rid = request.query_params.get("id", "")
        t0 = time.monotonic()
        route, result, reason = None, None, "saturated"
        if self._inflight < self._capacity:
            self._inflight += 1
            try:
                result = await self._slice.remote(rid)
                route = "slice" if result.get("slice") else None
                reason = "" if route else result.get("reason", "no-slice")
            except Exception as exc:  # noqa: BLE001 - a failed slice call is answered by the pool
                reason = f"slice-error:{type(exc).__name__}"
            finally:
                self._inflight -= 1
        if route is None:
            result = {**await self._pool.remote(rid), "slice_reason": reason}
            route = "pool"
        telemetry.serve_request(route, "ok", id=rid, reason=reason, latency_ms=round((time.monotonic() - t0) * 1000, 2))
        return {"id": rid, "route": route, **(result or {})}


def build_app(
    chain: Sequence[DomainRequest] = DEFAULT_CHAIN,
    pool_selector: Mapping[str, str] = DEFAULT_POOL,
    *,
    slice_capacity: int = 4,
    pool_replicas: int = 1,
    work_s: float = 0.05,
    check_s: float = 1.0,
    replica_selector: Mapping[str, str] | None = None,
):
    """The bound application: Router(SliceModel, PoolModel). ``replica_selector``: where the router
    and the slice replica run (a label selector; keep them off the slice's own hosts)."""
    # Workers cannot import this example by name: ship its code with the deployments.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    where = {"label_selector": dict(replica_selector)} if replica_selector else {}
    slice_model = SliceModel.options(num_replicas=1, ray_actor_options={"num_cpus": 0, **where}).bind(
        tuple(chain), work_s, 1.0, check_s)
    pool_model = PoolModel.options(
        num_replicas=pool_replicas, ray_actor_options={"num_cpus": 0, "label_selector": dict(pool_selector)}
    ).bind(work_s)
    return Router.options(ray_actor_options={"num_cpus": 0, **where}).bind(slice_model, pool_model, slice_capacity)
