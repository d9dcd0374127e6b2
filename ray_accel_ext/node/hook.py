"""Delivery into Ray at node start.

* ``ray start``: ``RAY_START_HOOK=ray_accel_ext.ray_hook.start_hook``. Ray calls
  ``start_hook(ray_params, head)`` in the ``ray start`` process just before it starts the node
  (``ray/scripts/scripts.py``; loaded with ``load_class``, which splits on the last dot).
* ``ray.init()`` local clusters: :func:`init`, a wrapper that merges the same values into the
  ``resources=``/``labels=``/``num_gpus=`` arguments.

Both merge with what the user passed, the user's keys winning, and keep the accelerator families
Ray detects itself and no backend describes (:mod:`.ray_native`). Neither ever makes the node fail:
any error ends in a node labelled ``rayaccel.io/discovery=degraded`` and a log line with the cause.

``ray start`` also spawns the node's device watcher, which lives as long as the node's raylet
(:mod:`.watcher`; ``RAY_ACCEL_HEALTH_WATCH=0`` turns it off).

Both also hand their findings on through this process's environment (:mod:`.handoff`): Ray's own
TPU manager, which runs next in the same process, gets the slice it would otherwise ask the
metadata server for, and every worker process the node starts gets the node's description.

Neither can hang the node start either: the budget is resolved once into one deadline
(:mod:`.envelope`) that every step receives; discovery runs on a daemon thread that is waited for
at most the deadline plus :data:`~.envelope.HOOK_GRACE_S`; discovery itself returns at the
deadline (:mod:`.discovery`), so the grace is only ever used by something unforeseen, which then
ends in a degraded node instead of a stuck ``ray start``.

The walk of one description: :func:`_discover` opens the host with the deadline, runs
:func:`~.discovery.discover_node` (registry, isolation, checks), turns the inventory into Ray's
view (:func:`~.adapter.to_ray_node`, capped by :func:`~.visibility.cap_to_visible` with the
declarations discovery carried) and keeps the TPU identity next to it (:class:`NodeStart`);
:func:`start_hook` merges the spec into ``RayParams`` with Ray's own families
(:mod:`.ray_native`) and hands the rest on (:mod:`.handoff`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..compat import MIN_RAY_VERSION, interface_problem, is_supported_ray, ray_version
from ..host import host_from_env, open_host
from ..host.protocol import Deadline
from ..hw.cloud import hostname
from ..labels import DISCOVERY
from ..model import NodeInventory
from ..redact import redact
from ..telemetry import discovery_event, emit
from .adapter import RayNodeSpec, degraded_spec, ray_tpu_identity, to_ray_node
from .discovery import discover_node
from .envelope import HOOK_GRACE_S, RAY_NATIVE_LIMIT_S, answer_wait, ray_native_limit, start_deadline
from .handoff import node_env
from .ray_devices import hand_off_devices
from .ray_native import ray_detected
from .visibility import cap_to_visible
from .watcher import spawn_watcher

__all__ = ["start_hook", "init", "node_spec", "merge_into_params", "merge_into_init_kwargs", "hand_off", "HOOK_GRACE_S"]

log = logging.getLogger("ray_accel_ext")


@dataclass(frozen=True)
class NodeStart:
    """One node start's findings, each computed once on the way: the inventory (None when
    discovery failed outright or did not answer in time), Ray's view of it, this host's name and
    the slice identity Ray's TPU manager is handed (:mod:`.handoff`)."""

    inventory: NodeInventory | None
    spec: RayNodeSpec
    hostname: str | None = None
    tpu_identity: Mapping[str, str] = field(default_factory=dict)
    backends: Mapping[str, Any] = field(default_factory=dict)  # the answering backends' declarations


_FAILED = NodeStart(None, degraded_spec())


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
    environ = os.environ if environ is None else environ
    return _node(root, start_deadline(environ, budget_s), environ).spec


def _node(root: Any, deadline: Deadline, environ: Mapping[str, str]) -> NodeStart:
    """Discovery on a daemon thread, waited for until the deadline plus :data:`HOOK_GRACE_S`."""
    _ensure_log_handler()
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(_discover(root, deadline, environ))
        except BaseException as exc:  # noqa: BLE001 - the node must start whatever happened here
            box.append(exc)

    worker = threading.Thread(target=run, name="ray-accel-discovery", daemon=True)
    worker.start()
    worker.join(answer_wait(deadline))
    if not box:
        log.error("ray_accel_ext discovery did not finish within its %gs budget (+%gs); starting the node degraded",
                  deadline.budget_s, HOOK_GRACE_S)
        return _FAILED
    if isinstance(box[0], BaseException):
        log.error("ray_accel_ext discovery failed, starting the node degraded: %s: %s",
                  type(box[0]).__name__, redact(_text(box[0])))
        return _FAILED
    return box[0]


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001 - a hostile __str__
        return "<unprintable>"


