"""AMD Instinct GPUs: devices from the KFD topology, PCIe affinity from sysfs, XGMI links and hive,
partition modes from the amdgpu driver, and an optional AMD SMI reading.

Devices are the KFD nodes with ``simd_count > 0`` of vendor ``0x1002``
(``/sys/class/kfd/kfd/topology/nodes/<N>/properties``, :mod:`.kfd`), in KFD node order: the order
ROCr enumerates agents in, so HIP's device ids and the ``HIP_VISIBLE_DEVICES`` indices Ray 2.60's
AMD manager writes (``ray/_private/accelerators/amd_gpu.py``) follow it
(https://github.com/ROCm/ROCR-Runtime/blob/master/src/core/runtime/amd_topology.cpp). A GPU in a
compute partition mode (``CPX`` on an MI300X: 8 per GPU) shows one KFD node per partition, and
each counts, as HIP and Ray count them. The PCI function (``location_id``/``domain``) gives NUMA
node, CPUs, PCIe switch, subsystem ids and the nearest RDMA NICs; RCCL reads the NCCL variables
``worker.nccl_env`` derives from them (``NCCL_IB_HCA``,
https://rocm.docs.amd.com/projects/rccl/en/latest/api-reference/env-variables.html).

XGMI: ``io_links`` of type 11 between GPU nodes; the hive (``hive_id``, the same on every GPU of
one XGMI hive, ``reference/hardware.md`` 2.6) is the fabric domain, else the host itself.
Partition modes: the amdgpu driver's ``current_compute_partition`` (``SPX``, ``DPX``, ``QPX``,
``CPX``) and ``current_memory_partition`` (``NPS1``, ``NPS2``, ``NPS4``) in the PCI device's sysfs
directory (``amdgpu_gfx.c``, ``amdgpu_gmc.c``; absent before CDNA 3).

SKU: the SKU database by device and subsystem id (:mod:`ray_accel_ext.skus`). Ray's type is its
``amd_product_dict`` entry for GPU 0's device id, which Ray reads through ROCm SMI; where no AMD
SMI reading shows that ROCm's management library works (no ``[amd]`` extra, or no ROCm), the type
is left for Ray to fill in itself, as it does when it can. Memory per device is the database's
(per GPU), or, in a partition mode, the partition's as AMD SMI reports it.

Provider location (zone, cluster, block, rack) is asked from the GCE or EC2 metadata server only
when DMI names that cloud (:mod:`ray_accel_ext.hw.cloud`); neither sells these GPUs today, so the
capability is not declared and no snapshot shows it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ... import skus
from ...backend import AcceleratorBackend, Capabilities, PciId, poll_faults
from ...errors import HostReadError
from ...host import Host
from ...hw.cloud import host_fabric, location
from ...hw.nics import list_rdma_nics, nearest_nics, nics_of, pcie_switch_of
from ...hw.pci import PCI_DEVICES, PciFunction, read_listed_function
from ...labels import sanitize_value
from ...model import Device, Fabric, Link, NodeDescription, Problem, Sku
from ...problems import LINK_DOWN
from ...skus import ray_names
from .._reading import any_readable, library_reading, never_raises
from .._sku import identify_function, node_identity, pci_description, to_sku
from . import amdsmi as _amdsmi
from . import kfd

__all__ = ["AMDGPUBackend", "AMD_VENDOR_ID", "HIP", "ROCR"]

AMD_VENDOR_ID = "0x1002"
HIP = "HIP_VISIBLE_DEVICES"
ROCR = "ROCR_VISIBLE_DEVICES"
_PREFIX = "amd.rayaccel.io"
_NO_GPU = Sku(vendor="amd", name="amd-none", generation="unknown", known=False)
_GIB = 1 << 30


class AMDGPUBackend(AcceleratorBackend):
    """AMD Instinct GPUs (MI50 .. MI355X) as Ray ``GPU``; a compute partition counts as one device."""

    name = "amd_gpu"
    resource_name = "GPU"
    label_prefix = _PREFIX
    visible_devices_env_var = HIP
    # Ray 2.60 caps the node by HIP_VISIBLE_DEVICES; ROCR_VISIBLE_DEVICES restricts the process too.
    node_start_env_vars = (HIP, ROCR)
    family = "AMD Instinct GPU"
    # Display (0x0380), processing-accelerator (0x1200) and 3D (0x0302) functions, as Instinct parts
    # show (MI210 0x038000, MI300X 0x120000: pci.ids, ROCm system-acceptance `lspci -PP`); Radeon
    # VGA functions (0x0300) are not in this family.
    pci_ids = (PciId(AMD_VENDOR_ID, classes=("0x0380", "0x1200", "0x0302")),)
    driver_paths = ("/dev/kfd",)
    driver_hint = (
        "AMD Instinct GPUs are on the PCI bus but /dev/kfd does not exist: install and load the amdgpu "
        "driver (ROCm's amdgpu-dkms, then `modprobe amdgpu`); on Kubernetes, the AMD GPU operator"
    )
    capabilities = Capabilities(topology_links=True, nic_affinity=True, numa_affinity=True, fabric_domains=True,
                                device_visibility=True, uses_network=True)

    def detect(self, host: Host) -> bool:
        """True when the KFD topology has at least one AMD GPU node."""
        return never_raises(lambda: any_readable(kfd.node_ids(host), lambda n: kfd.is_amd_gpu(kfd.read_node(host, n))))

    def describe(self, host: Host) -> NodeDescription:
        """GPUs with SKU, NUMA/CPU/switch/NIC affinity, XGMI links and hive, partition modes."""
        problems: list[Problem | str] = []
        gpus = _gpu_nodes(host, problems)
        reading = _amdsmi_reading(host, problems)
        smi = _smi_by_node(reading, gpus)
        functions = _functions(host, gpus, problems)
        rdma = list_rdma_nics(host, problems)

        idents = [_identify(host, g, functions.get(g.pci_address), smi.get(g.node, {})) for g in gpus]
        ident = node_identity(idents, [g.pci_address for g in gpus], problems, noun="GPU")
        modes = _partition_modes(host, sorted(functions), problems)
        compute_modes = {m[0] for m in modes.values() if m[0]}
        partitioned = bool(compute_modes - {"SPX"})
        ray_type = None
        if reading is not None and not reading.get("error") and gpus:
            ray_type = ray_names.amd_accelerator_type(gpus[0].device_id)
        sku = to_sku(ident, ray_type) if ident is not None else _NO_GPU
        if partitioned:
            # The database's memory is the whole GPU's; a partition has its share, as AMD SMI reports it.
            per_device = skus.memory_gib_from_bytes(next((d.get("memory_total") for d in smi.values()), None))
            sku = Sku(**{**sku.to_dict(), "memory_bytes": per_device * _GIB if per_device else None})

        devices = []
        seen_ids: set[str] = set()
        for index, gpu in enumerate(gpus):
            fn = functions.get(gpu.pci_address)
            unique = gpu.props.get("unique_id")
            dev_id = f"GPU-{unique:016x}" if unique else f"{gpu.pci_address}/kfd{gpu.node}"
            if dev_id in seen_ids:  # partitions of one GPU may share its unique id
                dev_id = f"{dev_id}/kfd{gpu.node}"
            seen_ids.add(dev_id)
            devices.append(Device(
                index=index,
                id=dev_id,
                pci_address=gpu.pci_address,
                numa_node=fn.numa_node if fn else None,
                cpus=fn.cpus if fn else (),
                pcie_switch=pcie_switch_of(fn) if fn else None,
                memory_bytes=smi.get(gpu.node, {}).get("memory_total") or sku.memory_bytes,
                nics=nearest_nics(fn, rdma) if fn else (),
            ))

        links = _links(host, gpus, problems)
        # KFD's hive_id 0: the GPU is in no XGMI hive (its links are not in use), which is not a link
        # that went down; the count is checked only for GPUs of a hive.
        if not partitioned and all(g.props.get("hive_id") for g in gpus):
            problems.extend(_xgmi_down(devices, links, ident.entry if ident is not None else None))
        fabric = _fabric(host, gpus, problems)
        if HIP not in host.env and ROCR in host.env:
            problems.append(f"{ROCR} is set without {HIP}: Ray 2.60's AMD manager refuses that "
                            f"('Please use {HIP} instead of {ROCR}'); set {HIP}")
        return pci_description(
            self, sku, devices, problems,
            interconnect="xgmi" if links or fabric.kind == "xgmi-hive" else "pcie",
            links=links,
            nics=nics_of(rdma),
            fabric=fabric,
            location=location(host, problems),
            attributes=_attributes(gpus, modes, reading, smi),
        )

    def watch_faults(self, host, devices, on_event, stop) -> bool:
        """Live faults: the driver's RAS uncorrectable counts growing (:mod:`.ras`), polled."""
        from .ras import ras_events, uncorrectable_counts

        baseline = uncorrectable_counts(host(), [d["pci_address"] for d in devices if d.get("pci_address")])
        return poll_faults(lambda: ras_events(host(), devices, baseline), on_event, stop)

    def parse_visible_devices(self, env: Mapping[str, str]) -> list[int] | None:
        """Node-wide indices visible under ``env``: ``HIP_VISIBLE_DEVICES`` (what Ray sets) counts
        within what ``ROCR_VISIBLE_DEVICES`` exposes when both are set. Index lists only; a
        ``GPU-<uuid>`` entry raises ValueError."""
        rocr, hip = _indices(env.get(ROCR)), _indices(env.get(HIP))
        if rocr is None or hip is None:
            return rocr if hip is None else hip
        return [rocr[i] for i in hip if 0 <= i < len(rocr)]


