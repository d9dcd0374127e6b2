"""A Ray Serve app whose model replica needs a whole slice, with a fallback accelerator pool.

* ``SliceModel``: one replica owns one whole domain (a TPU v6e 4x4 slice, else a GB200 NVLink
  domain: a fallback chain of :func:`ray_accel_ext.placement.reserve`) and runs one shard actor on
  every host of it. When no domain is free it keeps trying in the background and answers
  ``{"slice": false}`` until it gets one.
* ``PoolModel``: the fallback pool, replicas pinned by a label selector to another accelerator
  (default: L4 nodes).
* ``Router``: the HTTP ingress. Sends a request to the slice while the slice is held and has
  fewer than ``slice_capacity`` requests in flight, else (or when the slice call fails) to the
  pool, so a burst overflows and no request is lost. Every request is counted in the
  ``rayaccel_serve_requests`` Ray metric (tags ``route``, ``outcome``) and logged as one
  ``serve_request`` JSON line.

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
from typing import Any

import ray
from ray import serve

from ray_accel_ext import telemetry
from ray_accel_ext.errors import SchedulingError
from ray_accel_ext.placement import DomainRequest, reserve

DEFAULT_CHAIN = (
    DomainRequest(selector={"ray.io/accelerator-type": "TPU-V6E", "ray.io/tpu-topology": "4x4"}, complete=True,
                  deadline_s=2.0, name="v6e-4x4-slice"),
    DomainRequest(hosts=2, selector={"ray.io/accelerator-type": "GB200"}, deadline_s=5.0, name="gb200-nvlink"),
)
DEFAULT_POOL = {"ray.io/accelerator-type": "L4"}


@ray.remote(num_cpus=0)
class Shard:
    """The part of the model that lives on one host of the slice."""

    def forward(self, x: int, work_s: float) -> str:
        time.sleep(work_s)
        return ray.get_runtime_context().get_node_id()


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=64)
class SliceModel:
    """One replica = one whole domain, reserved all-or-nothing; retries in the background."""

    def __init__(self, chain: Sequence[DomainRequest] = DEFAULT_CHAIN, work_s: float = 0.05, retry_s: float = 1.0):
        self._chain = tuple(chain)
        self._work_s = work_s
        self._retry_s = retry_s
        self._lock = threading.Lock()
        self._reservation = None
        self._shards: list[Any] = []
        self._last_error: dict[str, Any] | None = None
        self._stop = threading.Event()
        if not self._try_reserve():
            threading.Thread(target=self._retry_loop, daemon=True).start()

    def _try_reserve(self) -> bool:
        try:
            r = reserve(*self._chain)
        except SchedulingError as exc:
            self._last_error = exc.to_dict()
            return False
        shards = [Shard.options(**r.actor_options(i)).remote() for i in range(len(r.bundles))]
        ray.get([s.forward.remote(0, 0.0) for s in shards])
        with self._lock:
            self._reservation, self._shards = r, shards
        return True

    def _retry_loop(self) -> None:
        while not self._stop.is_set() and not self._try_reserve():
            self._stop.wait(self._retry_s)

    def status(self) -> dict[str, Any]:
        """Which domain this replica holds (or why none)."""
        r = self._reservation
        if r is None:
            return {"slice": False, "error": self._last_error}
        return {"slice": True, "domain": r.domain, "step": r.step_name, "hosts": len(r.bundles)}

    async def __call__(self, x: int) -> dict[str, Any]:
        with self._lock:
            r, shards = self._reservation, list(self._shards)
        if r is None:
            return {"slice": False}
        nodes = await asyncio.gather(*[s.forward.remote(x, self._work_s) for s in shards])
        return {"slice": True, "domain": r.domain, "hosts": len(set(nodes))}

    def __del__(self) -> None:
        self._stop.set()
        r = self._reservation
        if r is not None:
            try:
                r.release()
            except Exception:  # noqa: BLE001 - the cluster may already be going away
                pass


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=64)
class PoolModel:
    """A replica on the fallback accelerator pool."""

    def __init__(self, work_s: float = 0.05):
        self._work_s = work_s
        self._node = ray.get_runtime_context().get_node_id()

    async def __call__(self, x: int) -> dict[str, Any]:
        await asyncio.sleep(self._work_s)
        return {"node": self._node}


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
class Router:
    """Ingress: slice while it is held and not saturated, else the pool."""

    def __init__(self, slice_model, pool_model, slice_capacity: int = 4):
        self._slice = slice_model
        self._pool = pool_model
        self._capacity = slice_capacity
        self._inflight = 0
        self.counts: dict[str, int] = {}

    async def __call__(self, request) -> dict[str, Any]:
        rid = request.query_params.get("id", "")
        t0 = time.monotonic()
        route, result = None, None
        if self._inflight < self._capacity:
            self._inflight += 1
            try:
                result = await self._slice.remote(rid)
                if result.get("slice"):
                    route = "slice"
            except Exception:  # noqa: BLE001 - a failed slice call falls back to the pool
                route = None
            finally:
                self._inflight -= 1
            reason = "no-slice" if route is None else ""
        else:
            reason = "saturated"
        if route is None:
            result = await self._pool.remote(rid)
            route = "pool"
        self.counts[route] = self.counts.get(route, 0) + 1
        telemetry.serve_request(route, "ok", id=rid, reason=reason, latency_ms=round((time.monotonic() - t0) * 1000, 2))
        return {"id": rid, "route": route, **(result or {})}


def build_app(
    chain: Sequence[DomainRequest] = DEFAULT_CHAIN,
    pool_selector: Mapping[str, str] = DEFAULT_POOL,
    *,
    slice_capacity: int = 4,
    pool_replicas: int = 1,
    work_s: float = 0.05,
):
    """The bound application: Router(SliceModel, PoolModel)."""
    # Workers cannot import this example by name: ship its code with the deployments.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    slice_model = SliceModel.options(num_replicas=1).bind(tuple(chain), work_s)
    pool_model = PoolModel.options(
        num_replicas=pool_replicas, ray_actor_options={"num_cpus": 0, "label_selector": dict(pool_selector)}
    ).bind(work_s)
    return Router.bind(slice_model, pool_model, slice_capacity)
