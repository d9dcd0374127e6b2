"""What the AWS Neuron driver and ``neuron-ls`` say about a host, read through a :class:`Host`.

Plain records only; :mod:`ray_accel_ext.backends.neuron.backend` turns them into a description. Facts and
sources: ``reference/hardware.md`` sections 2.8 and 5.1.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ...errors import HostReadError
from ...host import Host
from ...hw.pci import parse_cpulist
from ...model import Problem

__all__ = [
    "NEURON_LS",
    "SysfsDevice",
    "LsDevice",
    "UltraServerIds",
    "device_numbers",
    "read_sysfs_device",
    "run_neuron_ls",
    "parse_neuron_ls",
    "read_ultraserver",
    "parse_core_list",
]

NEURON_LS = "/opt/aws/neuron/bin/neuron-ls"
# Neuron devices are virtual class devices created without a parent (device_create(class, NULL,
# ...)), so there is no `device` link to the PCI function:
# https://github.com/aws-neuron/aws-neuron-driver/blob/master/neuron_cdev.c
VIRTUAL_DIR = "/sys/devices/virtual/neuron_device"
CLASS_DIR = "/sys/class/neuron_device"
_NAME_RE = re.compile(r"^neuron(\d+)$", re.ASCII)
_SHORT_BDF_RE = re.compile(r"^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
_SERVER_ID_RE = re.compile(r"^[0-9a-f]{16}$")


@dataclass(frozen=True, slots=True)
class SysfsDevice:
    """One ``neuronN`` as the driver's sysfs shows it; None where a file was absent or unreadable."""

    number: int
    core_count: int | None = None  # physical NeuronCores (root-only file)
    connected: tuple[int, ...] | None = None  # neighbour device numbers (root-only file)
    device_name: str | None = None  # info/architecture/device_name: Trainium2
    unreadable: tuple[str, ...] = ()  # files that exist but could not be read (root-only)


@dataclass(frozen=True, slots=True)
class LsDevice:
    """One entry of ``neuron-ls -j``."""

    number: int
    bdf: str | None = None  # sysfs form 0000:cc:00.0
    numa_node: int | None = None
    cpus: tuple[int, ...] = ()
    connected: tuple[int, ...] | None = None
    nc_count: int | None = None  # logical NeuronCores under neuron-ls's own LNC
    logical_nc_config: int | None = None
    memory_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class UltraServerIds:
    """Class-level UltraServer identity (``server_id_<n>``/``node_id_<n>``) for an n-node mode."""

    hosts: int
    server_id: str
    node_id: int


def device_numbers(host: Host) -> list[int]:
    """Every ``N`` of ``neuronN`` in the driver's sysfs directories and ``/dev``, sorted."""
    found: set[int] = set()
    for directory in (VIRTUAL_DIR, CLASS_DIR, "/dev"):
        try:
            names = host.listdir(directory)
        except HostReadError:
            continue
        for name in names:
            m = _NAME_RE.match(name)
            if m:
                found.add(int(m.group(1)))
    return sorted(found)


def _read(host: Host, path: str, unreadable: list[str]) -> str | None:
    try:
        return host.read_optional(path)
    except HostReadError as exc:
        unreadable.append(f"{path}: {exc.reason}")
        return None


def read_sysfs_device(host: Host, number: int, problems: list[Problem | str]) -> SysfsDevice:
    """The sysfs attributes of ``neuron<number>``. Unreadable root-only files are listed in
    ``unreadable`` (the caller decides whether another source covers them); corrupt ones go to
    ``problems``."""
    base = f"{VIRTUAL_DIR}/neuron{number}"
    if not host.is_dir(base):
        base = f"{CLASS_DIR}/neuron{number}"
    unreadable: list[str] = []
    core_count = connected = None
    # core_count is written with sprintf("%d") and no trailing newline (neuron_cdev.c).
    text = _read(host, f"{base}/core_count", unreadable)
    if text is not None:
        try:
            core_count = int(text.strip())
            if core_count <= 0:
                raise ValueError("not positive")
        except ValueError:
            problems.append(f"{base}/core_count: unparsable {text.strip()[:20]!r}")
            core_count = None
    text = _read(host, f"{base}/connected_devices", unreadable)
    if text is not None:
        try:
            connected = _int_list(text)
        except ValueError:
            problems.append(f"{base}/connected_devices: unparsable {text.strip()[:40]!r}")
    name = _read(host, f"{base}/info/architecture/device_name", unreadable)
    return SysfsDevice(
        number=number,
        core_count=core_count,
        connected=connected,
        device_name=name.strip() or None if name else None,
        unreadable=tuple(unreadable),
    )


def _int_list(text: str) -> tuple[int, ...]:
    # "12, 1, 3, 4\n", or "\n" for a device without neighbours.
    return tuple(int(x) for x in text.replace(",", " ").split())


def run_neuron_ls(host: Host, timeout_s: float) -> str:
    """Stdout of ``neuron-ls -j`` (fixed path, no shell, bounded); raises CommandError."""
    return host.run([NEURON_LS, "-j"], timeout_s=timeout_s)


