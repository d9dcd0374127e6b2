"""Device isolation for families Ray has no manager for: what the node start hands on.

Ray isolates devices (a task's ``get_accelerator_ids()`` and its visible-devices variable) only
for resources of managers in its private registry, and gives per-unit ids only to resources the
raylet lists in ``custom_unit_instance_resources`` (``reference/ray-2.60.md`` sections 3-4). For
every family a backend described whose resource is outside Ray's registry (a vendor's
``acme_npu``), :func:`hand_off_devices` writes into the node-start process's environment, which the
GCS, the raylet and every worker inherit:

* ``RAY_ACCEL_RAY_DEVICES``: the families (resource, backend entry point, variable, devices), read
  by ``_ray_accel_ext_devices`` (imported by ``ray_accel_ext_devices.pth`` in every Ray process of
  the node) to add a manager adapter to Ray's registry in each worker;
* ``RAY_custom_unit_instance_resources``: Ray's own list (set on the command line, else the
  resource names of Ray's registry less ``GPU``, which is what Ray's default holds) plus the new
  names; Ray replaces its default with this value, so it keeps every name it had.

MIG instances are handed on the same way: each partition resource (``mig-1g.10gb``) is a family
whose ``units`` are its instances' ``MIG-<uuid>``, so Ray's worker setup gives a task exactly its
instance (the adapter's side: ``_ray_accel_ext_devices``).

Ray's own families (``GPU``, ``TPU``, ``neuron_cores``, ``NPU`` ...) are never touched, and on a
node without an out-of-tree family or a MIG instance nothing is written.
``RAY_ACCEL_DEVICE_ISOLATION=off`` turns it off. Every private interface is probed for its shape
first (:func:`problem`); where a probe fails the node starts without isolation, degraded, with a
coded problem (``device-isolation-unavailable``; ``device-isolation-failed`` for the unexpected).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import site
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

from .. import problems as codes
from ..labels import is_valid_value, partition_resource
from ..model import NodeInventory, Problem

__all__ = ["SETTING_ENV", "DEVICES_ENV", "UNIT_ENV", "PTH_NAME", "enabled", "problem", "plan", "hand_off_devices"]

log = logging.getLogger("ray_accel_ext")

SETTING_ENV = "RAY_ACCEL_DEVICE_ISOLATION"
DEVICES_ENV = "RAY_ACCEL_RAY_DEVICES"
UNIT_ENV = "RAY_custom_unit_instance_resources"
CUDA_ENV = "CUDA_VISIBLE_DEVICES"
PTH_NAME = "ray_accel_ext_devices.pth"
BOOT_MODULE = "_ray_accel_ext_devices"
MAX_ENV_BYTES = 64 * 1024
_OFF = ("off", "0", "false", "no")
_RESERVED = frozenset({"CPU", "GPU", "memory", "object_store_memory"})


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """False when ``RAY_ACCEL_DEVICE_ISOLATION`` is ``off`` (or 0/false/no)."""
    environ = os.environ if environ is None else environ
    return environ.get(SETTING_ENV, "").strip().lower() not in _OFF


def _pth_installed() -> bool:
    dirs = list(getattr(site, "getsitepackages", lambda: [])()) + [getattr(site, "USER_SITE", None) or ""]
    dirs += [p for p in sys.path if p.endswith("site-packages")]
    return any(d and os.path.isfile(os.path.join(d, PTH_NAME)) for d in dict.fromkeys(dirs))


def problem() -> str | None:
    """Why isolation cannot work in this installation; None when it can. Probes the shape of
    Ray's registry (functions and the manager interface) and the import hook's presence."""
    try:
        boot = importlib.util.find_spec(BOOT_MODULE)
    except (ImportError, ValueError):
        boot = None
    if boot is None:
        return f"the module {BOOT_MODULE} is not importable (ray_accel_ext installed without it)"
    try:
        import ray._private.accelerators as accelerators
    except Exception as exc:  # noqa: BLE001 - no Ray, or a Ray without this module
        return f"Ray's accelerator registry (ray._private.accelerators) is not importable: {type(exc).__name__}: {exc}"
    import _ray_accel_ext_devices as boot_module

    shape = boot_module.registry_problem(accelerators)
    if shape is not None:
        return f"Ray's private accelerator interface changed: {shape}"
    if not _pth_installed():
        return f"{PTH_NAME} is not in site-packages, so Ray's workers never load the adapters (reinstall ray-accel-ext)"
    return None


def ray_names() -> set[str] | None:
    """Resource names of Ray's own accelerator managers; None when the registry cannot be read."""
    try:
        import ray._private.accelerators as accelerators

        original = accelerators.get_all_accelerator_managers
        original = getattr(original, "_ray_accel_ext_devices", original)  # Ray's own, not our adapters
        return {str(m.get_resource_name()) for m in original()}
    except Exception:  # noqa: BLE001
        return None


def _entries() -> dict[str, str]:
    from .registry import available_backends

    return {spec.name: spec.value for spec in available_backends()}


def plan(inventory: NodeInventory, declared: Mapping[str, Any], own: set[str]) -> list[dict[str, Any]]:
    """The families to hand on: described, with devices, on a resource outside ``own`` (Ray's names)."""
    entries: dict[str, str] | None = None
    out: list[dict[str, Any]] = []
    for desc in inventory.descriptions:
        name = desc.resource_name
        if name in own or name in _RESERVED or not desc.devices or any(f["resource"] == name for f in out):
            continue
        if entries is None:
            entries = _entries()
        info = declared.get(desc.backend)
        out.append({
            "resource": name,
            "backend": desc.backend,
            "entry": entries.get(desc.backend, ""),
            "env_var": getattr(info, "visible_devices_env_var", None),
            "accelerator_type": desc.sku.ray_accelerator_type,
            "devices": [d.to_dict() for d in desc.devices],
        })
    return out + _partition_families(inventory, declared, own)