def _indices(text: str | None) -> list[int] | None:
    if text is None:
        return None
    return [int(x) for x in text.split(",") if x.strip()]


# -- reading ------------------------------------------------------------------------------------


def _gpu_nodes(host: Host, problems: list[Problem | str]) -> list[kfd.GpuNode]:
    gpus = []
    for node in kfd.node_ids(host):
        try:
            props = kfd.read_node(host, node)
        except HostReadError as exc:
            problems.append(Problem.of(exc, f"{exc}; KFD node {node} not counted"))
            continue
        if kfd.is_amd_gpu(props):
            gpus.append(kfd.GpuNode(node, props))
    return gpus


def _amdsmi_reading(host: Host, problems: list[Problem | str]) -> dict[str, Any] | None:
    reading = library_reading(host, "amdsmi", "AMD SMI", _amdsmi.read_live, _amdsmi.validate, problems)
    if reading is None:
        return None
    for i, dev in enumerate(reading["devices"]):
        problems.extend(f"AMD SMI device {i}: {err}" for err in dev.get("errors") or [])
    return reading


def _smi_by_node(reading: dict[str, Any] | None, gpus: list[kfd.GpuNode]) -> dict[int, dict[str, Any]]:
    """AMD SMI devices by KFD node id (their ``kfd_node``, else the one GPU at their address)."""
    if reading is None:
        return {}
    out: dict[int, dict[str, Any]] = {}
    by_address: dict[str, list[int]] = {}
    for g in gpus:
        by_address.setdefault(g.pci_address, []).append(g.node)
    for dev in reading["devices"]:
        node = dev.get("kfd_node")
        if node is None and len(by_address.get(dev.get("bdf") or "", [])) == 1:
            node = by_address[dev["bdf"]][0]
        if node is not None:
            out[node] = dev
    return out


