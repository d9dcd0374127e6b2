"""NVIDIA GPUs: devices and PCIe topology from sysfs, NVLink and fabric from NVML.

Devices are the PCI functions of vendor ``0x10de`` whose class starts with ``0x03`` (display /
3D controller, as NCCL's ``topo.cc`` classifies GPUs); NVSwitch bridges (``0x068000``) and HDMI
audio functions (``0x0403xx``) are not GPUs. They are indexed in PCI address order, which is
NVML's and ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` order and therefore the id Ray puts in
``CUDA_VISIBLE_DEVICES``.

NVML (through :mod:`._nvml`, recorded on snapshots) adds GPU UUIDs, memory, NVLink peers and the
multi-node NVLink fabric (cluster UUID + clique id). Without NVML (no driver, or a container
without ``libnvidia-ml``) the description holds everything sysfs gives: count, SKU, NUMA, CPUs,
PCIe switches and NICs, with ``interconnect`` ``pcie`` and the host as its own fabric domain.
That is a complete answer for what it claims, so it is *not* degraded; the attribute
``nvidia.rayaccel.io/nvml=absent`` says why links are missing. A recording that exists but
cannot be read, or an NVML that fails, *is* a problem. With NVML, only the GPUs it lists are
counted (see :func:`_usable`: containers see every GPU in sysfs but can use only theirs).

The SKU comes from the SKU database (:mod:`ray_accel_ext.skus`, by device and subsystem id); a GPU
the database lacks is still counted, named from its NVML name (``geforce-rtx-5090``), else the
host's ``pci.ids``, else ``nvidia-unknown-<id>``, and reported as a problem. Memory is the
database's figure, else NVML's total rounded up to whole GiB (``skus.memory_gib_from_bytes``).

``ray_accelerator_type`` is the type Ray 2.60's own NVIDIA manager derives from the NVML name of
device 0, so a node looks the same to ``accelerator_type:<T>`` users with or without this package;
without NVML Ray reads no name and publishes no type, and neither do we. For the RTX PRO 6000
Blackwell Server Edition that is ``RTX-PRO-6000`` (Ray 2.60 keeps leading all-caps words); older
Ray versions, and reference/hardware.md section 1.2, give ``RTX``, which would also match every
other RTX card. The GPU's memory, NVLink, CPUs and NICs never depend on Ray's name.

Provider placement (zone, cluster, block, rack) is asked from the GCE or EC2 metadata server only
when DMI names that cloud (:mod:`ray_accel_ext.hw.cloud`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from ...backend import AcceleratorBackend, Capabilities, PciId
from ...errors import HostReadError
from ...host import Host
from ...hw.cloud import host_fabric, location
from ...hw.nics import list_rdma_nics, nearest_nics, nics_of, pcie_switch_of
from ...hw.pci import (
    PCI_DEVICES,
    PciFunction,
    parse_hex_id,
    read_function,
)
from ...hw.pci_index import functions_of
from ...model import Device, Fabric, Link, Location, NodeDescription, Partition, Problem, Sku
from ...problems import LINK_DOWN
from ...skus import Entry, ray_names
from .._reading import any_readable, library_reading, never_raises
from .._sku import identify_function, node_identity, pci_description, to_sku
from . import mig as _mig
from . import nvml as _nvml

__all__ = ["NvidiaGPUBackend", "NVIDIA_VENDOR_ID"]

NVIDIA_VENDOR_ID = "0x10de"
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"
_NO_GPU = Sku(vendor="nvidia", name="nvidia-none", generation="unknown", known=False)

# nvmlNvlinkVersion_t (nvml.h; pynvml NVML_NVLINK_VERSION_*): used only for GPUs the SKU database
# does not know, since the database's generation does not depend on how a driver numbers versions.
_NVML_NVLINK_VERSIONS = {1: "nvlink1", 2: "nvlink2", 3: "nvlink2", 4: "nvlink3", 5: "nvlink3", 6: "nvlink4", 7: "nvlink5", 8: "nvlink6"}


class NvidiaGPUBackend(AcceleratorBackend):
    """NVIDIA data-center and workstation GPUs (CUDA devices), scheduled as Ray ``GPU``."""

    name = "nvidia_gpu"
    resource_name = "GPU"
    label_prefix = "nvidia.rayaccel.io"
    visible_devices_env_var = "CUDA_VISIBLE_DEVICES"
    family = "NVIDIA GPU"
    # Display / 3D controllers of NVIDIA (NCCL topo.cc's GPU rule); NVSwitch bridges are 0x0680.
    pci_ids = (PciId(NVIDIA_VENDOR_ID, classes=("0x03",)),)
    driver_paths = ("/proc/driver/nvidia/version",)
    driver_hint = (
        "NVIDIA GPUs are on the PCI bus but the NVIDIA kernel driver is not loaded "
        "(/proc/driver/nvidia/version is missing): install the driver (cuda-drivers / nvidia-driver "
        "package, or the GPU operator on Kubernetes) and `modprobe nvidia`"
    )
    capabilities = Capabilities(topology_links=True, nic_affinity=True, numa_affinity=True, fabric_domains=True,
                                provider_location=True, device_visibility=True, uses_network=True)

    def detect(self, host: Host) -> bool:
        """True when sysfs shows at least one readable NVIDIA display/3D function."""
        return never_raises(lambda: any_readable(functions_of(host, (NVIDIA_VENDOR_ID,)), lambda a: _gpu_ids(host, a) is not None))

    def watch_faults(self, host, devices, on_event, stop) -> bool:
        """Live faults through NVML events and counters (:mod:`.events`), on the real machine only
        (NVML does not read under a root); the recorded stream is the default reader's."""
        from .events import watch

        return str(host().root) == "/" and watch(on_event, stop)

    def describe(self, host: Host) -> NodeDescription:
        """GPUs with SKU, NUMA/CPU/switch/NIC affinity, NVLink links and the NVLink fabric."""
        problems: list[Problem | str] = []
        gpus = _gpu_functions(host, problems)
        reading = _nvml_reading(host, problems)
        nvml_by_addr = _nvml_devices(reading, gpus, problems)
        gpus, hidden = _usable(gpus, reading, nvml_by_addr, host.env, problems)

        idents = [
            identify_function(host, f, driver_name=nvml_by_addr.get(f.address, {}).get("name"),
                              memory_bytes=nvml_by_addr.get(f.address, {}).get("memory_total"))
            for f in gpus
        ]
        ident = node_identity(idents, [f.address for f in gpus], problems, noun="GPU")
        entry = ident.entry if ident is not None else None
        sku = to_sku(ident, _ray_type(reading)) if ident is not None else _NO_GPU

        rdma = list_rdma_nics(host, problems)
        # Grace-attached GPUs (NVLink-C2C to their CPU): nvidia-smi's classes differ (hw.nics).
        coherent = any((nv.get("c2c_links") or 0) > 0 for nv in nvml_by_addr.values())
        partitions = _partitions(gpus, nvml_by_addr, rdma)
        whole = [(fn, ident) for fn, ident in zip(gpus, idents) if not _mig.enabled(nvml_by_addr.get(fn.address, {}))]
        devices = []
        for index, (fn, fn_ident) in enumerate(whole):
            nv = nvml_by_addr.get(fn.address, {})
            memory = nv.get("memory_total") or to_sku(fn_ident, None).memory_bytes
            devices.append(
                Device(
                    index=index,
                    id=nv.get("uuid") or fn.address,
                    pci_address=fn.address,
                    numa_node=fn.numa_node,
                    cpus=fn.cpus,
                    pcie_switch=pcie_switch_of(fn),
                    memory_bytes=memory,
                    nics=nearest_nics(fn, rdma, coherent),
                    memory_numa_node=nv.get("numa_node_id"),
                )
            )

        kind = _nvlink_kind(entry, reading)
        # MIG instances have no NVLink peer-to-peer (MIG user guide): links join whole GPUs only.
        whole_nvml = {a: d for a, d in nvml_by_addr.items() if not _mig.enabled(d)}
        problems.extend(_links_down(devices, whole_nvml, entry))
        links = _links([fn for fn, _ in whole], whole_nvml, kind, problems) if kind else ()
        platform = _platform(gpus, nvml_by_addr, problems)
        fabric = _fabric(host, gpus, nvml_by_addr, entry, problems, platform)
        location = _location_with_rack(host, problems, platform)

        attributes = {f"{self.label_prefix}/nvml": "present" if reading is not None else "absent"}
        if coherent:
            attributes[f"{self.label_prefix}/cpu-link"] = "c2c"
        if reading is not None and reading.get("binding"):
            attributes[f"{self.label_prefix}/nvml-binding"] = str(reading["binding"])
        if reading is not None and reading.get("driver_version"):
            attributes[f"{self.label_prefix}/driver-version"] = str(reading["driver_version"])
        if links:
            attributes[f"{self.label_prefix}/nvlink-lanes"] = str(min(l.lanes for l in links))
        if hidden and "NVIDIA_VISIBLE_DEVICES" in host.env:
            attributes[f"{self.label_prefix}/gpus-not-visible"] = str(hidden)
        return pci_description(
            self, sku, devices, problems,
            interconnect=links[0].kind if links else "pcie",
            partitions=partitions,
            links=links,
            nics=nics_of(rdma),
            fabric=fabric,
            location=location,
            attributes=attributes,
        )