def _partition_families(inventory: NodeInventory, declared: Mapping[str, Any], own: set[str]) -> list[dict[str, Any]]:
    """One family per partition resource (``mig-1g.10gb``): ``units`` lists each unit's
    visible-devices value (``MIG-<uuid>``) in the node's order, the order Ray's unit ids count and
    the order :func:`ray_accel_ext.backends.nvidia_gpu.worker.partition_of` reads."""
    by_name: dict[str, dict[str, Any]] = {}
    for desc in inventory.descriptions:
        var = getattr(declared.get(desc.backend), "visible_devices_env_var", None)
        for part in desc.partitions:
            name = partition_resource(part.profile)
            if name in own or name in _RESERVED or not is_valid_value(name):
                continue
            family = by_name.setdefault(name, {"resource": name, "backend": desc.backend, "entry": "", "env_var": var,
                                               "accelerator_type": None, "devices": [], "units": []})
            family["units"].append(part.id)
    return list(by_name.values())


def _unit_list(environ: Mapping[str, str], own: set[str], new: list[str]) -> str:
    current = environ.get(UNIT_ENV)
    names = [n.strip() for n in current.split(",") if n.strip()] if current is not None else sorted(own - {"GPU"})
    return ",".join(dict.fromkeys(names + new))


def _whole_gpus(inventory: NodeInventory, environ: Mapping[str, str]) -> str | None:
    """On a node with MIG GPUs, ``CUDA_VISIBLE_DEVICES`` for the node's processes: the UUIDs of its
    whole GPUs. CUDA reads an integer there as nvidia-smi's index, which counts the MIG-enabled
    GPUs too (CUDA programming guide, "CUDA_VISIBLE_DEVICES"), so Ray's plain ``GPU`` ids could
    name one; Ray maps the ids it gives a task through the value its workers started with
    (``ray/_private/worker.py`` ``get_accelerator_ids_for_accelerator_resource``), so a
    ``num_gpus`` task gets a whole GPU's UUID. None where the variable is already set (the
    operator's choice stands), there is no whole GPU, or a GPU has no UUID."""
    if CUDA_ENV in environ:
        return None
    for desc in inventory.descriptions:
        if desc.resource_name == "GPU" and desc.partitions and desc.devices:
            ids = [d.id for d in sorted(desc.devices, key=lambda d: d.index)]
            return ",".join(ids) if all(i.startswith("GPU-") for i in ids) else None
    return None


def _encode(found: list[dict[str, Any]]) -> str:
    text = json.dumps(found, separators=(",", ":"), sort_keys=True)
    if len(text.encode()) > MAX_ENV_BYTES:  # devices reduced to their indices: backends get Device(index=i)
        slim = [{**f, "devices": [{"index": d["index"], "id": d["id"]} for d in f["devices"]]} for f in found]
        text = json.dumps(slim, separators=(",", ":"), sort_keys=True)
    return text


def _problems(code: str, found: list[dict[str, Any]], text: str) -> list[Problem]:
    """One coded problem per backend whose families lose their isolation."""
    by_backend: dict[str, list[str]] = {}
    for family in found:
        by_backend.setdefault(family["backend"], []).append(family["resource"])
    return [Problem(code=code, backend=backend, message=f"device isolation for {', '.join(names)} is off on this node: {text}")
            for backend, names in by_backend.items()]


def hand_off_devices(
    inventory: NodeInventory | None, declared: Mapping[str, Any], environ: MutableMapping[str, str] | None = None
) -> tuple[dict[str, str], list[Problem]]:
    """Write the isolation variables into ``environ`` (default ``os.environ``) for the families of
    ``inventory`` outside Ray's registry. Returns (what was written, coded problems: the node is
    degraded, since its tasks would share devices). Never raises."""
    environ = os.environ if environ is None else environ
    found: list[dict[str, Any]] = []
    try:
        if inventory is None or not inventory.descriptions:
            return {}, []
        own = ray_names()
        if own is None:
            own = set()
        found = plan(inventory, declared, own)
        if not found:
            return {}, []
        names = [f["resource"] for f in found]
        if not enabled(environ):
            log.info("ray_accel_ext: %s=off: no device isolation for %s", SETTING_ENV, ", ".join(names))
            return {}, []
        why = problem()
        if why is not None:
            log.warning("ray_accel_ext: device isolation for %s is off on this node: %s", ", ".join(names), why)
            return {}, _problems(codes.DEVICE_ISOLATION_UNAVAILABLE, found, why)
        out = {DEVICES_ENV: _encode(found), UNIT_ENV: _unit_list(environ, own, names)}
        whole = _whole_gpus(inventory, environ)
        if whole is not None:
            out[CUDA_ENV] = whole
        environ.update(out)
        log.info("ray_accel_ext: Ray isolates %s per task (%s=%s)", ", ".join(names), UNIT_ENV, out[UNIT_ENV])
        return out, []
    except Exception as exc:  # noqa: BLE001 - the node starts whatever happens here
        text = f"{type(exc).__name__}: {exc}"
        log.warning("ray_accel_ext: device isolation failed: %s", text)
        return {}, _problems(codes.DEVICE_ISOLATION_FAILED, found, f"the hand-off failed: {text}") or [
            Problem(code=codes.DEVICE_ISOLATION_FAILED, backend="registry", message=f"device isolation failed: {text}")]
