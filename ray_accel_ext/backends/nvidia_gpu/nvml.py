"""The narrow NVML interface of the NVIDIA backend: one reading, as one plain dict.

The backend never calls NVML itself. It asks ``host.library("nvml", read_live)``: on a host
snapshot that is the recording ``libraries/nvml.json``; on the live machine it is
:func:`read_live`, a direct translation of ``nvidia-ml-py`` (module ``pynvml``) calls into the
same shape; elsewhere ``None``. ``record.py`` writes the live reading into a snapshot unchanged.

Shape (``FORMAT_VERSION`` 2; a format-1 reading, recorded before MIG was read, is read the same
way with every GPU whole)::

    {"format": 2,
     "driver_version": "580.126.20",               # or null
     "error": null,                                # set when NVML is present but failed as a whole
     "devices": [                                  # NVML index order
       {"index": 0,
        "bus_id": "00000000:1A:00.0",              # nvmlPciInfo_t.busId, NVML form
        "uuid": "GPU-...", "name": "NVIDIA H100 80GB HBM3",
        "memory_total": 85520809984,               # bytes, or null
        "nvlinks": [{"link": 0, "version": 6,      # nvmlNvlinkVersion_t value, or null
                     "remote_bus_id": "00000000:05:00.0",
                     "remote_type": 2}],           # 0 GPU, 1 IBMNPU, 2 SWITCH, 255 unknown
        "fabric": {"state": 3, "status": 0,        # nvmlGpuFabricInfo_v3_t, or null
                   "cluster_uuid": "50000000-0000-0000-0000-000000000005", "clique_id": 4000000004},
        "platform": {"chassis_serial": "1821324000123",  # nvmlPlatformInfo_v2_t, or null (optional)
                     "slot_number": 7, "tray_index": 3, "host_id": 0, "peer_type": 1, "module_id": 2},
        "numa_node_id": 2,                         # nvmlDeviceGetNumaNodeId, or null (optional)
        "c2c_links": 2,                            # active NVLink-C2C links, or null (optional)
        "mig": null,                               # or MIG mode and instances (see mig.py)
        "errors": ["nvmlDeviceGetMemoryInfo: ..."]}]}

``numa_node_id`` is the NUMA node that holds the GPU's memory where the OS maps it as one (the
``GPU NUMA ID`` column of ``nvidia-smi topo -m``: 2, 10, 18, 26 on a GB200 tray; N/A, here null,
on PCIe-attached GPUs). ``c2c_links`` counts the GPU's active NVLink-C2C links to its Grace CPU
as NCCL counts them (``NVML_FI_DEV_C2C_LINK_COUNT``, then ``NVML_FI_DEV_C2C_LINK_GET_STATUS`` == 1
per link; NVIDIA/nccl ``src/graph/xml.cc``): 0 on PCIe GPUs. Both are absent from recordings that
predate them.

``platform`` is where the GPU sits in its rack (Blackwell and later drivers,
``nvmlDeviceGetPlatformInfo``; https://docs.nvidia.com/deploy/nvml-api/structnvmlPlatformInfo__v2__t.html):
the chassis serial number (v1 of the struct calls the same bytes ``rackGuid``), the slot in the
chassis counting switch trays, the index among the compute trays (``trayIndex``, v1
``computeSlotIndex``), the node within the slot, the NVLink peer type and the GPU's module id.
Readings recorded before it was read have no ``platform`` key.

Only active links are listed. ``NVML_ERROR_NOT_SUPPORTED`` for a field gives ``null`` (PCIe GPUs
have no fabric); any other per-call error is kept in ``errors`` so the node can say it is degraded.
No driver (``NVMLError_LibraryNotFound``, ``NVMLError_DriverNotLoaded``) or no binding (neither
``nvidia-ml-py``'s ``pynvml`` nor Ray's bundled copy) means "no NVML": ``read_live`` returns
``None``. A live reading also says which binding read it (``"binding"``: ``nvidia-ml-py`` or
``ray-bundled``); recordings made before that have no such key.
"""

from __future__ import annotations

import ctypes
import uuid as _uuid
from typing import Any

from .._reading import reading_devices
from .mig import read_mig, validate_mig  # noqa: F401 - read_mig is part of the reader

__all__ = ["BINDINGS", "FORMAT_VERSION", "READ_FORMATS", "import_binding", "read_live", "sysfs_address", "validate"]

FORMAT_VERSION = 2
READ_FORMATS = (1, 2)  # 1: before MIG was read