# -- sysfs ----------------------------------------------------------------------------------------


def _gpu_ids(host: Host, address: str) -> tuple[str, str, str] | None:
    """(vendor, device, class) when ``address`` is an NVIDIA GPU, else None. Raises HostReadError."""
    base = f"{PCI_DEVICES}/{address}"
    vendor_text = host.read_optional(f"{base}/vendor")
    if vendor_text is None:
        # The directory entry exists (we listed it) but has no vendor file: a dangling link or a
        # function removed while we looked.
        raise HostReadError(base, "no vendor file (broken symbolic link or a vanished device)")
    if parse_hex_id(vendor_text, f"{base}/vendor") != NVIDIA_VENDOR_ID:
        return None
    pci_class = parse_hex_id(host.read_text(f"{base}/class"), f"{base}/class")
    if not pci_class.startswith("0x03"):
        return None
    device = parse_hex_id(host.read_text(f"{base}/device"), f"{base}/device")
    return NVIDIA_VENDOR_ID, device, pci_class


def _gpu_functions(host: Host, problems: list[Problem | str]) -> list[PciFunction]:
    gpus = []
    for address in functions_of(host, (NVIDIA_VENDOR_ID,)):
        try:
            ids = _gpu_ids(host, address)
            if ids is None:
                continue
            fn = read_function(host, address, problems, ids)
        except HostReadError as exc:
            problems.append(Problem.of(exc, f"{exc}; cannot tell whether {address} is an NVIDIA GPU, not counted"))
            continue
        cpulist = f"{PCI_DEVICES}/{address}/local_cpulist"
        if not fn.cpus and not any(getattr(p, "message", p).startswith(cpulist) for p in problems):
            # The kernel writes local_cpulist for every PCI function (all CPUs when it knows no
            # better), so an absent or empty one is a damaged sysfs, not a fact about the GPU.
            problems.append(f"{cpulist}: missing or empty; the GPU's local CPUs are unknown")
        gpus.append(fn)
    return gpus