def _functions(host: Host, gpus: list[kfd.GpuNode], problems: list[Problem | str]) -> dict[str, PciFunction]:
    out: dict[str, PciFunction] = {}
    for address in dict.fromkeys(g.pci_address for g in gpus):
        fn = read_listed_function(host, address, problems, f"KFD lists a GPU at {address} that {PCI_DEVICES} does "
                                                           "not show; its NUMA node, CPUs and NICs are unknown")
        if fn is not None:
            out[address] = fn
    return out


def _identify(host: Host, gpu: kfd.GpuNode, fn: PciFunction | None, smi: dict[str, Any]) -> skus.Identity:
    if fn is not None:
        return identify_function(host, fn, driver_name=smi.get("market_name"), memory_bytes=smi.get("memory_total"))
    return skus.identify(AMD_VENDOR_ID, gpu.device_id, nvml_name=smi.get("market_name"),
                         memory_bytes=smi.get("memory_total"), root=host.root)


def _partition_modes(host: Host, addresses: Sequence[str], problems: list[Problem | str]) -> dict[str, tuple[str | None, str | None]]:
    """``(compute, memory)`` partition mode of each GPU's PCI device; None where the driver has none."""
    out = {}
    for address in addresses:
        modes = []
        for name in ("current_compute_partition", "current_memory_partition"):
            try:
                text = host.read_optional(f"{PCI_DEVICES}/{address}/{name}", max_bytes=64)
            except HostReadError as exc:
                problems.append(Problem.of(exc))
                text = None
            modes.append(text.strip().upper() or None if text is not None else None)
        out[address] = (modes[0], modes[1])
    return out


