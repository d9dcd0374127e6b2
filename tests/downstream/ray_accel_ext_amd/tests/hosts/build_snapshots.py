"""Build the AMD host snapshots next to this file (then review and run
``python -m ray_accel_ext.testing.snapshots --update tests/hosts`` for the goldens).

Formats follow the kernel (KFD ``properties``/``io_links``, PCI sysfs, ``/sys/class/infiniband``);
the PCIe layout of ``mi300x-8gpu-hive`` is the MI300X + ConnectX-7 platform of ROCm's
system-acceptance docs (``docs/network/topology-mapping.md``). Counts and ids are real; serials,
hive ids and CPU lists are illustrative.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

HERE = Path(__file__).parent
KFD = "sys/class/kfd/kfd/topology/nodes"

# lspci -PP chains (root port first) of the MI300X platform: GPU and the NIC ROCm pairs it with.
MI300X_CHAINS = [
    ("00:01.1/01:00.0/02:00.0/03:00.0/04:00.0/05:00.0", "00:01.1/01:00.0/02:01.0/09:00.0"),
    ("18:01.1/19:00.0/1a:04.0/29:00.0/2a:00.0/2b:00.0", "18:01.1/19:00.0/1a:03.0/23:00.0"),
    ("48:01.1/49:00.0/4a:04.0/59:00.0/5a:00.0/5b:00.0", "48:01.1/49:00.0/4a:03.0/53:00.0"),
    ("60:01.1/61:00.0/62:00.0/63:00.0/64:00.0/65:00.0", "60:01.1/61:00.0/62:01.0/69:00.0"),
    ("78:01.1/79:00.0/7a:00.0/7b:00.0/7c:00.0/7d:00.0", "78:01.1/79:00.0/7a:05.0/8f:00.0"),
    ("98:01.1/99:00.0/9a:03.0/a3:00.0/a4:00.0/a5:00.0", "98:01.1/99:00.0/9a:01.0/9c:00.0"),
    ("c8:01.1/c9:00.0/ca:03.0/d3:00.0/d4:00.0/d5:00.0", "c8:01.1/c9:00.0/ca:02.0/cd:00.0"),
    ("e0:01.1/e1:00.0/e2:02.0/e5:00.0/e6:00.0/e7:00.0", "e0:01.1/e1:00.0/e2:04.0/f1:00.0"),
]
CPUS_2S = ["0-95,192-287", "96-191,288-383"]


def write(root: Path, rel: str, text: str) -> None:
    path = root / "rootfs" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def link(root: Path, rel: str, target_rel: str) -> None:
    """A relative symlink at ``rel`` pointing at ``target_rel`` (both rootfs-relative)."""
    path = root / "rootfs" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(os.path.relpath(root / "rootfs" / target_rel, path.parent))


def pci_path(chain: str) -> str:
    """``00:01.1/01:00.0/...`` -> ``sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/...``."""
    parts = chain.split("/")
    return f"sys/devices/pci0000:{parts[0][:2]}/" + "/".join(f"0000:{p}" for p in parts)


def pci_function(root: Path, chain: str, vendor: str, device: str, cls: str, numa: int, cpus: str) -> str:
    path = pci_path(chain)
    for i in range(1, len(chain.split("/"))):  # bridges above the function
        write(root, "/".join(path.split("/")[: 3 + i]) + "/class", "0x060400\n")
    for name, value in (("vendor", vendor), ("device", device), ("class", cls), ("subsystem_vendor", vendor),
                        ("subsystem_device", device), ("numa_node", str(numa)), ("local_cpulist", cpus)):
        write(root, f"{path}/{name}", value + "\n")
    bdf = path.rsplit("/", 1)[1]
    link(root, f"sys/bus/pci/devices/{bdf}", path)
    return path


def props(root: Path, rel: str, items: list[tuple[str, int]]) -> None:
    write(root, rel, "".join(f"{k} {v}\n" for k, v in items))


def cpu_node(root: Path, node: int, cores: int) -> None:
    props(root, f"{KFD}/{node}/properties", [
        ("cpu_cores_count", cores), ("simd_count", 0), ("mem_banks_count", 1), ("caches_count", 0),
        ("io_links_count", 0), ("p2p_links_count", 0), ("cpu_core_id_base", node * cores), ("simd_id_base", 0),
        ("max_waves_per_simd", 0), ("lds_size_in_kb", 0), ("gds_size_in_kb", 0), ("num_gws", 0),
        ("wave_front_size", 0), ("array_count", 0), ("simd_arrays_per_engine", 0), ("cu_per_simd_array", 0),
        ("simd_per_cu", 0), ("max_slots_scratch_cu", 0), ("gfx_target_version", 0), ("vendor_id", 0),
        ("device_id", 0), ("location_id", 0), ("domain", 0), ("drm_render_minor", 0), ("hive_id", 0),
        ("num_sdma_engines", 0), ("num_sdma_xgmi_engines", 0), ("num_sdma_queues_per_engine", 0),
        ("num_cp_queues", 0), ("unique_id", 0),
    ])


def gpu_node(root: Path, node: int, *, bdf: str, device_id: int, simd: int, gfx: int, minor: int, hive: int,
             unique: int, cpu_node_id: int, xgmi_to: list[int]) -> None:
    bus, dev_fn = bdf.split(":")
    dev, fn = dev_fn.split(".")
    location = (int(bus, 16) << 8) | (int(dev, 16) << 3) | int(fn)
    props(root, f"{KFD}/{node}/properties", [
        ("cpu_cores_count", 0), ("simd_count", simd), ("mem_banks_count", 1), ("caches_count", 0),
        ("io_links_count", 1 + len(xgmi_to)), ("p2p_links_count", 0), ("cpu_core_id_base", 0),
        ("simd_id_base", 2147487744 + node * 8), ("max_waves_per_simd", 8), ("lds_size_in_kb", 64),
        ("gds_size_in_kb", 0), ("num_gws", 64), ("wave_front_size", 64), ("array_count", 32),
        ("simd_arrays_per_engine", 1), ("cu_per_simd_array", 10), ("simd_per_cu", 4),
        ("max_slots_scratch_cu", 32), ("gfx_target_version", gfx), ("vendor_id", 4098), ("device_id", device_id),
        ("location_id", location), ("domain", 0), ("drm_render_minor", minor), ("hive_id", hive),
        ("num_sdma_engines", 2), ("num_sdma_xgmi_engines", 14 if hive else 0), ("num_sdma_queues_per_engine", 8),
        ("num_cp_queues", 64), ("unique_id", unique),
    ])
    links = [(2, cpu_node_id)] + [(11, peer) for peer in xgmi_to]  # PCIe to its CPU, XGMI to peers
    for i, (kind, to) in enumerate(links):
        props(root, f"{KFD}/{node}/io_links/{i}/properties", [
            ("type", kind), ("version_major", 0), ("version_minor", 0), ("node_from", node), ("node_to", to),
            ("weight", 15 if kind == 11 else 20), ("min_latency", 0), ("max_latency", 0), ("min_bandwidth", 0),
            ("max_bandwidth", 0), ("recommended_transfer_size", 0), ("flags", 1),
        ])


def rdma_nic(root: Path, name: str, chain: str, numa: int, cpus: str) -> None:
    path = pci_function(root, chain, "0x15b3", "0x1021", "0x020000", numa, cpus)
    bus = int(chain.rsplit("/", 1)[1][:2], 16)
    write(root, f"{path}/net/enp{bus}s0np0/ifindex", f"{bus}\n")
    ib = f"{path}/infiniband/{name}"
    write(root, f"{ib}/ports/1/link_layer", "Ethernet\n")
    write(root, f"{ib}/ports/1/rate", "400 Gb/sec (4X NDR)\n")
    link(root, f"{ib}/device", path)
    link(root, f"sys/class/infiniband/{name}", ib)


def numa(root: Path, cpus: list[str]) -> None:
    write(root, "sys/devices/system/node/online", f"0-{len(cpus) - 1}\n" if len(cpus) > 1 else "0\n")
    for i, c in enumerate(cpus):
        write(root, f"sys/devices/system/node/node{i}/cpulist", c + "\n")


def finish(root: Path, readme: str) -> None:
    (root / "env.json").write_text("{}\n")
    (root / "README.md").write_text(readme)


def hive_host(name: str, *, device_id: int, simd: int, gfx: int, hive: int, chains: list[str], nics: bool,
              readme: str) -> None:
    root = HERE / name
    shutil.rmtree(root, ignore_errors=True)
    numa(root, CPUS_2S)
    cpu_node(root, 0, 96)
    cpu_node(root, 1, 96)
    gpu_nodes = list(range(2, 2 + len(chains)))
    for i, chain in enumerate(chains):
        socket = 0 if i < len(chains) // 2 else 1
        pci_function(root, chain, "0x1002", f"0x{device_id:04x}", "0x120000", socket, CPUS_2S[socket])
        gpu_node(root, gpu_nodes[i], bdf=chain.rsplit("/", 1)[1], device_id=device_id, simd=simd, gfx=gfx,
                 minor=128 + i, hive=hive, unique=0x4B8A1C2D3E4F5000 + (device_id << 8) + i, cpu_node_id=socket,
                 xgmi_to=[n for n in gpu_nodes if n != gpu_nodes[i]] if hive else [])
    if nics:
        for i, (_, nic_chain) in enumerate(MI300X_CHAINS):
            socket = 0 if i < 4 else 1
            rdma_nic(root, f"mlx5_{i}", nic_chain, socket, CPUS_2S[socket])
    finish(root, readme)


def main() -> None:
    hive_host(
        "mi300x-8gpu-hive", device_id=0x74A1, simd=1216, gfx=90402, hive=11712426211487235452,
        chains=[g for g, _ in MI300X_CHAINS], nics=True,
        readme=(
            "# mi300x-8gpu-hive\n\n8x AMD Instinct MI300X (PCI 1002:74a1, gfx942, 304 CUs) in one XGMI hive "
            "(fully connected), 2 sockets, 8 ConnectX-7 (15b3:1021) RoCE NICs, one per GPU behind the same "
            "PCIe switch (PXB).\n\nPCIe layout and GPU/NIC pairing: ROCm system-acceptance-docs "
            "`docs/network/topology-mapping.md` (lspci -PP of an MI300X platform). KFD file formats: "
            "`kfd_topology.c`; `hive_id`, unique ids and CPU lists are illustrative. Built by "
            "`build_snapshots.py`.\n"
        ),
    )
    mi355_chains = [f"{rc:02x}:01.1/{rc + 1:02x}:00.0" for rc in (0x00, 0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0)]
    hive_host(
        "mi355x-8gpu-hive", device_id=0x75A3, simd=1024, gfx=90500, hive=9876543210123456789,
        chains=mi355_chains, nics=False,
        readme=(
            "# mi355x-8gpu-hive\n\n8x AMD Instinct MI355X (PCI 1002:75a3, gfx950, 256 CUs) in one XGMI hive, "
            "2 sockets, each GPU directly below its own root port, no RDMA NICs (front-end network only).\n\n"
            "Device id: pci.ids / ROCm docs (`lspci -d 1002:75a3`). PCIe layout, hive id and CPU lists are "
            "illustrative. Built by `build_snapshots.py`.\n"
        ),
    )
    root = HERE / "mi210-2gpu-pcie"
    shutil.rmtree(root, ignore_errors=True)
    numa(root, ["0-63"])
    cpu_node(root, 0, 64)
    for i, chain in enumerate(["40:01.1/41:00.0", "c0:01.1/c1:00.0"]):
        pci_function(root, chain, "0x1002", "0x740f", "0x038000", 0, "0-63")
        gpu_node(root, 1 + i, bdf=chain.rsplit("/", 1)[1], device_id=0x740F, simd=416, gfx=90010, minor=128 + i,
                 hive=0, unique=0x1F2E3D4C5B6A7900 + i, cpu_node_id=0, xgmi_to=[])
    finish(root, (
        "# mi210-2gpu-pcie\n\n2x AMD Instinct MI210 (PCI 1002:740f, gfx90a, 104 CUs) as PCIe cards without an "
        "Infinity Fabric bridge: no XGMI links, `hive_id 0`, one socket.\n\nIds: pci.ids and Ray's "
        "`amd_gpu.py`; layout illustrative. Built by `build_snapshots.py`.\n"
    ))
    root = HERE / "empty-cpu-only"
    shutil.rmtree(root, ignore_errors=True)
    numa(root, ["0-31"])
    cpu_node(root, 0, 32)
    finish(root, (
        "# empty-cpu-only\n\nA CPU-only host with the amdgpu/KFD driver loaded: the KFD topology has one CPU "
        "node (`simd_count 0`) and no GPU node, so `amd_gpu` must not detect anything. Built by "
        "`build_snapshots.py`.\n"
    ))


if __name__ == "__main__":
    main()
    print(json.dumps(sorted(p.name for p in HERE.iterdir() if (p / "rootfs").is_dir())))