FABRIC_STATE_COMPLETED = 3
NVML_SUCCESS = 0
REMOTE_GPU = 0
REMOTE_SWITCH = 2
_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS
_PLATFORM_INTS = ("slot_number", "tray_index", "host_id", "peer_type", "module_id")


def sysfs_address(bus_id: str) -> str | None:
    """NVML ``00000000:1A:00.0`` (or legacy ``0000:1A:00.0``) -> sysfs ``0000:1a:00.0``; None if malformed.

    NVML prints an 8-digit upper-case domain, sysfs a 4-digit lower-case one
    (reference/hardware.md section 3.5, as GFD's ``nvml-device.go`` normalises it).
    """
    try:
        domain, bus, devfn = bus_id.strip().split(":")
        dev, _, fn = devfn.partition(".")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn or '0', 16):x}"
    except (ValueError, AttributeError):
        return None


def validate(reading: Any) -> list[str]:
    """Why ``reading`` is not a usable NVML reading (empty list when it is)."""
    errors, devices = reading_devices(reading, READ_FORMATS)
    if devices is None:
        return errors
    for i, dev in enumerate(devices):
        where = f"devices[{i}]"
        if not isinstance(dev, dict):
            errors.append(f"{where}: expected an object")
            continue
        bus_id = dev.get("bus_id")
        if bus_id is not None and (not isinstance(bus_id, str) or sysfs_address(bus_id) is None):
            errors.append(f"{where}.bus_id: not a PCI bus id: {bus_id!r}")
        if not isinstance(dev.get("errors", []), list):
            errors.append(f"{where}.errors: expected a list of messages")
        for key in ("uuid", "name"):
            if dev.get(key) is not None and not isinstance(dev[key], str):
                errors.append(f"{where}.{key}: expected a string")
        mem = dev.get("memory_total")
        if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int) or mem < 0):
            errors.append(f"{where}.memory_total: expected bytes, got {mem!r}")
        links = dev.get("nvlinks", [])
        if not isinstance(links, list) or not all(
            isinstance(l, dict) and isinstance(l.get("remote_type"), int) for l in links
        ):
            errors.append(f"{where}.nvlinks: expected a list of links with an integer remote_type")
        platform = dev.get("platform")
        if platform is not None and not (
            isinstance(platform, dict)
            and isinstance(platform.get("chassis_serial", ""), str)
            and all(isinstance(platform.get(k, 0), int) and not isinstance(platform.get(k, 0), bool)
                    for k in _PLATFORM_INTS)
        ):
            errors.append(f"{where}.platform: expected {{chassis_serial, {', '.join(_PLATFORM_INTS)}}}")
        for key in ("numa_node_id", "c2c_links"):
            value = dev.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                errors.append(f"{where}.{key}: expected a non-negative integer or null, got {value!r}")
        fabric = dev.get("fabric")
        if fabric is not None and not (
            isinstance(fabric, dict)
            and isinstance(fabric.get("state"), int)
            and isinstance(fabric.get("cluster_uuid", ""), str)
            and isinstance(fabric.get("clique_id", 0), int)
        ):
            errors.append(f"{where}.fabric: expected {{state, status, cluster_uuid, clique_id}}")
        errors.extend(validate_mig(where, dev.get("mig")))
    return errors


# -- live reading over nvidia-ml-py ---------------------------------------------------------------


# Where a reading's NVML binding came from: the ``nvidia-ml-py`` package (module ``pynvml``), else the
# copy Ray ships (``ray._private.thirdparty.pynvml``, reference/hardware.md 3.5), so a node without
# the package still reads NVLink and the multi-node NVLink domain where Ray is installed.
BINDINGS = (("pynvml", "nvidia-ml-py"), ("ray._private.thirdparty.pynvml", "ray-bundled"))


def import_binding() -> tuple[Any, str] | tuple[None, None]:
    """(module, name) of the first NVML binding that imports, in :data:`BINDINGS` order."""
    import importlib

    for module_name, name in BINDINGS:
        try:
            return importlib.import_module(module_name), name
        except ImportError:
            continue
    return None, None


def read_live() -> dict[str, Any] | None:
    """Read NVML on this machine; None when there is no NVML (no binding, library or driver).
    The reading's ``binding`` says which of :data:`BINDINGS` read it."""
    pynvml, binding = import_binding()
    if pynvml is None:
        return None
    reading = _read_with(pynvml)
    if reading is not None:
        reading["binding"] = binding
    return reading