def _links(host: Host, gpus: list[kfd.GpuNode], problems: list[Problem | str]) -> tuple[Link, ...]:
    index_of = {g.node: i for i, g in enumerate(gpus)}
    pairs: set[tuple[int, int]] = set()
    for i, gpu in enumerate(gpus):
        try:
            peers = kfd.xgmi_peers(host, gpu.node)
        except HostReadError as exc:
            problems.append(Problem.of(exc))
            continue
        pairs.update((min(i, index_of[p]), max(i, index_of[p])) for p in peers if p in index_of and index_of[p] != i)
    return tuple(Link(a=a, b=b, kind="xgmi") for a, b in sorted(pairs))


def _xgmi_down(devices: list[Device], links: tuple[Link, ...], entry: Any) -> list[Problem]:
    """A ``link-down`` problem for each GPU with fewer XGMI peers than its board gives it (the SKU
    database's ``xgmi_links``; MI300X OAM: 7, a fully connected 8-GPU platform). Only on a node
    with the whole platform (links + 1 GPUs): a VM given some of the GPUs sees only their links."""
    want = getattr(entry, "xgmi_links", None)
    if not want or len(devices) != want + 1:
        return []
    peers = {d.index: 0 for d in devices}
    for link in links:
        peers[link.a] += 1
        peers[link.b] += 1
    return [Problem(code=LINK_DOWN, device=d.index, message=(
        f"GPU {d.index} ({d.pci_address}) has {peers[d.index]} of its {want} XGMI links active; collectives "
        "through it fall back to PCIe or hang")) for d in devices if peers[d.index] < want]


def _fabric(host: Host, gpus: list[kfd.GpuNode], problems: list[Problem | str]) -> Fabric:
    hives = sorted({g.props.get("hive_id", 0) for g in gpus})
    if len(hives) == 1 and hives[0]:
        return Fabric(kind="xgmi-hive", id=str(hives[0]))
    if len(hives) > 1:
        problems.append(f"GPUs belong to {len(hives)} XGMI hive ids {hives}; no single XGMI hive published")
    return host_fabric(host, problems)


def _attributes(gpus: list[kfd.GpuNode], modes: Mapping[str, tuple[str | None, str | None]],
                reading: dict[str, Any] | None, smi: Mapping[int, dict[str, Any]]) -> dict[str, str]:
    out = {f"{_PREFIX}/amdsmi": "present" if reading is not None else "absent"}
    if gpus:
        first = gpus[0]
        if first.gfx_target:
            out[f"{_PREFIX}/gfx-target"] = first.gfx_target
        simd_per_cu = first.props.get("simd_per_cu") or 0
        if simd_per_cu:
            out[f"{_PREFIX}/compute-units"] = str(first.props.get("simd_count", 0) // simd_per_cu)
    for i, key in enumerate(("compute-partition", "memory-partition")):
        values = {m[i] for m in modes.values()}
        if len(values) == 1 and None not in values:
            out[f"{_PREFIX}/{key}"] = values.pop()
    versions = {d.get("driver_version") for d in smi.values()} - {None}
    if len(versions) == 1:
        out[f"{_PREFIX}/driver-version"] = versions.pop()
    # Driver text becomes a label value: sanitised, and left out when nothing valid remains.
    return {k: clean for k, v in out.items() if (clean := sanitize_value(v))}
