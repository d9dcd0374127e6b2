"""Intel Gaudi 2 and Gaudi 3 (Habana Labs) accelerators, scheduled as Ray ``HPU``.

Devices (kernel ``Documentation/ABI/testing/sysfs-driver-habanalabs``, the habanalabs driver's
``common/sysfs.c``): the PCI functions bound to the ``habanalabs`` driver
(``/sys/bus/pci/drivers/habanalabs/<BDF>``, as Intel's network-operator finds them,
``cmd/discover/network.go``) whose accel device node ``/dev/accel/accel<N>`` exists (a container
sees only the devices the Habana runtime mounted). The driver's attributes sit in the PCI
function's directory, which ``/sys/class/accel/accel<N>/device`` points at: ``device_type``
(``GAUDI2``, ``GAUDI3``), ``module_id`` (the OAM slot, the device's place in the box's scale-up
fabric), ``status`` (``Operational`` ...).

Ray 2.60's HPU manager (``ray/_private/accelerators/hpu.py``) counts what the Habana runtime
opens and hands each task ids ``0..n-1`` in ``HABANA_VISIBLE_MODULES``, which the runtime reads as
*module ids*. So devices are indexed in module-id order, and a node whose module ids are not
``0..n-1`` (a container given some modules) is reported: Ray's ids would name other modules.
Ray names the type ``Intel-`` + the device name only in a process where the Habana PyTorch bridge
is initialised, never in ``ray start``; the backend leaves the type to Ray accordingly.

NICs: each Gaudi's on-chip RoCE ports that leave the box (scale-out: 3 per Gaudi 2 or 3 on HLS-2
and HLS-3 boards, https://docs.habana.ai/en/latest/Management_and_Monitoring/Network_Configuration/index.html)
are the Ethernet interfaces the driver registers under the PCI function (``<BDF>/net/<ifname>``;
Intel's network-operator configures exactly these as scale-out interfaces). They are the device's
own, at the nearest path class. Scale-up: on an OAM baseboard (Gaudi 2 ``0x1020``, Gaudi 3
``0x1060``) the other 21 ports join the 8 devices all-to-all, 3 ports per pair (same page); PCIe
cards (``0x1063``) have no such links. ``hl-smi`` (recorded as ``commands/hl-smi.json``) adds
serial numbers, UUIDs, memory and the driver version; without it sysfs is a complete answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ...backend import AcceleratorBackend, Capabilities, PciId
from ...errors import CommandError, HostReadError
from ...host import Host
from ...hw.cloud import host_fabric, location
from ...hw.nics import pcie_switch_of
from ...hw.pci import BDF_RE, PCI_DEVICES, PciFunction, read_function, read_ids
from ...labels import sanitize_value
from ...model import Device, Link, Nic, NicPath, NodeDescription, Problem, Sku
from ...problems import TOOL_FAILED
from .._reading import never_raises
from .._sku import identify_function, node_identity, pci_description, to_sku
from . import hlsmi

__all__ = ["GaudiBackend", "HABANA_VENDOR_ID", "DRIVER_DIR", "VISIBLE_MODULES"]

HABANA_VENDOR_ID = "0x1da3"
DRIVER_DIR = "/sys/bus/pci/drivers/habanalabs"
VISIBLE_MODULES = "HABANA_VISIBLE_MODULES"
_PREFIX = "gaudi.rayaccel.io"
_ACCEL_RE = re.compile(r"^accel(\d+)$")
_OAM_DEVICE_IDS = frozenset({"0x1020", "0x1060"})  # Gaudi 2 HL-225 and Gaudi 3 HL-325L mezzanines
_SCALE_UP_PORTS_PER_PEER = 3
_HL_SMI_TIMEOUT_S = 1.5
_NO_DEVICE = Sku(vendor="intel", name="gaudi-none", generation="unknown", known=False)


class _Gaudi:
    __slots__ = ("fn", "accel", "module_id", "device_type", "status")

    def __init__(self, fn: PciFunction, accel: int | None, module_id: int | None, device_type: str | None,
                 status: str | None) -> None:
        self.fn, self.accel, self.module_id, self.device_type, self.status = fn, accel, module_id, device_type, status


class GaudiBackend(AcceleratorBackend):
    """Intel Gaudi 2 and 3 as Ray ``HPU`` (Ray's HPU manager sets ``HABANA_VISIBLE_MODULES``)."""

    name = "gaudi"
    resource_name = "HPU"
    label_prefix = _PREFIX
    visible_devices_env_var = VISIBLE_MODULES
    family = "Intel Gaudi"
    # Processing accelerators of Habana Labs (pci.ids vendor 1da3: Gaudi, Gaudi2, Gaudi3, ...).
    pci_ids = (PciId(HABANA_VENDOR_ID, classes=("0x12",)),)
    driver_paths = (DRIVER_DIR,)
    driver_hint = (
        "Intel Gaudi devices are on the PCI bus but the habanalabs driver is not loaded "
        f"({DRIVER_DIR} is missing): install the Intel Gaudi software stack's habanalabs-dkms package and "
        "`modprobe habanalabs`; on Kubernetes, the Intel Gaudi base operator"
    )
    capabilities = Capabilities(topology_links=True, nic_affinity=True, numa_affinity=True, device_visibility=True,
                                uses_network=True)

    def detect(self, host: Host) -> bool:
        """True when a PCI function is bound to the habanalabs driver."""
        return never_raises(lambda: any(BDF_RE.match(n) for n in host.listdir(DRIVER_DIR)))

    def describe(self, host: Host) -> NodeDescription:
        """Devices in module order with SKU, NUMA/CPUs, their scale-out ports and scale-up links."""
        problems: list[Problem | str] = []
        found = _devices(host, problems)
        usable, hidden = _usable(host, found, problems)
        smi = _hl_smi(host, problems)
        by_bus = {d.bus_id: d for d in smi} if smi else {}
        usable = _in_module_order(usable, by_bus, problems)

        idents = [identify_function(host, g.fn, driver_name=g.device_type,
                                    memory_bytes=(by_bus.get(g.fn.address).memory_bytes if g.fn.address in by_bus else None))
                  for g in usable]
        ident = node_identity(idents, [g.fn.address for g in usable], problems, noun="Gaudi device")
        # Ray names the type only where the Habana PyTorch bridge is initialised (never in `ray start`).
        sku = to_sku(ident, None) if ident is not None else _NO_DEVICE

        nics: list[Nic] = []
        devices = []
        for index, g in enumerate(usable):
            own = _scale_out_ports(host, g.fn, problems)
            nics.extend(own)
            reading = by_bus.get(g.fn.address)
            devices.append(Device(
                index=index,
                id=(reading.uuid or reading.serial) if reading and (reading.uuid or reading.serial) else g.fn.address,
                pci_address=g.fn.address,
                numa_node=g.fn.numa_node,
                cpus=g.fn.cpus,
                pcie_switch=pcie_switch_of(g.fn),
                memory_bytes=(reading.memory_bytes if reading and reading.memory_bytes else sku.memory_bytes),
                nics=tuple(NicPath(nic=n.name, path="PIX") for n in own),
            ))
        links = ()
        if len(usable) > 1 and all(g.fn.device in _OAM_DEVICE_IDS for g in usable):
            links = tuple(Link(a=a, b=b, kind="roce", lanes=_SCALE_UP_PORTS_PER_PEER)
                          for a in range(len(usable)) for b in range(a + 1, len(usable)))
        attributes = _attributes(usable, smi, hidden, host.env)
        return pci_description(
            self, sku, devices, problems,
            interconnect="roce" if links else "pcie",
            links=links,
            nics=tuple(nics),
            fabric=host_fabric(host, problems),
            location=location(host, problems),
            attributes=attributes,
        )


# -- sysfs ----------------------------------------------------------------------------------------


def _attr(host: Host, address: str, name: str, problems: list[Problem | str]) -> str | None:
    try:
        text = host.read_optional(f"{PCI_DEVICES}/{address}/{name}", max_bytes=256)
    except HostReadError as exc:
        problems.append(Problem.of(exc))
        return None
    return text.strip() or None if text is not None else None


def _accel_index(host: Host, address: str) -> int | None:
    """N of the function's ``accel<N>`` class device (``<BDF>/accel/``), else of the
    ``/sys/class/accel/accel<N>`` whose ``device`` link resolves to the function."""
    for name in host.listdir(f"{PCI_DEVICES}/{address}/accel"):
        m = _ACCEL_RE.match(name)
        if m:
            return int(m.group(1))
    real = host.realpath(f"{PCI_DEVICES}/{address}")
    for name in host.listdir("/sys/class/accel"):
        m = _ACCEL_RE.match(name)
        if m and host.exists(f"/sys/class/accel/{name}/device") and host.realpath(f"/sys/class/accel/{name}/device") == real:
            return int(m.group(1))
    return None


def _devices(host: Host, problems: list[Problem | str]) -> list[_Gaudi]:
    out = []
    for address in (n for n in host.listdir(DRIVER_DIR) if BDF_RE.match(n)):
        try:
            fn = read_function(host, address, problems, read_ids(host, address))
        except HostReadError as exc:
            problems.append(Problem.of(exc, f"{exc}; the habanalabs device at {address} is not counted"))
            continue
        module = _attr(host, address, "module_id", problems)
        try:
            module_id = int(module) if module is not None else None
        except ValueError:
            problems.append(f"{PCI_DEVICES}/{address}/module_id: unparsable ({module[:20]!r})")
            module_id = None
        try:
            accel = _accel_index(host, address)
        except HostReadError as exc:
            problems.append(Problem.of(exc))
            accel = None
        out.append(_Gaudi(fn, accel, module_id, _attr(host, address, "device_type", problems),
                          _attr(host, address, "status", problems)))
        status = out[-1].status
        if status is not None and status.lower() != "operational":
            problems.append(f"Gaudi device {address} reports status {status!r} (not operational)")
    return out


def _usable(host: Host, found: list[_Gaudi], problems: list[Problem | str]) -> tuple[list[_Gaudi], int]:
    """The devices a process can open (``/dev/accel/accel<N>`` exists) and how many it cannot.

    The Habana container runtime mounts only the devices named by ``HABANA_VISIBLE_DEVICES``;
    outside a container a bound device without its node is a problem."""
    usable = [g for g in found if g.accel is not None and host.exists(f"/dev/accel/accel{g.accel}")]
    hidden = len(found) - len(usable)
    if hidden and "HABANA_VISIBLE_DEVICES" not in host.env:
        missing = [g.fn.address for g in found if g not in usable]
        problems.append(f"habanalabs devices {', '.join(missing[:4])} have no /dev/accel/accel<N> node; not counted")
    return usable, hidden


def _in_module_order(devices: list[_Gaudi], by_bus: Mapping[str, hlsmi.HlSmiDevice], problems: list[Problem | str]) -> list[_Gaudi]:
    """Sorted by module id (sysfs, else hl-smi); accel order where no module id is known."""
    for g in devices:
        if g.module_id is None and g.fn.address in by_bus:
            g.module_id = by_bus[g.fn.address].module_id
    if any(g.module_id is None for g in devices):
        problems.append("module ids unknown (no module_id in sysfs, no hl-smi): devices indexed in accel order, "
                        f"which {VISIBLE_MODULES} may not follow")
        return sorted(devices, key=lambda g: (g.accel if g.accel is not None else 1 << 30, g.fn.address))
    ordered = sorted(devices, key=lambda g: (g.module_id, g.fn.address))
    modules = [g.module_id for g in ordered]
    if modules != list(range(len(ordered))):
        problems.append(f"module ids {modules} are not 0..{len(ordered) - 1}: Ray's HPU manager sets {VISIBLE_MODULES} "
                        "to 0..n-1, which the Habana runtime reads as module ids, so tasks would be sent to modules "
                        "this node does not offer")
    return ordered


def _scale_out_ports(host: Host, fn: PciFunction, problems: list[Problem | str]) -> list[Nic]:
    ports = []
    for ifname in host.listdir(f"{PCI_DEVICES}/{fn.address}/net"):
        speed = None
        try:
            text = host.read_optional(f"/sys/class/net/{ifname}/speed", max_bytes=64)
            speed = int(text.strip()) / 1000 if text and text.strip().lstrip("-").isdigit() and int(text) > 0 else None
        except HostReadError as exc:
            problems.append(Problem.of(exc))
        ports.append(Nic(name=ifname, kind="roce", pci_address=fn.address, numa_node=fn.numa_node, netdev=ifname,
                         rate_gbps=speed))
    return ports


# -- hl-smi, location, labels -----------------------------------------------------------------------


def _hl_smi(host: Host, problems: list[Problem | str]) -> list[hlsmi.HlSmiDevice] | None:
    try:
        text = hlsmi.run(host, min(_HL_SMI_TIMEOUT_S, host.deadline.remaining() / 2))
    except CommandError as exc:
        if exc.reason != "not installed":
            problems.append(Problem.of(exc, f"hl-smi: {exc.reason}"))
        return None
    try:
        return hlsmi.parse(text)
    except ValueError as exc:
        problems.append(Problem(code=TOOL_FAILED, message=f"hl-smi printed unparsable output: {exc}"[:300]))
        return None


def _attributes(devices: list[_Gaudi], smi: list[hlsmi.HlSmiDevice] | None, hidden: int,
                env: Mapping[str, str]) -> dict[str, str]:
    out = {f"{_PREFIX}/hl-smi": "present" if smi is not None else "absent"}
    types = {g.device_type for g in devices} - {None}
    if len(types) == 1:
        out[f"{_PREFIX}/device-type"] = types.pop()
    for key, values in (("board", {d.name for d in smi or ()}), ("driver-version", {d.driver_version for d in smi or ()})):
        values -= {None}
        if len(values) == 1:
            out[f"{_PREFIX}/{key}"] = values.pop()
    if hidden and "HABANA_VISIBLE_DEVICES" in env:
        out[f"{_PREFIX}/devices-not-visible"] = str(hidden)
    return {k: clean for k, v in out.items() if (clean := sanitize_value(v))}