# -- NVML -----------------------------------------------------------------------------------------


def _nvml_reading(host: Host, problems: list[Problem | str]) -> dict[str, Any] | None:
    return library_reading(host, "nvml", "NVML", _nvml.read_live, _nvml.validate, problems)


def _nvml_devices(reading: dict[str, Any] | None, gpus: list[PciFunction], problems: list[Problem | str]) -> dict[str, dict[str, Any]]:
    """NVML devices keyed by sysfs address, only those sysfs shows too."""
    if reading is None:
        return {}
    by_addr: dict[str, dict[str, Any]] = {}
    for dev in reading["devices"]:
        for err in dev.get("errors") or []:
            problems.append(f"NVML device {dev.get('index')}: {err}")
        if dev.get("bus_id") is None:
            continue
        by_addr[_nvml.sysfs_address(dev["bus_id"])] = dev
    sysfs = {f.address for f in gpus}
    for addr in sorted(set(by_addr) - sysfs):
        problems.append(f"NVML lists a GPU at {by_addr[addr]['bus_id']} that sysfs does not show; not counted")
    return {a: d for a, d in by_addr.items() if a in sysfs}


def _usable(gpus: list[PciFunction], reading: dict[str, Any] | None, nvml: dict[str, dict[str, Any]],
            env: Any, problems: list[Problem | str]) -> tuple[list[PciFunction], int]:
    """The GPUs CUDA can use here, and how many sysfs GPUs a container does not see.

    sysfs is not namespaced: a container given 2 of 8 GPUs still sees all 8 PCI functions, while
    NVML (and CUDA) enumerate only the 2 whose device nodes it has, in PCI order. So with a working
    NVML the schedulable GPUs are those NVML lists. Outside a container (no
    ``NVIDIA_VISIBLE_DEVICES``, https://github.com/NVIDIA/nvidia-container-toolkit) a GPU that NVML
    does not list is broken (fallen off the bus, Xid 79) and that is a problem.
    """
    if reading is None or reading.get("error"):
        return gpus, 0
    hidden = [f.address for f in gpus if f.address not in nvml]
    if hidden and "NVIDIA_VISIBLE_DEVICES" not in env:
        for addr in hidden:
            problems.append(f"sysfs shows a GPU at {addr} that NVML does not list (unusable by CUDA); not counted")
    return [f for f in gpus if f.address in nvml], len(hidden)


