"""Accelerator families Ray detects itself and no backend described: kept at node start.

Ray 2.60 resolves one accelerator family per node: it walks the set of accelerator resource names
(hash order, so it changes with ``PYTHONHASHSEED``) and stops at the first with a count, taken from
an explicit parameter before its own detection (``ResourceAndLabelSpec._get_current_node_accelerator``,
``reference/ray-2.60.md`` sections 2 and 8.5). Once the hook passes ``num_gpus=8`` for NVIDIA GPUs,
Ray's own Intel Gaudi (``HPU``) or Ascend (``NPU``) count is dropped whenever ``GPU`` comes first.

:func:`ray_detected` asks Ray's own managers (read only, in the process that starts the node, where
Ray is imported anyway) for every family the spec does not cover, and returns their counts (capped
by their visible-devices variables, as Ray caps them), ``accelerator_type:<T>`` and additional
resources, so the hook passes them explicitly and Ray's choice of one family loses none. This reads
Ray's private ``ray._private.accelerators`` registry: only where its shape is what this module calls
(the ``accelerator_registry`` probe of :mod:`ray_accel_ext.compat`; where it fails, the result carries
the ``problem`` and the node starts with Ray's own choice), within a time limit (Ray's TPU manager
asks the GCE metadata server without one), and any failure just leaves Ray to itself.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from ..compat import interface_problem
from .envelope import RAY_NATIVE_LIMIT_S

__all__ = ["RayFamilies", "ray_detected", "TIME_LIMIT_S"]

log = logging.getLogger("ray_accel_ext")

TIME_LIMIT_S = RAY_NATIVE_LIMIT_S  # the node envelope owns the number
_RESERVED = ("CPU", "memory", "object_store_memory")


@dataclass
class RayFamilies:
    """What Ray's own managers found: ``num_gpus`` (Ray takes GPUs only through it) and resources."""

    num_gpus: float | None = None
    resources: dict[str, float] = field(default_factory=dict)
    families: list[str] = field(default_factory=list)
    problem: str | None = None


def _scan(covered: set[str], gpu_covered: bool, out: RayFamilies) -> None:
    from ray._private import accelerators

    for name in sorted(accelerators.get_all_accelerator_resource_names()):
        if name in _RESERVED or (name == "GPU" and gpu_covered) or (name != "GPU" and name in covered):
            continue
        manager = accelerators.get_accelerator_manager_for_resource(name)
        if manager is None:
            continue
        try:
            count = manager.get_current_node_num_accelerators()
            visible = manager.get_current_process_visible_accelerator_ids()
            if visible is not None:
                count = min(count, len(visible))
            if not count or count <= 0:
                continue
            accelerator_type = manager.get_current_node_accelerator_type()
            extra = manager.get_current_node_additional_resources() or {}
        except Exception as exc:  # noqa: BLE001 - Ray's own manager failing is Ray's to report
            log.info("ray_accel_ext: Ray's %s manager failed (%s: %s); left to Ray", name, type(exc).__name__, exc)
            continue
        if name == "GPU":
            out.num_gpus = float(count)
        else:
            out.resources[name] = float(count)
        if accelerator_type:
            out.resources.setdefault(f"accelerator_type:{accelerator_type}", 1.0)
        for key, value in extra.items():
            out.resources.setdefault(str(key), float(value))
        out.families.append(f"{name}={count} ({manager.__name__})")


def ray_detected(resources: dict[str, Any], num_gpus: Any, *, time_limit_s: float = TIME_LIMIT_S) -> RayFamilies:
    """Ray's own families not in ``resources`` (and ``GPU`` unless ``num_gpus`` is set).

    Empty when nothing here would change Ray's own choice (no accelerator is given explicitly),
    without Ray, on a Ray whose registry is not the shape this reads (``problem`` says what), or
    when Ray's managers do not answer within ``time_limit_s``. Never raises.
    """
    out = RayFamilies()
    try:
        from ray._private import accelerators
    except Exception:  # noqa: BLE001 - no Ray, or a Ray without this registry
        return out
    shape = interface_problem("accelerator_registry")
    if shape is not None:
        out.problem = f"Ray's own accelerator families are not pinned next to ours: {shape}"
        log.warning("ray_accel_ext: %s", out.problem)
        return out
    try:
        names = accelerators.get_all_accelerator_resource_names()
    except Exception:  # noqa: BLE001
        return out
    covered = {k for k, v in resources.items() if v}
    gpu_covered = num_gpus is not None
    if not (gpu_covered or covered & set(names)):
        return out  # Ray's own choice is untouched by the hook
    found = RayFamilies()
    done = threading.Event()

    def work() -> None:
        try:
            _scan(covered, gpu_covered, found)
        except Exception as exc:  # noqa: BLE001
            log.info("ray_accel_ext: reading Ray's accelerator managers failed: %s: %s", type(exc).__name__, exc)
            found.num_gpus, found.resources, found.families = None, {}, []
        finally:
            done.set()

    threading.Thread(target=work, name="ray-accel-ray-families", daemon=True).start()
    if not done.wait(time_limit_s):
        log.warning("ray_accel_ext: Ray's accelerator managers did not answer within %.1fs; Ray keeps only "
                    "one accelerator family on this node", time_limit_s)
        return out
    if found.families:
        log.info("ray_accel_ext: keeping the families Ray detects itself: %s", ", ".join(found.families))
    return found