def _read_with(pynvml: Any) -> dict[str, Any] | None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        if _no_driver(pynvml, exc):
            return None
        return {"format": FORMAT_VERSION, "driver_version": None, "error": f"nvmlInit: {exc}", "devices": []}
    try:
        return _read_initialised(pynvml)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _no_driver(pynvml: Any, exc: Exception) -> bool:
    codes = {pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED}
    return getattr(exc, "value", None) in codes


def _read_initialised(pynvml: Any) -> dict[str, Any]:
    errors: list[str] = []
    driver = _call(pynvml, errors, "nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion)
    count = _call(pynvml, errors, "nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount)
    devices = [_read_device(pynvml, i) for i in range(count or 0)]
    return {
        "format": FORMAT_VERSION,
        "driver_version": _text(driver),
        "error": "; ".join(errors) or None,
        "devices": devices,
    }


def _read_device(pynvml: Any, index: int) -> dict[str, Any]:
    errors: list[str] = []
    handle = _call(pynvml, errors, "nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)
    if handle is None:
        return {"index": index, "bus_id": None, "nvlinks": [], "fabric": None, "errors": errors or ["no handle"]}
    pci = _call(pynvml, errors, "nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, handle)
    memory = _call(pynvml, errors, "nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle)
    return {
        "index": index,
        "bus_id": _text(pci.busId) if pci is not None else None,
        "uuid": _text(_call(pynvml, errors, "nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle)),
        "name": _text(_call(pynvml, errors, "nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle)),
        "memory_total": int(memory.total) if memory is not None else None,
        "nvlinks": _read_links(pynvml, handle, errors),
        "fabric": _read_fabric(pynvml, handle, errors),
        "platform": _read_platform(pynvml, handle, errors),
        "numa_node_id": _numa_node(pynvml, handle, errors),
        "c2c_links": _read_c2c(pynvml, handle, errors),
        "mig": read_mig(pynvml, handle, errors),
        "errors": errors,
    }


def _numa_node(pynvml: Any, handle: Any, errors: list[str]) -> int | None:
    fn = getattr(pynvml, "nvmlDeviceGetNumaNodeId", None)
    node = _call(pynvml, errors, "nvmlDeviceGetNumaNodeId", fn, handle) if fn is not None else None
    return int(node) if node is not None and int(node) >= 0 else None


def _read_c2c(pynvml: Any, handle: Any, errors: list[str]) -> int | None:
    """Active NVLink-C2C links, counted as NCCL's ``xml.cc`` counts them; None where the binding
    or the driver has no such field."""
    count_id = getattr(pynvml, "NVML_FI_DEV_C2C_LINK_COUNT", None)
    status_id = getattr(pynvml, "NVML_FI_DEV_C2C_LINK_GET_STATUS", None)
    fn = getattr(pynvml, "nvmlDeviceGetFieldValues", None)
    if count_id is None or status_id is None or fn is None:
        return None
    try:
        (count,) = fn(handle, [count_id])
        if int(count.nvmlReturn) != NVML_SUCCESS:
            return None
        links = int(count.value.uiVal)
        values = fn(handle, [(status_id, link) for link in range(links)]) if links else []
    except pynvml.NVMLError as exc:
        if getattr(exc, "value", None) not in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            errors.append(f"nvmlDeviceGetFieldValues(C2C): {exc}")
        return None
    return sum(1 for v in values if int(v.nvmlReturn) == NVML_SUCCESS and int(v.value.uiVal) == 1)


def _read_links(pynvml: Any, handle: Any, errors: list[str]) -> list[dict[str, Any]]:
    links = []
    for link in range(_MAX_LINKS):
        try:
            active = pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError:
            # NOT_SUPPORTED / INVALID_ARGUMENT: no such link on this GPU (PCIe cards have none).
            continue
        if not active:
            continue
        remote = _call(pynvml, errors, f"nvmlDeviceGetNvLinkRemotePciInfo({link})",
                       pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        rtype = _call(pynvml, errors, f"nvmlDeviceGetNvLinkRemoteDeviceType({link})",
                      pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
        version = _call(pynvml, errors, f"nvmlDeviceGetNvLinkVersion({link})",
                        pynvml.nvmlDeviceGetNvLinkVersion, handle, link)
        links.append({
            "link": link,
            "version": version,
            "remote_bus_id": _text(remote.busId) if remote is not None else None,
            "remote_type": int(rtype) if rtype is not None else 255,
        })
    return links


def _read_fabric(pynvml: Any, handle: Any, errors: list[str]) -> dict[str, Any] | None:
    # nvmlDeviceGetGpuFabricInfoV (v3 struct) on current drivers; the legacy call on drivers that
    # predate it (FUNCTION_NOT_FOUND / ARGUMENT_VERSION_MISMATCH). Both take a struct pointer.
    skip = {getattr(pynvml, n, -1) for n in ("NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH")}
    for struct_name, fn_name in (
        ("c_nvmlGpuFabricInfo_v3_t", "nvmlDeviceGetGpuFabricInfoV"),
        ("c_nvmlGpuFabricInfo_t", "nvmlDeviceGetGpuFabricInfo"),
    ):
        struct, fn = getattr(pynvml, struct_name, None), getattr(pynvml, fn_name, None)
        if struct is None or fn is None:
            continue
        info = struct()
        try:
            fn(handle, ctypes.byref(info))
        except pynvml.NVMLError as exc:
            if getattr(exc, "value", None) in skip:
                continue
            if getattr(exc, "value", None) != pynvml.NVML_ERROR_NOT_SUPPORTED:
                errors.append(f"{fn_name}: {exc}")
            return None
        return {
            "state": int(info.state),
            "status": int(info.status),
            "cluster_uuid": str(_uuid.UUID(bytes=bytes(info.clusterUuid))),
            "clique_id": int(info.cliqueId),
        }
    return None


# nvmlPlatformInfo_v2_t field -> reading key, and the v1 names of the same bytes (NVML API reference,
# nvmlPlatformInfo_v1_t / _v2_t; pynvml c_nvmlPlatformInfo_v1_t / _v2_t).
_PLATFORM_V2 = (("slotNumber", "slot_number"), ("trayIndex", "tray_index"), ("hostId", "host_id"),
                ("peerType", "peer_type"), ("moduleId", "module_id"))
_PLATFORM_V1 = (("chassisPhysicalSlotNumber", "slot_number"), ("computeSlotIndex", "tray_index"),
                ("nodeIndex", "host_id"), ("peerType", "peer_type"), ("moduleId", "module_id"))


def _read_platform(pynvml: Any, handle: Any, errors: list[str]) -> dict[str, Any] | None:
    """Where the GPU sits in its rack (``nvmlDeviceGetPlatformInfo``), v2 struct first, then v1;
    None where the driver or GPU does not say (NOT_SUPPORTED before Blackwell, or no such call)."""
    fn = getattr(pynvml, "nvmlDeviceGetPlatformInfo", None)
    skip = {getattr(pynvml, n, -1) for n in ("NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
                                             "NVML_ERROR_NOT_SUPPORTED")}
    for version, serial_field, fields in (("v2", "chassisSerialNumber", _PLATFORM_V2), ("v1", "rackGuid", _PLATFORM_V1)):
        struct = getattr(pynvml, f"c_nvmlPlatformInfo_{version}_t", None)
        if struct is None or fn is None:
            continue
        info = struct()
        if not getattr(info, "version", 0):  # pynvml's constructor sets it; older bindings did not
            info.version = getattr(pynvml, f"nvmlPlatformInfo_{version}", 0)
        try:
            fn(handle, ctypes.byref(info))
        except pynvml.NVMLError as exc:
            if getattr(exc, "value", None) in skip:
                continue
            errors.append(f"nvmlDeviceGetPlatformInfo: {exc}")
            return None
        out = {"chassis_serial": _serial(getattr(info, serial_field))}
        out.update({key: _byte(getattr(info, name)) for name, key in fields})
        return out
    return None


def _serial(raw: Any) -> str:
    """A chassis serial: printable ASCII up to the first NUL, else the bytes in hex (pynvml gives
    ``c_char`` arrays as ``bytes``, or as ``str`` where its structures decode them)."""
    data = raw.encode("latin-1") if isinstance(raw, str) else bytes(raw)
    data = data.split(b"\0", 1)[0]
    text = data.decode("ascii", "replace")
    return text if text.isprintable() and "\ufffd" not in text else data.hex()


def _byte(value: Any) -> int:
    """A ``c_char`` field (one byte, as ``bytes`` or ``str``) as an int."""
    if isinstance(value, str):
        value = value.encode("latin-1")
    if isinstance(value, bytes):
        return value[0] if value else 0
    return int(value)


def _call(pynvml: Any, errors: list[str], what: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``; None when NVML says the field is not supported, else the error is noted."""
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        if getattr(exc, "value", None) not in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            errors.append(f"{what}: {exc}")
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
