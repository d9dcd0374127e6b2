"""Builds the AMD Instinct host snapshots in this folder (the generated trees are committed too).

    .venv/bin/python tests/data/hosts/amd_gpu/build_snapshots.py
    .venv/bin/python -m ray_accel_ext.testing.snapshots --update tests/data/hosts/amd_gpu

Only what the AMD backend reads is written, in the kernel's formats: the KFD topology
(``/sys/class/kfd/kfd/topology/nodes/<N>/properties`` and ``io_links``, ``"<key> <decimal>\\n"``
lines of ``kfd_topology.c``; reference/hardware.md 2.6), the PCI functions with relative
``/sys/bus/pci/devices`` symlinks (hardware.md 2.1-2.2), the amdgpu driver's partition files
``current_compute_partition`` / ``current_memory_partition`` (``amdgpu_gfx.c``, ``amdgpu_gmc.c``:
``"SPX\\n"``, ``"NPS1\\n"``), ``/dev/kfd``, the RDMA NICs (hardware.md 2.4), the hostname, and an AMD
SMI reading (``libraries/amdsmi.json``, ``ray_accel_ext.backends.amd_gpu.amdsmi`` format). Each
snapshot's README says what machine it stands for and where its facts come from; README.md and
expected.json are not touched by this script.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
KFD = "sys/class/kfd/kfd/topology/nodes"

# lspci -PP chains (root port first) of an MI300X platform: each GPU and the ConnectX-7 ROCm's
# system-acceptance guide pairs it with (docs/network/topology-mapping.md).
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
MI355X_CHAINS = [f"{rc:02x}:01.1/{rc + 1:02x}:00.0" for rc in (0x00, 0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0)]
CPUS_2S = ["0-95,192-287", "96-191,288-383"]


class Tree:
    """One snapshot under construction (``rootfs/``, ``env.json``, ``libraries/``)."""

    def __init__(self, name: str) -> None:
        self.dir = HERE / name
        for sub in ("rootfs", "libraries"):
            shutil.rmtree(self.dir / sub, ignore_errors=True)
        (self.dir / "rootfs").mkdir(parents=True)
        (self.dir / "env.json").write_text("{}\n")

    def write(self, rel: str, text: str) -> None:
        path = self.dir / "rootfs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def link(self, rel: str, target_rel: str) -> None:
        path = self.dir / "rootfs" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(os.path.relpath(self.dir / "rootfs" / target_rel, path.parent))

    def props(self, rel: str, items: list[tuple[str, int]]) -> None:
        self.write(rel, "".join(f"{k} {v}\n" for k, v in items))

    def function(self, chain: str, vendor: str, device: str, cls: str, numa: int, cpus: str, subsystem: str) -> str:
        """``00:01.1/01:00.0/...`` -> ``sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/...``."""
        parts = chain.split("/")
        path = f"sys/devices/pci0000:{parts[0][:2]}/" + "/".join(f"0000:{p}" for p in parts)
        for i in range(1, len(parts)):  # bridges above the function
            self.write("/".join(path.split("/")[: 3 + i]) + "/class", "0x060400\n")
        for name, value in (("vendor", vendor), ("device", device), ("class", cls), ("subsystem_vendor", vendor),
                            ("subsystem_device", subsystem), ("numa_node", str(numa)), ("local_cpulist", cpus)):
            self.write(f"{path}/{name}", value + "\n")
        self.link(f"sys/bus/pci/devices/{path.rsplit('/', 1)[1]}", path)
        return path

    def host(self, hostname: str, cpus: list[str], *, kfd_driver: bool = True) -> None:
        self.write("proc/sys/kernel/hostname", hostname + "\n")
        self.write("sys/devices/system/node/online", f"0-{len(cpus) - 1}\n" if len(cpus) > 1 else "0\n")
        for i, c in enumerate(cpus):
            self.write(f"sys/devices/system/node/node{i}/cpulist", c + "\n")
        if kfd_driver:
            self.write("dev/kfd", "")

    def cpu_node(self, node: int, cores: int) -> None:
        self.props(f"{KFD}/{node}/properties", [
            ("cpu_cores_count", cores), ("simd_count", 0), ("mem_banks_count", 1), ("caches_count", 0),
            ("io_links_count", 0), ("p2p_links_count", 0), ("cpu_core_id_base", node * cores), ("simd_id_base", 0),
            ("max_waves_per_simd", 0), ("lds_size_in_kb", 0), ("gds_size_in_kb", 0), ("num_gws", 0),
            ("wave_front_size", 0), ("array_count", 0), ("simd_arrays_per_engine", 0), ("cu_per_simd_array", 0),
            ("simd_per_cu", 0), ("max_slots_scratch_cu", 0), ("gfx_target_version", 0), ("vendor_id", 0),
            ("device_id", 0), ("location_id", 0), ("domain", 0), ("drm_render_minor", 0), ("hive_id", 0),
            ("num_sdma_engines", 0), ("num_sdma_xgmi_engines", 0), ("num_sdma_queues_per_engine", 0),
            ("num_cp_queues", 0), ("unique_id", 0),
        ])
        self.write(f"{KFD}/{node}/gpu_id", "0\n")

    def gpu_node(self, node: int, *, bdf: str, device_id: int, simd: int, gfx: int, minor: int, hive: int,
                 unique: int, cpu_node_id: int, xgmi_to: list[int]) -> None:
        bus, dev_fn = bdf.split(":")
        dev, fn = dev_fn.split(".")
        location = (int(bus, 16) << 8) | (int(dev, 16) << 3) | int(fn)  # (bus << 8) | devfn
        self.props(f"{KFD}/{node}/properties", [
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
        self.write(f"{KFD}/{node}/gpu_id", f"{(unique >> 16) & 0xFFFF}\n")
        links = [(2, cpu_node_id)] + [(11, peer) for peer in xgmi_to]  # PCIe to its CPU, XGMI to its peers
        for i, (kind, to) in enumerate(links):
            self.props(f"{KFD}/{node}/io_links/{i}/properties", [
                ("type", kind), ("version_major", 0), ("version_minor", 0), ("node_from", node), ("node_to", to),
                ("weight", 15 if kind == 11 else 20), ("min_latency", 0), ("max_latency", 0), ("min_bandwidth", 0),
                ("max_bandwidth", 0), ("recommended_transfer_size", 0), ("flags", 1),
            ])

    def rdma_nic(self, name: str, chain: str, numa: int, cpus: str) -> None:
        path = self.function(chain, "0x15b3", "0x1021", "0x020000", numa, cpus, "0x0023")  # ConnectX-7
        bus = int(chain.rsplit("/", 1)[1][:2], 16)
        self.write(f"{path}/net/enp{bus}s0np0/operstate", "up\n")
        ib = f"{path}/infiniband/{name}"
        self.write(f"{ib}/ports/1/link_layer", "Ethernet\n")
        self.write(f"{ib}/ports/1/rate", "400 Gb/sec (4X NDR)\n")
        self.link(f"{ib}/device", path)
        self.link(f"sys/class/infiniband/{name}", ib)

    def amdsmi(self, devices: list[dict]) -> None:
        (self.dir / "libraries").mkdir(exist_ok=True)
        reading = {"format": 1, "error": None, "devices": devices}
        (self.dir / "libraries/amdsmi.json").write_text(json.dumps(reading, indent=1) + "\n")


def hive_host(name: str, hostname: str, *, device_id: int, subsystem: str, simd: int, gfx: int, hive: int,
              chains: list[str], nics: list[str], market: str, vram: int, driver: str,
              partition: tuple[str, str] | None) -> None:
    t = Tree(name)
    t.host(hostname, CPUS_2S)
    t.cpu_node(0, 96)
    t.cpu_node(1, 96)
    gpu_nodes = list(range(2, 2 + len(chains)))
    smi = []
    for i, chain in enumerate(chains):
        socket = 0 if i < len(chains) // 2 else 1
        path = t.function(chain, "0x1002", f"0x{device_id:04x}", "0x120000", socket, CPUS_2S[socket], subsystem)
        if partition:
            t.write(f"{path}/current_compute_partition", partition[0] + "\n")
            t.write(f"{path}/current_memory_partition", partition[1] + "\n")
        bdf = chain.rsplit("/", 1)[1]
        unique = 0x4B8A1C2D3E4F5000 + (device_id << 8) + i
        t.gpu_node(gpu_nodes[i], bdf=bdf, device_id=device_id, simd=simd, gfx=gfx, minor=128 + i, hive=hive,
                   unique=unique, cpu_node_id=socket, xgmi_to=[n for n in gpu_nodes if n != gpu_nodes[i]] if hive else [])
        smi.append({"bdf": f"0000:{bdf}", "kfd_node": gpu_nodes[i], "uuid": f"{i:02x}ff{device_id:04x}-0000-1000-8000-{unique & 0xFFFFFFFFFFFF:012x}",
                    "market_name": market, "device_id": hex(device_id), "memory_total": vram,
                    "compute_partition": partition[0] if partition else None,
                    "memory_partition": partition[1] if partition else None, "driver_version": driver, "errors": []})
    for i, nic_chain in enumerate(nics):
        socket = 0 if i < len(nics) // 2 else 1
        t.rdma_nic(f"mlx5_{i}", nic_chain, socket, CPUS_2S[socket])
    t.amdsmi(smi)


def main() -> None:
    # MI300X: 192 GiB HBM3; AMD SMI reports what the driver leaves after its reserve.
    hive_host("mi300x-8gpu-hive", "mi300x-node-01", device_id=0x74A1, subsystem="0x74a1", simd=1216, gfx=90402,
              hive=11712426211487235452, chains=[g for g, _ in MI300X_CHAINS], nics=[n for _, n in MI300X_CHAINS],
              market="AMD Instinct MI300X", vram=206141652992, driver="6.10.5", partition=("SPX", "NPS1"))
    # MI355X: 288 GiB HBM3E, 256 CUs (gfx950); each GPU below its own root port, no RDMA NICs.
    hive_host("mi355x-8gpu-hive", "mi355x-node-01", device_id=0x75A3, subsystem="0x75a3", simd=1024, gfx=90500,
              hive=9876543210123456789, chains=MI355X_CHAINS, nics=[],
              market="AMD Instinct MI355X", vram=309220868096, driver="6.14.14", partition=("SPX", "NPS1"))

    t = Tree("mi210-2gpu-pcie")  # two PCIe cards without an Infinity Fabric bridge, no AMD SMI reading
    t.host("mi210-ws-01", ["0-63"])
    t.cpu_node(0, 64)
    for i, chain in enumerate(["40:01.1/41:00.0", "c0:01.1/c1:00.0"]):
        t.function(chain, "0x1002", "0x740f", "0x038000", 0, "0-63", "0x0c34")
        t.gpu_node(1 + i, bdf=chain.rsplit("/", 1)[1], device_id=0x740F, simd=416, gfx=90010, minor=128 + i,
                   hive=0, unique=0x1F2E3D4C5B6A7900 + i, cpu_node_id=0, xgmi_to=[])

    t = Tree("empty-cpu-only")  # amdgpu loaded, KFD shows only the CPU
    t.host("cpu-only-amd", ["0-31"])
    t.cpu_node(0, 32)


if __name__ == "__main__":
    main()
    print(json.dumps(sorted(p.name for p in HERE.iterdir() if (p / "rootfs").is_dir())))
