"""``AMDGPUBackend``: AMD Instinct GPUs from the KFD topology, PCI sysfs and RDMA NICs.

Visibility: ``visible_devices_env`` sets ``ROCR_VISIBLE_DEVICES`` to the devices' indices (the
ROCr runtime then exposes only them, to HIP and to everything else) and ``HIP_VISIBLE_DEVICES`` to
``0..k-1``, because HIP indices count within what ROCr exposes. Setting both also keeps Ray happy:
Ray's AMD manager refuses a worker whose environment has ``ROCR_VISIBLE_DEVICES`` without
``HIP_VISIBLE_DEVICES``, and for Ray's own ``GPU`` scheduling it writes ``HIP_VISIBLE_DEVICES``
itself (with node-wide indices, which is right only while ``ROCR_VISIBLE_DEVICES`` is unset).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ray_accel_ext.backend import AcceleratorBackend, Capabilities
from ray_accel_ext.errors import HostReadError
from ray_accel_ext.host import Host
from ray_accel_ext.hw.nics import list_rdma_nics, nearest_nics, pcie_switch_of
from ray_accel_ext.hw.pci import read_function
from ray_accel_ext.model import Device, Fabric, Link, NodeDescription

from . import kfd
from .skus import sku_for

ROCR = "ROCR_VISIBLE_DEVICES"
HIP = "HIP_VISIBLE_DEVICES"


class AMDGPUBackend(AcceleratorBackend):
    """AMD Instinct GPUs (MI100 .. MI355X); a GPU partition (CPX mode) counts as one device."""

    name = "amd_gpu"
    resource_name = "GPU"
    label_prefix = "amd.com"
    visible_devices_env_var = ROCR
    # Ray 2.60's AMD manager caps the node by HIP_VISIBLE_DEVICES; ROCr restricts the process too.
    node_start_env_vars = (HIP, ROCR)
    capabilities = Capabilities(
        topology_links=True, nic_affinity=True, numa_affinity=True, fabric_domains=True, device_visibility=True
    )

    def detect(self, host: Host) -> bool:
        try:
            return any(kfd.is_amd_gpu(kfd.read_node(host, n)) for n in kfd.node_ids(host))
        except (HostReadError, ValueError):
            return False

    def describe(self, host: Host) -> NodeDescription:
        problems: list[str] = []
        gpus: list[kfd.GpuNode] = []
        for node in kfd.node_ids(host):
            try:
                props = kfd.read_node(host, node)
            except HostReadError as exc:
                problems.append(str(exc))
                continue
            if kfd.is_amd_gpu(props):
                gpus.append(kfd.GpuNode(node, props))
        # ROCr numbers GPU agents in KFD node order, and HIP/ROCR_VISIBLE_DEVICES indices follow it
        # (https://github.com/ROCm/ROCR-Runtime/blob/master/src/core/runtime/amd_topology.cpp).
        index_of = {g.node: i for i, g in enumerate(gpus)}
        rdma = list_rdma_nics(host, problems)
        devices, links = [], set()
        for i, gpu in enumerate(gpus):
            unique = gpu.props.get("unique_id")
            dev = Device(index=i, id=f"GPU-{unique:016x}" if unique else f"{gpu.pci_address}/kfd{gpu.node}",
                         pci_address=gpu.pci_address)
            try:
                fn = read_function(host, gpu.pci_address, problems)
                dev = Device(index=i, id=dev.id, pci_address=fn.address, numa_node=fn.numa_node, cpus=fn.cpus,
                             pcie_switch=pcie_switch_of(fn), nics=nearest_nics(fn, rdma))
            except HostReadError as exc:
                problems.append(str(exc))
            devices.append(dev)
            try:
                links.update(tuple(sorted((i, index_of[p]))) for p in kfd.xgmi_peers(host, gpu.node) if p in index_of)
            except HostReadError as exc:
                problems.append(str(exc))
        hives = sorted({g.props.get("hive_id", 0) for g in gpus})
        fabric = None
        if len(hives) == 1 and hives[0]:
            fabric = Fabric(kind="xgmi-hive", id=str(hives[0]))
        elif len(hives) > 1:
            problems.append(f"GPUs belong to {len(hives)} XGMI hive ids {hives}; no single fabric domain")
        first = gpus[0] if gpus else None
        attributes = {}
        if first is not None:
            if first.gfx_target:
                attributes[f"{self.label_prefix}/gpu.gfx-target"] = first.gfx_target
            simd_per_cu = first.props.get("simd_per_cu") or 0
            if simd_per_cu:
                attributes[f"{self.label_prefix}/gpu.compute-units"] = str(first.props["simd_count"] // simd_per_cu)
        if len({g.device_id for g in gpus}) > 1:
            problems.append(f"mixed device ids {sorted({g.device_id for g in gpus})}; SKU taken from GPU 0")
        return NodeDescription(
            backend=self.name,
            sku=sku_for(first.device_id if first else "0x0000"),
            resource_name=self.resource_name,
            resource_quantity=len(devices),
            devices=tuple(devices),
            interconnect="xgmi" if links or fabric else "pcie",
            links=tuple(Link(a=a, b=b, kind="xgmi") for a, b in sorted(links)),
            nics=tuple(n.nic for n in rdma),
            fabric=fabric,
            attributes=attributes,
            problems=tuple(problems),
        )

    def visible_devices_env(self, devices: Sequence[Device]) -> Mapping[str, str]:
        """``ROCR_VISIBLE_DEVICES`` = the devices' indices, ``HIP_VISIBLE_DEVICES`` = 0..k-1."""
        return {ROCR: ",".join(str(d.index) for d in devices), HIP: ",".join(str(i) for i in range(len(devices)))}

    def parse_visible_devices(self, env: Mapping[str, str]) -> list[int] | None:
        """Node-wide indices visible under ``env``: HIP indices select within ROCr's list.

        Only index lists are understood; a ``GPU-<uuid>`` entry raises ValueError.
        """
        rocr, hip = _indices(env.get(ROCR)), _indices(env.get(HIP))
        if rocr is None or hip is None:
            return rocr if hip is None else hip
        return [rocr[i] for i in hip if 0 <= i < len(rocr)]


def _indices(text: str | None) -> list[int] | None:
    if text is None:
        return None
    return [int(x) for x in text.split(",") if x.strip()]
