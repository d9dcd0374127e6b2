"""The narrow AMD SMI interface of the AMD backend: one reading, as one plain dict.

The backend asks ``host.library("amdsmi", read_live)``: on a host snapshot that is the recording
``libraries/amdsmi.json``; on the live machine :func:`read_live`, a translation of the ``amdsmi``
Python package (the ``[amd]`` extra, over ROCm's ``libamd_smi.so``) into the same shape; elsewhere
``None``. It is imported only inside :func:`read_live`, never on the node-start import path.

Shape (``FORMAT_VERSION`` 1)::

    {"format": 1,
     "error": null,                          # set when the library is there but failed as a whole
     "devices": [                            # amdsmi_get_processor_handles() order
       {"bdf": "0000:05:00.0",               # amdsmi_get_gpu_device_bdf
        "kfd_node": 2,                       # amdsmi_get_gpu_kfd_info()["node_id"], or null
        "uuid": "...", "market_name": "AMD Instinct MI300X",
        "device_id": "0x74a1",               # amdsmi_get_gpu_asic_info()["device_id"]
        "memory_total": 206141652992,        # bytes, amdsmi_get_gpu_memory_total(VRAM), or null
        "compute_partition": "SPX", "memory_partition": "NPS1",   # or null where not supported
        "driver_version": "6.12.12",
        "errors": ["amdsmi_get_gpu_memory_partition: ..."]}]}

API: https://rocm.docs.amd.com/projects/amdsmi/en/latest/reference/amdsmi-py-api.html. The
package imports ``libamd_smi.so`` at import time and fails (not with ImportError) without it, so
the library is looked for first, where the package itself looks (``ROCM_HOME``/``ROCM_PATH``,
the linker's path, ``/opt/rocm/lib``).
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
from typing import Any

from .._reading import reading_devices

__all__ = ["FORMAT_VERSION", "read_live", "validate"]

FORMAT_VERSION = 1
# amdsmi_status_t AMDSMI_STATUS_NOT_SUPPORTED (amdsmi.h): a field this GPU does not have (partition
# modes before CDNA 3) is null, not an error.
_NOT_SUPPORTED = 2
_DEVICE_KEYS = {"bdf": str, "kfd_node": int, "uuid": str, "market_name": str, "device_id": str, "memory_total": int,
                "compute_partition": str, "memory_partition": str, "driver_version": str}


def validate(reading: Any) -> list[str]:
    """Why ``reading`` is not a usable AMD SMI reading (empty when it is)."""
    errors, devices = reading_devices(reading, FORMAT_VERSION)
    if devices is None:
        return errors
    for i, dev in enumerate(devices):
        if not isinstance(dev, dict):
            errors.append(f"devices[{i}]: expected an object")
            continue
        for key, kind in _DEVICE_KEYS.items():
            value = dev.get(key)
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                errors.append(f"devices[{i}].{key}: expected {kind.__name__}, got {value!r}"[:200])
        if not isinstance(dev.get("errors", []), list):
            errors.append(f"devices[{i}].errors: expected a list of messages")
    return errors


def _library_present() -> bool:
    for var in ("ROCM_HOME", "ROCM_PATH"):
        if os.environ.get(var) and os.path.exists(os.path.join(os.environ[var], "lib", "libamd_smi.so")):
            return True
    return bool(ctypes.util.find_library("amd_smi")) or os.path.exists("/opt/rocm/lib/libamd_smi.so")


def read_live() -> dict[str, Any] | None:
    """Read AMD SMI on this machine; None without the package, the library or the driver."""
    if importlib.util.find_spec("amdsmi") is None or not _library_present():
        return None
    try:
        import amdsmi
    except Exception:  # noqa: BLE001 - the package raises KeyError/OSError when it cannot load the library
        return None
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:  # noqa: BLE001 - AmdSmiLibraryException: no driver, or the driver failed
        return {"format": FORMAT_VERSION, "error": f"amdsmi_init: {exc}", "devices": []}
    try:
        return {"format": FORMAT_VERSION, "error": None,
                "devices": [_device(amdsmi, h) for h in amdsmi.amdsmi_get_processor_handles()]}
    except Exception as exc:  # noqa: BLE001
        return {"format": FORMAT_VERSION, "error": f"amdsmi_get_processor_handles: {exc}", "devices": []}
    finally:
        try:
            amdsmi.amdsmi_shut_down()
        except Exception:  # noqa: BLE001
            pass


def _device(amdsmi: Any, handle: Any) -> dict[str, Any]:
    errors: list[str] = []

    def call(name: str, *args: Any) -> Any:
        try:
            return getattr(amdsmi, name)(handle, *args)
        except Exception as exc:  # noqa: BLE001 - one field's failure keeps the others
            if getattr(exc, "err_code", None) != _NOT_SUPPORTED:
                errors.append(f"{name}: {' '.join(str(exc).split())}"[:200])
            return None

    asic = call("amdsmi_get_gpu_asic_info") or {}
    kfd = call("amdsmi_get_gpu_kfd_info") or {}
    driver = call("amdsmi_get_gpu_driver_info") or {}
    memory = call("amdsmi_get_gpu_memory_total", amdsmi.AmdSmiMemoryType.VRAM)
    node = kfd.get("node_id")
    return {
        "bdf": call("amdsmi_get_gpu_device_bdf"),
        "kfd_node": node if isinstance(node, int) else None,
        "uuid": call("amdsmi_get_gpu_device_uuid"),
        "market_name": asic.get("market_name") if asic.get("market_name") not in (None, "N/A") else None,
        "device_id": asic.get("device_id") if asic.get("device_id") not in (None, "N/A") else None,
        "memory_total": memory if isinstance(memory, int) else None,
        "compute_partition": call("amdsmi_get_gpu_compute_partition") or None,
        "memory_partition": call("amdsmi_get_gpu_memory_partition") or None,
        "driver_version": driver.get("driver_version") if driver.get("driver_version") not in (None, "N/A") else None,
        "errors": errors,
    }
