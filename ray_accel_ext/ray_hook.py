"""Delivery into Ray at node start.

* ``ray start``: ``RAY_START_HOOK=ray_accel_ext.ray_hook.start_hook``. Ray calls
  ``start_hook(ray_params, head)`` in the ``ray start`` process just before it starts the node
  (``ray/scripts/scripts.py``; loaded with ``load_class``, which splits on the last dot).
* ``ray.init()`` local clusters: :func:`init`, a wrapper that merges the same values into the
  ``resources=``/``labels=``/``num_gpus=`` arguments.

Both merge with what the user passed, the user's keys winning. Neither ever makes the node fail:
any error ends in a node labelled ``rayaccel.io/discovery=degraded`` and a log line with the cause.

Neither can hang it either: :func:`node_spec` runs discovery on a daemon thread and waits for it
at most the discovery budget plus :data:`HOOK_GRACE_S`; discovery itself returns at the budget
(``ray_accel_ext.discovery``), so the grace is only ever used by something unforeseen, which then
ends in a degraded node instead of a stuck ``ray start``.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from .adapter import RayNodeSpec, degraded_spec, to_ray_node
from .compat import is_tested_ray, ray_version, tested_range_text
from .discovery import discover_node
from .host import host_from_env, open_host
from .host.protocol import BUDGET_ENV, DEFAULT_BUDGET_S, MAX_BUDGET_S
from .labels import DISCOVERY
from .redact import redact
from .telemetry import discovery_event, emit
from .values import setting
from .visibility import cap_to_visible

__all__ = ["start_hook", "init", "node_spec", "merge_into_params", "merge_into_init_kwargs", "HOOK_GRACE_S"]

log = logging.getLogger("ray_accel_ext")

#: how long past the discovery budget the hook waits for discovery to hand over its answer
HOOK_GRACE_S = 0.75


def _ensure_log_handler() -> None:
    # `ray start` configures no handler for foreign loggers; make our warnings visible there.
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s -- %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def node_spec(
    root: str | os.PathLike[str] | None = None,
    *,
    budget_s: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> RayNodeSpec:
    """Discover this node (``root`` or ``RAY_ACCEL_ROOT``) and return its Ray resources and labels.

    This is exactly what the start hook merges into the node (and what ``ray-accel ray-args``
    prints). Counts are capped by the process's visible-devices variables (``environ``, default
    ``os.environ``). Never raises: on an unexpected error the spec is ``degraded_spec()`` and the
    cause is logged.
    """
    _ensure_log_handler()
    environ = os.environ if environ is None else environ
    if budget_s is None:
        budget_s = setting(environ, BUDGET_ENV, DEFAULT_BUDGET_S, high=MAX_BUDGET_S)
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(_discover_spec(root, budget_s, environ))
        except BaseException as exc:  # noqa: BLE001 - the node must start whatever happened here
            box.append(exc)

    worker = threading.Thread(target=run, name="ray-accel-discovery", daemon=True)
    worker.start()
    worker.join(budget_s + HOOK_GRACE_S)
    if not box:
        log.error("ray_accel_ext discovery did not finish within its %gs budget (+%gs); starting the node degraded",
                  budget_s, HOOK_GRACE_S)
        return degraded_spec()
    if isinstance(box[0], BaseException):
        log.error("ray_accel_ext discovery failed, starting the node degraded: %s: %s",
                  type(box[0]).__name__, redact(_text(box[0])))
        return degraded_spec()
    return box[0]


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001 - a hostile __str__
        return "<unprintable>"


def _discover_spec(root: Any, budget_s: float, environ: Mapping[str, str]) -> RayNodeSpec:
    if root is not None:
        host = open_host(root, environ=environ, budget_s=budget_s)
    else:
        host = host_from_env(environ, budget_s=budget_s)
    found = discover_node(host)
    inventory = found.inventory
    spec = cap_to_visible(to_ray_node(inventory), inventory, environ, classes=found.backends)
    discovery_event(inventory, spec)
    return spec


def merge_into_params(ray_params: Any, spec: RayNodeSpec) -> None:
    """Merge ``spec`` into a ``RayParams`` (user-given keys win)."""
    if spec.num_gpus is not None and getattr(ray_params, "num_gpus", None) is None:
        ray_params.num_gpus = int(spec.num_gpus) if float(spec.num_gpus).is_integer() else spec.num_gpus
    resources = dict(spec.custom_resources())
    resources.update(getattr(ray_params, "resources", None) or {})
    ray_params.resources = resources
    labels = dict(spec.labels)
    labels.update(getattr(ray_params, "labels", None) or {})
    ray_params.labels = labels


def start_hook(ray_params: Any, head: bool) -> None:
    """The ``RAY_START_HOOK`` entry point. Never raises, returns within the budget plus
    :data:`HOOK_GRACE_S`."""
    started = time.monotonic()
    try:
        if not is_tested_ray():
            _ensure_log_handler()
            log.warning(
                "ray_accel_ext is tested with Ray %s; this is Ray %s. The start hook uses only public "
                "inputs (RayParams resources/labels/num_gpus) and continues.",
                tested_range_text(),
                ray_version(),
            )
        spec = node_spec()
        merge_into_params(ray_params, spec)
        elapsed = time.monotonic() - started
        log.info(
            "ray_accel_ext: %s node gets resources %s and %d labels (discovery=%s) in %.2fs",
            "head" if head else "worker",
            dict(spec.resources),
            len(spec.labels),
            spec.labels.get(DISCOVERY),
            elapsed,
        )
        emit("start_hook", head=head, discovery=spec.labels.get(DISCOVERY), elapsed_ms=round(elapsed * 1000, 2))
    except Exception as exc:  # noqa: BLE001
        log.error("ray_accel_ext start hook failed; node starts without accelerator labels: %s", redact(_text(exc)))


def merge_into_init_kwargs(kwargs: dict[str, Any], spec: RayNodeSpec) -> dict[str, Any]:
    """``ray.init`` keyword arguments with ``spec`` merged in (user-given keys win)."""
    out = dict(kwargs)
    if spec.num_gpus is not None and out.get("num_gpus") is None:
        out["num_gpus"] = spec.num_gpus
    out["resources"] = {**spec.custom_resources(), **(out.get("resources") or {})}
    out["labels"] = {**spec.labels, **(out.get("labels") or {})}
    return out


def init(*args: Any, root: str | os.PathLike[str] | None = None, **kwargs: Any):
    """``ray.init`` for a local cluster, with this node's accelerator resources and labels.

    When ``address`` names an existing cluster, Ray does not accept node resources or labels;
    the call is passed through unchanged and the node's own start path (``RAY_START_HOOK``)
    is what labels it.
    """
    import ray

    address = kwargs.get("address", args[0] if args else None)
    if address not in (None, "local"):
        log.info("ray_accel_ext.init: connecting to %s; node labels come from that node's start hook", address)
        return ray.init(*args, **kwargs)
    return ray.init(*args, **merge_into_init_kwargs(kwargs, node_spec(root)))
