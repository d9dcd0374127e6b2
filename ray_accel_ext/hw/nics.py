"""RDMA NICs and their PCIe distance to accelerators.

NICs come from ``/sys/class/infiniband/<dev>`` (InfiniBand, RoCE and EFA all register there; EFA
often has no netdev). The path class between a device and a NIC follows ``nvidia-smi topo -m``
(``reference/hardware.md`` section 6.3), computed from the resolved sysfs paths:

* different root complexes: ``NODE`` on the same NUMA node, else ``SYS``;
* same root complex, common ancestor is the host bridge or the root port: ``PHB``;
* common ancestor is a switch whose downstream ports hold both directly: ``PIX``;
* otherwise (more than one switch between them): ``PXB``.

On a coherent (Grace, NVLink-C2C) host nvidia-smi prints ``SYS`` for every pair under different
root complexes, the same socket's included: a GB200 tray shows ``SYS`` in every GPU-NIC cell and
between NICs of one Grace (captures in https://github.com/sgl-project/sglang/issues/11208 and
GB200 trays' ``nvidia-smi topo -m``); ``coherent=True`` applies that rule. NCCL's own view of the
same host (``P2C`` to the NICs of the GPU's Grace) is the transport plan's (``transport/nccl.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..errors import HostReadError
from ..host import Host
from ..model import PATH_CLASSES, Nic, NicPath, Problem
from ..problems import FILE_UNREADABLE
from .pci import BDF_RE, PciFunction, PciId, bridge_chain, read_function

__all__ = ["RdmaNic", "RDMA_NIC_PCI_IDS", "is_rdma_nic_pci", "list_rdma_nics", "path_class", "nearest_nics", "pcie_switch_of"]

# PCI functions that are RDMA NICs before any driver names them (the health monitors watch them
# come and go): Mellanox/NVIDIA ConnectX InfiniBand (0x0207) and Ethernet (0x0200) functions, and
# AWS EFA (vendor 1d0f, devices efa0-efa4; pci.ids and the aws/amzn-drivers efa_pci_id_tbl).
RDMA_NIC_PCI_IDS = (
    PciId("0x15b3", classes=("0x0207", "0x0200")),
    PciId("0x1d0f", devices=frozenset({"0xefa0", "0xefa1", "0xefa2", "0xefa3", "0xefa4"})),
)


def is_rdma_nic_pci(vendor: str | None, device: str | None, pci_class: str | None) -> bool:
    """True for a PCI function of :data:`RDMA_NIC_PCI_IDS`."""
    return any(m.matches(vendor, device, pci_class) for m in RDMA_NIC_PCI_IDS)

IB_CLASS = "/sys/class/infiniband"


class RdmaNic:
    """A NIC with the PCI function behind it (``function`` None when it has no PCI parent)."""

    __slots__ = ("nic", "function")

    def __init__(self, nic: Nic, function: PciFunction | None) -> None:
        self.nic = nic
        self.function = function


def _kind(link_layer: str | None, vendor: str | None) -> str:
    layer = (link_layer or "").strip().lower()
    if vendor == "0x1d0f":
        return "efa"
    if layer == "infiniband":
        return "infiniband"
    if layer == "ethernet":
        return "roce"
    return "ethernet" if layer else "infiniband"


def _rate_gbps(text: str | None) -> float | None:
    # "400 Gb/sec (4X NDR)\n"
    if not text:
        return None
    head = text.strip().split(" ", 1)[0]
    try:
        return float(head)
    except ValueError:
        return None


def list_rdma_nics(host: Host, problems: list[Problem] | None = None) -> list[RdmaNic]:
    """Every RDMA device under ``/sys/class/infiniband``, sorted by name."""
    out: list[RdmaNic] = []
    for name in host.listdir(IB_CLASS):
        base = f"{IB_CLASS}/{name}"
        function: PciFunction | None = None
        if not host.exists(base):
            if problems is not None:
                problems.append(Problem(code=FILE_UNREADABLE, message=f"{base}: broken symbolic link, NIC skipped"))
            continue
        try:
            dev_path = host.realpath(f"{base}/device")
            address = next((p for p in reversed(dev_path.split("/")) if BDF_RE.match(p)), None)
            if address is not None:
                function = read_function(host, address, problems)
        except HostReadError as exc:
            if problems is not None:
                problems.append(Problem.of(exc, f"{base}/device: {exc.reason}"))
        try:
            link_layer = host.read_optional(f"{base}/ports/1/link_layer")
            rate = _rate_gbps(host.read_optional(f"{base}/ports/1/rate"))
        except HostReadError as exc:
            if problems is not None:
                problems.append(Problem.of(exc))
            link_layer, rate = None, None
        try:
            netdevs = host.listdir(f"{base}/device/net") if function is not None else []
        except HostReadError as exc:
            if problems is not None:
                problems.append(Problem.of(exc))
            netdevs = []
        nic = Nic(
            name=name,
            kind=_kind(link_layer, function.vendor if function else None),
            pci_address=function.address if function else None,
            numa_node=function.numa_node if function else None,
            netdev=netdevs[0] if netdevs else None,
            rate_gbps=rate,
        )
        out.append(RdmaNic(nic, function))
    return out


def path_class(a: PciFunction, b: PciFunction, coherent: bool = False) -> str:
    """The ``nvidia-smi topo -m`` class between two PCI functions (``coherent``: on a Grace host,
    see the module doc)."""
    if a.root_complex != b.root_complex or not a.root_complex:
        if not coherent and a.numa_node is not None and a.numa_node == b.numa_node:
            return "NODE"
        return "SYS"
    chain_a, chain_b = bridge_chain(a.path), bridge_chain(b.path)
    common = 0
    for x, y in zip(chain_a, chain_b):
        if x != y:
            break
        common += 1
    if common <= 1:  # only the host bridge or the root port is shared
        return "PHB"
    if len(chain_a) - common == 2 and len(chain_b) - common == 2:
        return "PIX"
    return "PXB"


def pcie_switch_of(function: PciFunction) -> str | None:
    """Address of the topmost switch port above ``function`` (below its root port), if any."""
    bridges = function.bridges
    return bridges[1] if len(bridges) >= 2 else None


def nearest_nics(device: PciFunction, nics: Sequence[RdmaNic], coherent: bool = False) -> tuple[NicPath, ...]:
    """The NICs at the smallest path class from ``device``, by name; empty without NICs."""
    scored = [(PATH_CLASSES.index(path_class(device, n.function, coherent)), n.nic.name) for n in nics if n.function]
    if not scored:
        return ()
    best = min(score for score, _ in scored)
    return tuple(NicPath(nic=name, path=PATH_CLASSES[best]) for score, name in sorted(scored) if score == best)


def nics_of(items: Iterable[RdmaNic]) -> tuple[Nic, ...]:
    return tuple(item.nic for item in items)
