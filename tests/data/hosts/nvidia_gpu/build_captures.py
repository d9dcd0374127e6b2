"""Builds the NVIDIA snapshots that reproduce public ``nvidia-smi topo -m`` captures.

    .venv/bin/python tests/data/hosts/nvidia_gpu/build_captures.py
    .venv/bin/python -m ray_accel_ext.testing.snapshots --update tests/data/hosts/nvidia_gpu/<name>

Each snapshot's README cites the capture it reproduces; ``tests/backends/nvidia_gpu/test_captures.py``
writes the capture's cells out and compares discovery's answer to them. Uses the tree writer of
``build_snapshots.py``; README.md and expected.json are not touched.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("nvidia_build_snapshots", Path(__file__).with_name("build_snapshots.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)
Tree, nvml_device = _base.Tree, _base.nvml_device
NVIDIA, MELLANOX, BRIDGE = _base.NVIDIA, _base.MELLANOX, _base.BRIDGE

# -- GB200 NVL72 compute tray as sgl-project/sglang#11208 captured it ----------------------------

GB200_SOCKET_CPUS = {0: "0-71", 1: "72-143"}
# GPU NUMA ID column of the capture: each GPU's memory is its own CPU-less NUMA node, and the
# driver keeps seven more per GPU for MIG partitions (2-9, 10-17, 18-25, 26-33): 34 nodes in all.
GB200_GPU_NUMA = (2, 10, 18, 26)
# (PCI domain, Grace socket, RDMA device, link layer): four ConnectX-7 (two per Grace) and one
# BlueField-3 port per Grace; each NIC alone under its own root port, as the GPUs are.
GB200_NICS = ((0x0000, 0, "mlx5_0", "InfiniBand"), (0x0002, 0, "mlx5_1", "InfiniBand"),
              (0x0010, 1, "mlx5_2", "InfiniBand"), (0x0012, 1, "mlx5_3", "InfiniBand"),
              (0x0006, 0, "mlx5_4", "Ethernet"), (0x0016, 1, "mlx5_5", "Ethernet"))


def _numa_nodes(t: Tree, count: int, cpus: dict[int, str]) -> None:
    t.write("/sys/devices/system/node/online", f"0-{count - 1}\n")
    for node in range(count):
        t.write(f"/sys/devices/system/node/node{node}/cpulist", cpus.get(node, "") + "\n")


def build_gb200_tray_sglang() -> None:
    t = Tree("gb200-nvl72-tray-nics")
    t.hostname("gb200-tray-11208")
    t.env()
    _numa_nodes(t, 34, GB200_SOCKET_CPUS)
    gpus = []
    for domain, socket in ((0x0008, 0), (0x0009, 0), (0x0018, 1), (0x0019, 1)):
        rc, root, gpu = f"pci{domain:04x}:00", f"{domain:04x}:00:00.0", f"{domain:04x}:01:00.0"
        t.function(rc, [root], NVIDIA, "0x22b1", BRIDGE, numa=socket)
        t.function(rc, [root, gpu], NVIDIA, "0x2941", "0x030200", numa=socket, cpus=GB200_SOCKET_CPUS[socket],
                   subsys=(NVIDIA, "0x2046"))
        gpus.append(gpu)
    for domain, socket, name, layer in GB200_NICS:
        rc, root, bdf = f"pci{domain:04x}:00", f"{domain:04x}:00:00.0", f"{domain:04x}:01:00.0"
        device = "0x1021" if layer == "InfiniBand" else "0xa2dc"  # ConnectX-7, BlueField-3 (pci.ids)
        t.function(rc, [root], NVIDIA, "0x22b1", BRIDGE, numa=socket)
        path = t.function(rc, [root, bdf], MELLANOX, device, "0x020700" if layer == "InfiniBand" else "0x020000",
                          numa=socket, cpus=GB200_SOCKET_CPUS[socket], subsys=(MELLANOX, "0x0023"))
        rate = "400 Gb/sec (4X NDR)" if layer == "InfiniBand" else "200 Gb/sec (4X HDR)"
        t.ib(path, name, f"ibP{domain}p1s0" if layer == "InfiniBand" else f"enP{domain}s1f0np0", layer=layer, rate=rate)
    fabric = {"state": 3, "status": 0, "cluster_uuid": "6a1f0c3e-2b7d-4e59-9c1a-5d8e7f203b41", "clique_id": 32766}
    devices = []
    for i, bdf in enumerate(sorted(gpus)):
        links = [{"link": l, "version": 7, "remote_bus_id": None, "remote_type": 2} for l in range(18)]
        device = nvml_device(i, bdf, "NVIDIA GB200", 189471, links, fabric)
        device.update(numa_node_id=GB200_GPU_NUMA[i], c2c_links=2)
        devices.append(device)
    t.nvml({"format": 1, "driver_version": "570.172.08", "error": None, "devices": devices})


# -- 8x B200 HGX with GPU2's NVLinks down, as vllm-project/vllm#16336 captured it ---------------------

B200_SOCKET_CPUS = {0: "0-55,112-167", 1: "56-111,168-223"}
INTEL = _base.INTEL
BROADCOM = _base.BROADCOM


def build_b200_nvlink_down() -> None:
    t = Tree("b200-8gpu-nvlink-down")
    t.hostname("b200-16336")
    t.env()
    gpus = []
    # GPU k and NIC k share a PCIe switch, the GPU one leaf switch further down (PXB); every GPU
    # on its own root complex (GPU-GPU over PCIe: NODE on one socket, SYS across).
    for k in range(8):
        socket = k // 4
        bus = 0x10 + 0x20 * k
        rc, b = f"pci0000:{bus:02x}", (lambda off, bus=bus: f"0000:{bus + off:02x}")
        root, usp, dsp0, dsp1 = f"{b(0)}:01.0", f"{b(1)}:00.0", f"{b(2)}:00.0", f"{b(2)}:01.0"
        leaf_usp, leaf_dsp, gpu, nic = f"{b(3)}:00.0", f"{b(4)}:00.0", f"{b(5)}:00.0", f"{b(6)}:00.0"
        t.function(rc, [root], INTEL, "0x352a", BRIDGE, numa=socket)
        for chain in ([root, usp], [root, usp, dsp0], [root, usp, dsp1], [root, usp, dsp0, leaf_usp],
                      [root, usp, dsp0, leaf_usp, leaf_dsp]):
            t.function(rc, chain, BROADCOM, "0xc030", BRIDGE)
        t.function(rc, [root, usp, dsp0, leaf_usp, leaf_dsp, gpu], NVIDIA, "0x2901", "0x030200", numa=socket,
                   cpus=B200_SOCKET_CPUS[socket], subsys=(NVIDIA, "0x1999"))
        path = t.function(rc, [root, usp, dsp1, nic], MELLANOX, "0x1021", "0x020700", numa=socket,
                          cpus=B200_SOCKET_CPUS[socket], subsys=(MELLANOX, "0x0023"))
        t.ib(path, f"mlx5_{k}", f"ibp{bus + 6}s0")
        gpus.append(gpu)
    # NIC8-NIC11: two more per socket, each on its own root complex (NODE to that socket's GPUs).
    for n, (bus, socket) in enumerate(((0x08, 0), (0x09, 0), (0x88, 1), (0x89, 1)), start=8):
        rc, root, nic = f"pci0000:{bus:02x}", f"0000:{bus:02x}:01.0", f"0000:{bus + 1:02x}:00.0"
        t.function(rc, [root], INTEL, "0x352a", BRIDGE, numa=socket)
        path = t.function(rc, [root, nic], MELLANOX, "0x1021", "0x020000", numa=socket, cpus=B200_SOCKET_CPUS[socket],
                          subsys=(MELLANOX, "0x0023"))
        t.ib(path, f"mlx5_{n}", f"enp{bus + 1}s0np0", layer="Ethernet", rate="200 Gb/sec (4X HDR)")
    devices = []
    for i, bdf in enumerate(sorted(gpus)):
        # 18 NVLink5 links to the board's NVSwitch chips; GPU2's are all down (none active).
        links = [] if i == 2 else [{"link": l, "version": 7, "remote_bus_id": None, "remote_type": 2} for l in range(18)]
        fabric = {"state": 3, "status": 0, "cluster_uuid": "00000000-0000-0000-0000-000000000000", "clique_id": 0}
        devices.append(nvml_device(i, bdf, "NVIDIA B200", 183359, links, fabric))
    t.nvml({"format": 1, "driver_version": "570.124.06", "error": None, "devices": devices})


def main() -> None:
    for build in (build_gb200_tray_sglang, build_b200_nvlink_down):
        build()
        print("built", build.__name__)


if __name__ == "__main__":
    main()