def _links_down(devices: list[Device], nvml: dict[str, dict[str, Any]], entry: Entry | None) -> list[Problem]:
    """A ``link-down`` problem for each GPU with fewer active NVLinks than its board gives it (the
    SKU database's ``nvlinks``): a collective placed there runs at PCIe speed or hangs
    (vllm-project/vllm#16336: an HGX B200 with every link of one GPU down). Only where some GPU of
    the node has active links: a VM or container given GPUs without their NVLinks (one GPU of an
    HGX board passed through, GCE a3-highgpu-1g) is a PCIe node, not a broken one."""
    want = entry.nvlinks if entry is not None else None
    if not want or not any(d.get("nvlinks") for d in nvml.values()):
        return []
    out = []
    for dev in devices:
        nv = nvml.get(dev.pci_address or "")
        if nv is None:
            continue
        active = len(nv.get("nvlinks") or [])
        if active < want:
            out.append(Problem(code=LINK_DOWN, device=dev.index, message=(
                f"GPU {dev.index} ({dev.pci_address}) has {active} of its {want} NVLinks active; collectives "
                "through it fall back to PCIe or hang")))
    return out


def _partitions(gpus: list[PciFunction], nvml: dict[str, dict[str, Any]], rdma: Any) -> tuple[Partition, ...]:
    """The MIG instances of the GPUs in MIG mode, in PCI then GPU-instance order, each at its GPU's
    place (NUMA node, CPUs, nearest NICs). A GPU in MIG mode is offered only as its instances."""
    out = []
    for fn in gpus:
        nv = nvml.get(fn.address, {})
        if not _mig.enabled(nv):
            continue
        nics = nearest_nics(fn, rdma)
        for inst in sorted(nv["mig"].get("instances") or [], key=lambda i: (i.get("gpu_instance", 0), i.get("compute_instance", 0))):
            out.append(Partition(
                id=inst["uuid"], device=nv.get("uuid") or fn.address, profile=inst["profile"],
                memory_bytes=inst.get("memory_total"), slices=inst.get("gpu_slices") or 1,
                instance=f"{inst.get('gpu_instance', 0)}.{inst.get('compute_instance', 0)}",
                pci_address=fn.address, numa_node=fn.numa_node, cpus=fn.cpus, nics=nics,
            ))
    return tuple(out)


def _ray_type(reading: dict[str, Any] | None) -> str | None:
    """The type Ray 2.60's NVIDIA manager gives the node: its name rule on NVML device 0's name
    (``nvmlDeviceGetHandleByIndex(0)``); without NVML Ray reads no name and gives none."""
    if reading is None or reading.get("error"):
        return None
    first = min(reading["devices"], key=lambda d: d.get("index", 0), default=None)
    return ray_names.nvidia_accelerator_type(first.get("name")) if first else None


def _nvlink_kind(entry: Entry | None, reading: dict[str, Any] | None) -> str | None:
    if reading is None:
        return None
    if entry is not None and entry.interconnect is not None:
        return entry.interconnect if entry.interconnect.startswith("nvlink") else None
    versions = {l.get("version") for d in reading["devices"] for l in d.get("nvlinks") or []}
    known = sorted(_NVML_NVLINK_VERSIONS[v] for v in versions if v in _NVML_NVLINK_VERSIONS)
    return known[-1] if known else ("nvlink" if versions else None)