def _discover(root: Any, deadline: Deadline, environ: Mapping[str, str]) -> NodeStart:
    if root is not None:
        host = open_host(root, environ=environ, deadline=deadline)
    else:
        host = host_from_env(environ, deadline=deadline)
    found = discover_node(host)
    inventory = found.inventory
    spec = cap_to_visible(to_ray_node(inventory), inventory, environ, found.backends)
    discovery_event(inventory, spec)
    tpu = next((d for d in inventory.descriptions if d.resource_name == "TPU" and d.devices), None)
    return NodeStart(inventory, spec, hostname(host), ray_tpu_identity(tpu) if tpu is not None else {},
                     found.backends)


def _devices_handed_off(found: NodeStart) -> NodeStart:
    """Hand the node's devices on to Ray's workers (:mod:`.ray_devices`); a family that cannot be
    isolated makes the node degraded, its coded problem in the inventory handed on."""
    _, problems = hand_off_devices(found.inventory, found.backends)
    if not problems or found.inventory is None:
        return found
    inventory = replace(found.inventory, problems=(*found.inventory.problems, *problems))
    spec = RayNodeSpec(resources=found.spec.resources, labels={**found.spec.labels, DISCOVERY: "degraded"})
    return replace(found, inventory=inventory, spec=spec)


def hand_off(
    inventory: NodeInventory | None, name: str | None, environ=None, *, tpu_identity: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Write into ``environ`` (default ``os.environ``) what this process's node start and its
    workers read instead of asking again (:mod:`.handoff`); returns what was written.
    ``tpu_identity`` is the slice identity the node start computed (:class:`NodeStart`)."""
    environ = os.environ if environ is None else environ
    if inventory is None:
        return {}
    if tpu_identity is None:
        tpu = next((d for d in inventory.descriptions if d.resource_name == "TPU" and d.devices), None)
        tpu_identity = ray_tpu_identity(tpu) if tpu is not None else {}
    shape = interface_problem("tpu_manager_env") if tpu_identity else None
    if shape is not None:
        log.warning("ray_accel_ext: the TPU slice is not handed to Ray's TPU manager (it asks the metadata server "
                    "itself): %s", shape)
    out = node_env(inventory, tpu_identity, environ, name, tpu_manager=shape is None)
    environ.update(out)
    return out


def _gpus(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def merge_into_params(ray_params: Any, spec: RayNodeSpec, *, time_limit_s: float = RAY_NATIVE_LIMIT_S) -> None:
    """Merge ``spec`` into a ``RayParams`` (user-given keys win), keeping the accelerator families
    Ray detects itself next to ours (:func:`ray_accel_ext.node.ray_native.ray_detected`, given at most
    ``time_limit_s``)."""
    if spec.num_gpus is not None and getattr(ray_params, "num_gpus", None) is None:
        ray_params.num_gpus = _gpus(spec.num_gpus)
    resources = dict(spec.custom_resources())
    resources.update(getattr(ray_params, "resources", None) or {})
    own = ray_detected(resources, getattr(ray_params, "num_gpus", None), time_limit_s=time_limit_s)
    for key, value in own.resources.items():
        resources.setdefault(key, value)
    if own.num_gpus is not None and getattr(ray_params, "num_gpus", None) is None:
        ray_params.num_gpus = _gpus(own.num_gpus)
    ray_params.resources = resources
    labels = dict(spec.labels)
    labels.update(getattr(ray_params, "labels", None) or {})
    ray_params.labels = labels


def start_hook(ray_params: Any, head: bool) -> None:
    """The ``RAY_START_HOOK`` entry point. Never raises; returns within the discovery budget plus
    one second (discovery's bound, then Ray's own families in what is left of that second)."""
    started = time.monotonic()
    try:
        if not is_supported_ray():
            _ensure_log_handler()
            log.warning(
                "ray_accel_ext supports Ray %d.%d and newer; this is Ray %s, whose RayParams may lack "
                "resources/labels. The start hook continues.", *MIN_RAY_VERSION, ray_version(),
            )
        deadline = start_deadline(os.environ)
        found = _devices_handed_off(_node(None, deadline, os.environ))
        spec = found.spec
        merge_into_params(ray_params, spec, time_limit_s=ray_native_limit(deadline))
        handed = hand_off(found.inventory, found.hostname, tpu_identity=found.tpu_identity)
        spawn_watcher(found.inventory)
        tpu_env = {k: v for k, v in handed.items() if k.startswith("TPU_")}
        if tpu_env:
            log.info("ray_accel_ext: Ray's TPU manager reads %s (no metadata request of its own)", tpu_env)
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
    own = ray_detected(out["resources"], out.get("num_gpus"))
    out["resources"] = {**own.resources, **out["resources"]}
    if own.num_gpus is not None and out.get("num_gpus") is None:
        out["num_gpus"] = own.num_gpus
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
    found = _devices_handed_off(_node(root, start_deadline(os.environ), os.environ))
    hand_off(found.inventory, found.hostname, tpu_identity=found.tpu_identity)
    return ray.init(*args, **merge_into_init_kwargs(kwargs, found.spec))
