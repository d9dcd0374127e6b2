"""Visible-device capping at node start: the one owner of "which variable restricts which family".

A node started with ``CUDA_VISIBLE_DEVICES=0,1`` on an 8-GPU host offers 2 GPUs: Ray refuses to
start a node whose explicit count exceeds what its own manager's visible-devices variable lists
(``resource_and_label_spec.py``; ``reference/ray-2.60.md`` section 1). Each backend declares its
variables (``visible_devices_env_var``, ``node_start_env_vars``); nothing here names a family.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..model import NodeInventory
from .adapter import RayNodeSpec

__all__ = ["cap_to_visible", "visible_count", "capping_variables"]

log = logging.getLogger("ray_accel_ext")


def visible_count(value: str) -> int:
    """Devices a visible-devices value lists: Ray's parsing ("" and ``NoDevFiles`` mean none)."""
    return 0 if value in ("", "NoDevFiles") else len(value.split(","))


def capping_variables(inventory: NodeInventory, classes: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Ray resource name -> the variables that cap it, from the backends that described the node
    (``classes``: their declarations by name, as discovery carries them in
    :attr:`~.discovery.Discovery.backends`; nothing is asked of the registry again)."""
    out: dict[str, tuple[str, ...]] = {}
    for desc in inventory.descriptions:
        cls = classes.get(desc.backend)
        if cls is None:
            continue
        names = tuple(cls.node_start_env_vars) or ((cls.visible_devices_env_var,) if cls.visible_devices_env_var else ())
        if names:
            out[desc.resource_name] = tuple(dict.fromkeys(out.get(desc.resource_name, ()) + names))
    return out


def cap_to_visible(
    spec: RayNodeSpec, inventory: NodeInventory, environ: Mapping[str, str], classes: Mapping[str, Any]
) -> RayNodeSpec:
    """``spec`` with accelerator counts cut to what the process's visible-devices variables allow."""
    resources = dict(spec.resources)
    for name, variables in capping_variables(inventory, classes).items():
        if name not in resources:
            continue
        limits = [visible_count(environ[v]) for v in variables if v in environ]
        if limits and min(limits) < resources[name]:
            log.warning(
                "ray_accel_ext: %s capped from %g to %d by %s",
                name, resources[name], min(limits), ", ".join(f"{v}={environ[v]!r}" for v in variables if v in environ),
            )
            resources[name] = float(min(limits))
            if resources[name] == 0:
                del resources[name]
    return RayNodeSpec(resources=resources, labels=spec.labels)