def _links(gpus: list[PciFunction], nvml: dict[str, dict[str, Any]], kind: str, problems: list[Problem | str]) -> tuple[Link, ...]:
    """GPU pairs joined by NVLink: direct links counted per pair; NVSwitch links make all
    switch-attached GPUs of the node all-to-all with as many lanes as the fewer of the two has."""
    index = {fn.address: i for i, fn in enumerate(gpus)}
    direct: Counter[tuple[int, int]] = Counter()
    switch_lanes: dict[int, int] = {}
    for addr, dev in nvml.items():
        me = index[addr]
        for link in dev.get("nvlinks") or []:
            if link["remote_type"] == _nvml.REMOTE_SWITCH:
                switch_lanes[me] = switch_lanes.get(me, 0) + 1
            elif link["remote_type"] == _nvml.REMOTE_GPU:
                peer = index.get(_nvml.sysfs_address(link.get("remote_bus_id") or "") or "")
                if peer is None:
                    problems.append(f"NVML: GPU {addr} link {link.get('link')} goes to {link.get('remote_bus_id')}, not a GPU of this node")
                elif peer != me:
                    direct[(min(me, peer), max(me, peer))] += 1
    # A direct link is seen from both ends.
    lanes = {pair: max(1, n // 2) for pair, n in direct.items()}
    switched = sorted(switch_lanes)
    for i, a in enumerate(switched):
        for b in switched[i + 1:]:
            lanes[(a, b)] = lanes.get((a, b), 0) + min(switch_lanes[a], switch_lanes[b])
    return tuple(Link(a=a, b=b, kind=kind, lanes=n) for (a, b), n in sorted(lanes.items()))


def _platform(gpus: list[PciFunction], nvml: dict[str, dict[str, Any]], problems: list[Problem | str]) -> dict[str, Any] | None:
    """The tray's place in its rack from NVML platform info, when every GPU has it and agrees."""
    infos = [(nvml.get(f.address) or {}).get("platform") for f in gpus]
    if not infos or not all(infos):
        return None
    seen = sorted({f"{p.get('chassis_serial')}/{p.get('tray_index')}" for p in infos})
    if len(seen) > 1:
        problems.append(f"GPUs of this node disagree on their NVML platform position ({', '.join(seen)}); "
                        "no tray index published")
        return None
    return infos[0]


def _fabric(host: Host, gpus: list[PciFunction], nvml: dict[str, dict[str, Any]], entry: Entry | None,
            problems: list[Problem | str], platform: dict[str, Any] | None = None) -> Fabric:
    """The multi-node NVLink domain (``<clusterUuid>.<cliqueId>``), else the host itself.

    A GPU is in a domain when its fabric state is COMPLETED, status SUCCESS and the cluster UUID is
    not all zeros (NVIDIA go-nvlib ``IsFabricAttached``); HGX H100 reports COMPLETED with a zero
    UUID. GPUs of one node that disagree publish no domain, as GPU Feature Discovery does.

    NVML does not give the partition size: ``hosts`` is the largest domain the SKU ships in (18
    trays of 4 GPUs for NVL72). ``worker`` is the tray index among the chassis' compute trays from
    NVML platform info (``nvmlPlatformInfo_v2_t.trayIndex``) where the driver exposes it, else
    None (unknown: cluster-side ranks order the trays).
    """
    cliques = set()
    attached = 0
    for fn in gpus:
        info = (nvml.get(fn.address) or {}).get("fabric")
        if not info or info.get("state") != _nvml.FABRIC_STATE_COMPLETED or info.get("status") != _nvml.NVML_SUCCESS:
            cliques.add(None)
            continue
        cluster = str(info.get("cluster_uuid") or _ZERO_UUID).lower()
        if cluster == _ZERO_UUID:
            cliques.add(None)
            continue
        attached += 1
        cliques.add(f"{cluster}.{info.get('clique_id', 0)}")
    if attached and len(cliques) > 1:
        shown = ", ".join(sorted(c or "none" for c in cliques))
        problems.append(f"GPUs of this node disagree on their NVLink clique ({shown}); no NVLink domain published")
        return host_fabric(host, problems)
    if not attached:
        return host_fabric(host, problems)
    domain_gpus = entry.nvlink_domain_gpus if entry is not None else None
    hosts = max(1, domain_gpus // len(gpus)) if domain_gpus and gpus else 1
    worker = platform.get("tray_index") if platform else None
    if worker is not None and not 0 <= worker < hosts:
        problems.append(f"NVML platform tray index {worker} is outside the {hosts} trays of this NVLink domain")
        worker = None
    return Fabric(kind="nvlink-domain", id=cliques.pop(), hosts=hosts, worker=worker)


def _location_with_rack(host: Host, problems: list[Problem | str], platform: dict[str, Any] | None = None) -> Location:
    """Zone and placement hierarchy from the provider's metadata server, asked only when DMI
    says the host is a GCE or EC2 instance (A3/A4 on GCP, P5/P6 on AWS). Without a provider
    rack, the chassis serial of NVML platform info is the rack (v1 of the struct names it
    ``rackGuid``: the GB200 NVL72 chassis is the rack)."""
    found = location(host, problems)
    serial = (platform or {}).get("chassis_serial")
    if serial and not found.rack:
        found = dataclasses.replace(found, rack=serial)
    return found