def parse_neuron_ls(text: str) -> dict[int, LsDevice]:
    """``neuron-ls -j`` output by device number. Raises ValueError on anything malformed."""
    try:
        data = json.loads(text)
    except RecursionError:  # thousands of nested brackets: no neuron-ls prints that
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(data, list):
        raise ValueError(f"expected a JSON list of devices, got {type(data).__name__}")
    out: dict[int, LsDevice] = {}
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise ValueError(f"[{i}]: expected an object, got {type(entry).__name__}")
        number = entry.get("neuron_device")
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise ValueError(f"[{i}].neuron_device: expected a device number, got {number!r}")
        out[number] = LsDevice(
            number=number,
            bdf=_bdf(entry.get("bdf"), i),
            numa_node=_opt_int(entry.get("numa_node"), f"[{i}].numa_node", allow_negative=True),
            cpus=parse_cpulist(str(entry["cpu_affinity"])) if entry.get("cpu_affinity") else (),
            connected=_connected(entry.get("connected_to"), i),
            nc_count=_opt_int(entry.get("nc_count"), f"[{i}].nc_count"),
            logical_nc_config=_opt_int(entry.get("logical_neuroncore_config"), f"[{i}].logical_neuroncore_config"),
            memory_bytes=_opt_int(entry.get("memory_size"), f"[{i}].memory_size"),
        )
    return out


def _bdf(value: object, i: int) -> str | None:
    # neuron-ls prints the BDF without the PCI domain ("cc:00.0").
    if value in (None, ""):
        return None
    m = _SHORT_BDF_RE.match(str(value).strip())
    if not m:
        raise ValueError(f"[{i}].bdf: not a PCI address: {value!r}")
    domain, bus, dev, fn = m.groups()
    return f"{(domain or '0000').lower()}:{bus.lower()}:{dev.lower()}.{fn}"


def _opt_int(value: object, where: str, *, allow_negative: bool = False) -> int | None:
    # numa_node is a JSON string ("1") in neuron-ls output; -1 means unknown.
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"{where}: expected an integer, got {value!r}")
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected an integer, got {value!r}") from None
    if number < 0:
        if allow_negative:
            return None
        raise ValueError(f"{where}: negative ({number})")
    return number


def _connected(value: object, i: int) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise ValueError(f"[{i}].connected_to: expected a list of device numbers, got {value!r}")
    return tuple(value)


def read_ultraserver(host: Host, problems: list[Problem | str]) -> UltraServerIds | None:
    """This node's UltraServer identity from ``/sys/class/neuron_device/{server,node}_id_<n>``.

    ``ultraserver_mode`` lists the supported modes (1 = 4-node X4, 2/3 = 2-node X2H/X2V,
    4 = standalone X1; share/neuron_driver_shared.h); the largest multi-node mode wins. While pod
    election runs the driver writes ``busy`` / an all-zero server id: that is reported, not used.
    None when the platform has no pod election (no files or empty files).
    """
    modes_text = _quiet(host, f"{CLASS_DIR}/ultraserver_mode", problems)
    modes: set[int] = set()
    if modes_text and modes_text.strip():
        try:
            modes = set(_int_list(modes_text))
        except ValueError:
            problems.append(f"{CLASS_DIR}/ultraserver_mode: unparsable {modes_text.strip()[:40]!r}")
    candidates = [(4, 1), (2, 2), (2, 3)]
    for hosts, mode in candidates:
        if modes and mode not in modes:
            continue
        server = _quiet(host, f"{CLASS_DIR}/server_id_{hosts}", problems)
        node = _quiet(host, f"{CLASS_DIR}/node_id_{hosts}", problems)
        if server is None or not server.strip():
            continue
        server, node_text = server.strip().lower(), (node or "").strip()
        if not _SERVER_ID_RE.match(server):
            problems.append(f"{CLASS_DIR}/server_id_{hosts}: unparsable {server[:40]!r}")
            return None
        if server == "0" * 16 or node_text == "busy":
            problems.append(f"UltraServer pod election not finished (server_id_{hosts}={server}, node_id_{hosts}={node_text or '?'})")
            return None
        try:
            node_id = int(node_text)
        except ValueError:
            problems.append(f"{CLASS_DIR}/node_id_{hosts}: unparsable {node_text[:20]!r}")
            return None
        if not 0 <= node_id < hosts:
            problems.append(f"{CLASS_DIR}/node_id_{hosts}: {node_id} outside 0..{hosts - 1}")
            return None
        return UltraServerIds(hosts=hosts, server_id=server, node_id=node_id)
    return None


def _quiet(host: Host, path: str, problems: list[Problem | str]) -> str | None:
    try:
        return host.read_optional(path)
    except HostReadError as exc:
        problems.append(Problem.of(exc))
        return None


def parse_core_list(text: str) -> list[int]:
    """``NEURON_RT_VISIBLE_CORES`` syntax: ``0,1,2`` or ranges ``0-3``. Raises ValueError."""
    return list(parse_cpulist(text))
