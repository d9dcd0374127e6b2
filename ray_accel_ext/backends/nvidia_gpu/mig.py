"""MIG in the NVML reading: a GPU's MIG mode and its instances, read live and validated.

Each device of a format-2 reading carries ``mig``::

    "mig": null                                  # not MIG-capable (nvmlDeviceGetMigMode NOT_SUPPORTED)
    "mig": {"current": 1, "pending": 1,          # NVML_DEVICE_MIG_ENABLE = 1, DISABLE = 0
            "instances": [{"uuid": "MIG-...",    # nvmlDeviceGetUUID(mig handle), driver >= R470
                           "gpu_instance": 1, "compute_instance": 0,
                           "profile": "1g.10gb", # from the driver's own name, never a table
                           "memory_total": 10200547328,     # memorySizeMB << 20
                           "gpu_slices": 1, "compute_slices": 1, "multiprocessors": 14}]}

A format-1 reading has no ``mig`` key: MIG was not read (the GPU is taken whole, as before).
Only the *current* mode counts (go-nvlib ``IsMigEnabled``): a GPU with MIG pending is still
whole until it is reset. Instance names drift with the driver (NVIDIA/mig-parted#31: ``3g.39gb``
for ``3g.40gb``), so the profile is what NVML's device name says
(``NVIDIA A100-SXM4-80GB MIG 1g.10gb``), else built the way go-nvlib builds it
(``<C>c.<G>g.<GB>gb``, https://github.com/NVIDIA/go-nvlib ``pkg/nvlib/device/mig_profile.go``).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["read_mig", "validate_mig", "enabled", "profile_name"]

MIG_ENABLE = 1
_INSTANCE_INTS = ("gpu_instance", "compute_instance", "gpu_slices", "compute_slices")
_PROFILE_RE = re.compile(r"^(\d+c\.)?\d+g\.\d+gb([+-][a-z.]+)?$")


def enabled(dev: dict[str, Any]) -> bool:
    """Whether a device of the reading is in MIG mode now (current mode, not pending)."""
    mig = dev.get("mig")
    return isinstance(mig, dict) and mig.get("current") == MIG_ENABLE


def profile_name(name: str | None, gpu_slices: int, compute_slices: int, memory_mib: int) -> str:
    """The instance's profile: the token after ``MIG`` in NVML's name, else go-nvlib's form."""
    _, sep, rest = (name or "").partition(" MIG ")
    token = rest.split()[0] if sep and rest.split() else ""
    if _PROFILE_RE.match(token):
        return token
    gb = max(1, round(memory_mib / 1024))
    prefix = f"{compute_slices}c." if compute_slices and compute_slices < gpu_slices else ""
    return f"{prefix}{gpu_slices}g.{gb}gb"


def validate_mig(where: str, mig: Any) -> list[str]:
    """Why ``mig`` (a device's ``mig`` value) is malformed; empty when it is usable."""
    if mig is None:
        return []
    if not isinstance(mig, dict) or not all(isinstance(mig.get(k), int) for k in ("current", "pending")):
        return [f"{where}.mig: expected null or {{current, pending, instances}}"]
    instances = mig.get("instances", [])
    if not isinstance(instances, list):
        return [f"{where}.mig.instances: expected a list"]
    errors = []
    for j, inst in enumerate(instances):
        ok = (isinstance(inst, dict) and isinstance(inst.get("uuid"), str) and inst["uuid"]
              and isinstance(inst.get("profile"), str) and inst["profile"]
              and all(isinstance(inst.get(k, 0), int) and not isinstance(inst.get(k, 0), bool) for k in _INSTANCE_INTS)
              and (inst.get("memory_total") is None or isinstance(inst.get("memory_total"), int)))
        if not ok:
            errors.append(f"{where}.mig.instances[{j}]: expected {{uuid, profile, gpu_instance, compute_instance, ...}}")
    uuids = [i.get("uuid") for i in instances if isinstance(i, dict)]
    if len(set(uuids)) != len(uuids):
        errors.append(f"{where}.mig.instances: duplicate MIG UUIDs")
    return errors


def read_mig(pynvml: Any, handle: Any, errors: list[str]) -> dict[str, Any] | None:
    """The device's MIG mode and instances over ``pynvml``; None when it is not MIG-capable, or
    the binding predates MIG (no ``nvmlDeviceGetMigMode``)."""
    get_mode = getattr(pynvml, "nvmlDeviceGetMigMode", None)
    if get_mode is None:
        return None
    try:
        current, pending = get_mode(handle)
    except pynvml.NVMLError as exc:
        if getattr(exc, "value", None) not in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            errors.append(f"nvmlDeviceGetMigMode: {exc}")
        return None
    out: dict[str, Any] = {"current": int(current), "pending": int(pending), "instances": []}
    if int(current) != MIG_ENABLE:
        return out
    try:
        slots = int(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except pynvml.NVMLError as exc:
        errors.append(f"nvmlDeviceGetMaxMigDeviceCount: {exc}")
        return out
    for slot in range(slots):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError as exc:
            # The slots are sparse: NOT_FOUND at an empty index (nvml.h).
            if getattr(exc, "value", None) != getattr(pynvml, "NVML_ERROR_NOT_FOUND", 6):
                errors.append(f"nvmlDeviceGetMigDeviceHandleByIndex({slot}): {exc}")
            continue
        try:
            out["instances"].append(_instance(pynvml, mig))
        except pynvml.NVMLError as exc:
            errors.append(f"MIG device {slot}: {exc}")
    return out


def _instance(pynvml: Any, mig: Any) -> dict[str, Any]:
    attrs = pynvml.nvmlDeviceGetAttributes(mig)
    uuid = pynvml.nvmlDeviceGetUUID(mig)
    name = pynvml.nvmlDeviceGetName(mig)
    uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    name = name.decode() if isinstance(name, bytes) else str(name)
    gpu_slices, compute_slices = int(attrs.gpuInstanceSliceCount), int(attrs.computeInstanceSliceCount)
    memory_mib = int(attrs.memorySizeMB)
    return {
        "uuid": uuid,
        "gpu_instance": int(pynvml.nvmlDeviceGetGpuInstanceId(mig)),
        "compute_instance": int(pynvml.nvmlDeviceGetComputeInstanceId(mig)),
        "profile": profile_name(name, gpu_slices, compute_slices, memory_mib),
        "memory_total": memory_mib << 20,
        "gpu_slices": gpu_slices,
        "compute_slices": compute_slices,
        "multiprocessors": int(attrs.multiprocessorCount),
    }
