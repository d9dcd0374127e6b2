"""``doctor``'s view of the private Ray interfaces this package uses, probed on the installed Ray.

Each private interface (:data:`ray_accel_ext.compat.RAY_INTERFACES`) is checked by the shape of
what this package calls, never by Ray's version; one that is not there is reported with what the
node does without it (the rest of the node still starts). Families Ray has no manager for are
checked for what their per-task isolation needs (:mod:`ray_accel_ext.node.ray_devices`).
"""

from __future__ import annotations

import os

from ..compat import RAY_INTERFACES, interface_problem, ray_version
from ..model import NodeInventory
from ..node import ray_devices
from ..problems import DEVICE_ISOLATION_OFF, DEVICE_ISOLATION_UNAVAILABLE, RAY_INTERFACE_MISSING

__all__ = ["ray_interface_reports"]


def ray_interface_reports(inventory: NodeInventory) -> list[tuple[str, str, str | None, str | None]]:
    """(cause, message, backend, detail) for each private Ray interface this node cannot use."""
    version = ray_version()
    if version is None:
        return []  # doctor reports the missing Ray itself
    out: list[tuple[str, str, str | None, str | None]] = []
    for name, interface in RAY_INTERFACES.items():
        found = interface_problem(name)
        if found is not None:
            out.append((RAY_INTERFACE_MISSING, f"Ray {version} does not have the private interface {name} this package "
                        f"uses ({interface.where}): {found}. Without it: {interface.without}", None, found))
    own = ray_devices.ray_names() or set()
    outside = ray_devices.plan(inventory, {}, own) if inventory.descriptions else []
    for family in outside:
        name, backend = family["resource"], family["backend"]
        if not ray_devices.enabled(os.environ):
            out.append((DEVICE_ISOLATION_OFF, f"{ray_devices.SETTING_ENV}=off: tasks that ask for {name} are not given "
                        "their own devices (every task sees every device)", backend, None))
            continue
        why = ray_devices.problem()
        if why is not None:
            out.append((DEVICE_ISOLATION_UNAVAILABLE, f"tasks that ask for {name} would not be given their own devices: "
                        f"{why}", backend, why))
    return out
