"""Builds the NVIDIA host snapshots in this folder (the generated trees are committed too).

    .venv/bin/python tests/data/hosts/nvidia_gpu/build_snapshots.py
    .venv/bin/python -m ray_accel_ext.testing.snapshots --update tests/data/hosts/nvidia_gpu

Only the files discovery reads are written: for every PCI function its ``vendor``/``device``/
``class`` (plus ``numa_node``, ``local_cpulist`` and subsystem ids for GPUs and NICs), the
``/sys/bus/pci/devices/<BDF>`` relative symlinks into ``/sys/devices/pci...``, the
``/sys/class/infiniband`` entries, the hostname, and ``libraries/nvml.json``. Formats follow
shared/reference/hardware.md sections 2.1-2.5 and 3; each snapshot's README says what it stands for.
README.md and expected.json are not touched by this script.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent

INTEL = "0x8086"
BROADCOM = "0x1000"
NVIDIA = "0x10de"
MELLANOX = "0x15b3"
BRIDGE = "0x060400"


def _uuid(seed: str) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"ray-accel-ext-fixture/{seed}"))


class Tree:
    """A snapshot's ``rootfs`` under construction."""

    def __init__(self, name: str) -> None:
        self.dir = HERE / name
        self.root = self.dir / "rootfs"
        if self.root.exists():
            shutil.rmtree(self.root)
        for sub in ("libraries",):
            if (self.dir / sub).exists():
                shutil.rmtree(self.dir / sub)
        self.root.mkdir(parents=True)
        (self.root / "sys/bus/pci/devices").mkdir(parents=True)

    def write(self, path: str, text: str) -> None:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def link(self, path: str, target: str) -> None:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, p)

    def function(self, rc: str, chain: list[str], vendor: str, device: str, pci_class: str, *,
                 numa: int | None = None, cpus: str | None = None, subsys: tuple[str, str] | None = None) -> str:
        """One PCI function at ``/sys/devices/<rc>/<chain...>``; returns its host path."""
        path = "/sys/devices/" + "/".join([rc, *chain])
        bdf = chain[-1]
        self.write(f"{path}/vendor", f"{vendor}\n")
        self.write(f"{path}/device", f"{device}\n")
        self.write(f"{path}/class", f"{pci_class}\n")
        if numa is not None:
            self.write(f"{path}/numa_node", f"{numa}\n")
        if cpus is not None:
            self.write(f"{path}/local_cpulist", f"{cpus}\n")
        if subsys is not None:
            self.write(f"{path}/subsystem_vendor", f"{subsys[0]}\n")
            self.write(f"{path}/subsystem_device", f"{subsys[1]}\n")
        self.link(f"/sys/bus/pci/devices/{bdf}", "../../../devices/" + "/".join([rc, *chain]))
        return path

    def ib(self, nic_path: str, name: str, netdev: str, *, layer: str = "InfiniBand", rate: str = "400 Gb/sec (4X NDR)") -> None:
        """An RDMA device ``name`` on the function at ``nic_path`` (mlx5 style)."""
        bdf = nic_path.rsplit("/", 1)[-1]
        ibdir = f"{nic_path}/infiniband/{name}"
        self.link(f"{ibdir}/device", "../../../" + bdf)
        self.write(f"{ibdir}/ports/1/link_layer", f"{layer}\n")
        self.write(f"{ibdir}/ports/1/rate", f"{rate}\n")
        # A netdev directory always holds attributes; one of them also keeps the directory in git.
        self.write(f"{nic_path}/net/{netdev}/operstate", "up\n")
        self.link(f"/sys/class/infiniband/{name}", "../../devices/" + ibdir[len("/sys/devices/"):])

    def hostname(self, name: str) -> None:
        self.write("/proc/sys/kernel/hostname", f"{name}\n")

    def env(self, env: dict[str, str] | None = None) -> None:
        (self.dir / "env.json").write_text(json.dumps(env or {}, indent=2, sort_keys=True) + "\n")

    def nvml(self, reading: dict) -> None:
        (self.dir / "libraries").mkdir(exist_ok=True)
        (self.dir / "libraries/nvml.json").write_text(json.dumps(reading, indent=1) + "\n")


def nvml_bus_id(bdf: str) -> str:
    domain, bus, devfn = bdf.split(":")
    return f"{int(domain, 16):08X}:{bus.upper()}:{devfn.upper()}"


def nvml_device(index: int, bdf: str, name: str, memory_mib: int, links: list[dict], fabric: dict | None) -> dict:
    return {
        "index": index,
        "bus_id": nvml_bus_id(bdf),
        "uuid": _uuid(bdf),
        "name": name,
        "memory_total": memory_mib << 20,
        "nvlinks": links,
        "fabric": fabric,
        "errors": [],
    }


# -- (a) 8x H100 SXM HGX (DGX H100 layout) ---------------------------------------------------------

H100_SOCKET_CPUS = {0: "0-55,112-167", 1: "56-111,168-223"}
# Four root complexes, two per socket; each holds a Broadcom PEX parent switch with two leaf
# switches, and each leaf switch one GPU and one ConnectX-7 (hardware.md section 8.1).
H100_COMPLEXES = [(0x15, 0), (0x37, 0), (0x97, 1), (0xB7, 1)]
NVSWITCH_BDFS = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
# DGX H100: each GPU's 18 NVLink4 links spread 5/4/4/5 over the four NVSwitch chips.
NVSWITCH_OF_LINK = [0] * 5 + [1] * 4 + [2] * 4 + [3] * 5


def build_h100() -> None:
    t = Tree("h100-sxm-8gpu-dgx")
    t.hostname("dgx-h100-017")
    t.env()
    t.function("pci0000:00", ["0000:00:00.0"], INTEL, "0x09a2", "0x060000")
    for i, bdf in enumerate(NVSWITCH_BDFS):
        port = f"0000:00:0{i + 1}.0"
        t.function("pci0000:00", [port], INTEL, "0x352a", BRIDGE)
        t.function("pci0000:00", [port, bdf], NVIDIA, "0x22a3", "0x068000", numa=0, cpus=H100_SOCKET_CPUS[0])
    gpus: list[str] = []
    nic = 0
    for base, socket in H100_COMPLEXES:
        rc = f"pci0000:{base:02x}"
        b = lambda off, base=base: f"0000:{base + off:02x}"  # noqa: E731 - bus number helper
        root = f"{b(0)}:01.0"
        t.function(rc, [root], INTEL, "0x352a", BRIDGE, numa=socket)
        usp = f"{b(1)}:00.0"
        t.function(rc, [root, usp], BROADCOM, "0xc030", BRIDGE)
        for leaf in range(2):
            dsp = f"{b(2)}:0{leaf}.0"
            leaf_bus = 3 + 4 * leaf  # leaf switch USP bus, its DSPs bus, GPU bus, NIC bus
            leaf_usp = f"{b(leaf_bus)}:00.0"
            gpu_dsp, nic_dsp = f"{b(leaf_bus + 1)}:00.0", f"{b(leaf_bus + 1)}:01.0"
            gpu, nic_bdf = f"{b(leaf_bus + 2)}:00.0", f"{b(leaf_bus + 3)}:00.0"
            chain = [root, usp, dsp, leaf_usp]
            for c in ([root, usp, dsp], chain, chain + [gpu_dsp], chain + [nic_dsp]):
                t.function(rc, c, BROADCOM, "0xc030", BRIDGE)
            t.function(rc, chain + [gpu_dsp, gpu], NVIDIA, "0x2330", "0x030200",
                       numa=socket, cpus=H100_SOCKET_CPUS[socket], subsys=(NVIDIA, "0x16c1"))
            nic_path = t.function(rc, chain + [nic_dsp, nic_bdf], MELLANOX, "0x1021", "0x020700",
                                  numa=socket, cpus=H100_SOCKET_CPUS[socket], subsys=(MELLANOX, "0x0023"))
            t.ib(nic_path, f"mlx5_{nic}", f"ibp{int(nic_bdf[5:7], 16)}s0")
            gpus.append(gpu)
            nic += 1
    fabric = {"state": 3, "status": 0, "cluster_uuid": "00000000-0000-0000-0000-000000000000", "clique_id": 0}
    devices = []
    for i, bdf in enumerate(sorted(gpus)):
        links = [
            {"link": l, "version": 6, "remote_bus_id": nvml_bus_id(NVSWITCH_BDFS[s]), "remote_type": 2}
            for l, s in enumerate(NVSWITCH_OF_LINK)
        ]
        devices.append(nvml_device(i, bdf, "NVIDIA H100 80GB HBM3", 81559, links, fabric))
    t.nvml({"format": 1, "driver_version": "580.126.20", "error": None, "devices": devices})


# -- (a2) EC2 p5.48xlarge: the HGX H100 board with four EFA per GPU ---------------------------------

AMAZON = "0x1d0f"
# p5.48xlarge: 192 vCPUs on two sockets (AMD EPYC 7R13, 48 cores x 2 threads each; AWS P5 page).
P5_SOCKET_CPUS = {0: "0-47,96-143", 1: "48-95,144-191"}
P5_INSTANCE_ID = "i-0p5a00000000000001"


def build_p5() -> None:
    t = Tree("p5-48xlarge")
    t.hostname("ip-10-1-7-42")
    t.env()
    t.write("/sys/class/dmi/id/product_name", "p5.48xlarge\n")
    t.write("/sys/class/dmi/id/sys_vendor", "Amazon EC2\n")
    t.function("pci0000:00", ["0000:00:00.0"], INTEL, "0x09a2", "0x060000")
    for i, bdf in enumerate(NVSWITCH_BDFS):
        port = f"0000:00:0{i + 1}.0"
        t.function("pci0000:00", [port], INTEL, "0x352a", BRIDGE)
        t.function("pci0000:00", [port, bdf], NVIDIA, "0x22a3", "0x068000", numa=0, cpus=P5_SOCKET_CPUS[0])
    gpus: list[str] = []
    for base, socket in H100_COMPLEXES:
        rc = f"pci0000:{base:02x}"
        b = lambda off, base=base: f"0000:{base + off:02x}"  # noqa: E731 - bus number helper
        root = f"{b(0)}:01.0"
        t.function(rc, [root], INTEL, "0x352a", BRIDGE, numa=socket)
        usp = f"{b(1)}:00.0"
        t.function(rc, [root, usp], BROADCOM, "0xc030", BRIDGE)
        for leaf in range(2):
            dsp = f"{b(2)}:0{leaf}.0"
            leaf_bus = 3 + 8 * leaf  # leaf USP bus, its DSPs' bus, the GPU's bus, four EFA buses
            leaf_usp = f"{b(leaf_bus)}:00.0"
            chain = [root, usp, dsp, leaf_usp]
            for c in ([root, usp, dsp], chain):
                t.function(rc, c, BROADCOM, "0xc030", BRIDGE)
            gpu_dsp, gpu = f"{b(leaf_bus + 1)}:00.0", f"{b(leaf_bus + 2)}:00.0"
            t.function(rc, chain + [gpu_dsp], BROADCOM, "0xc030", BRIDGE)
            t.function(rc, chain + [gpu_dsp, gpu], NVIDIA, "0x2330", "0x030200",
                       numa=socket, cpus=P5_SOCKET_CPUS[socket], subsys=(NVIDIA, "0x16c1"))
            for k in range(4):
                efa_dsp, efa = f"{b(leaf_bus + 1)}:0{k + 1}.0", f"{b(leaf_bus + 3 + k)}:00.0"
                t.function(rc, chain + [efa_dsp], BROADCOM, "0xc030", BRIDGE)
                path = t.function(rc, chain + [efa_dsp, efa], AMAZON, "0xefa1", "0x020000",
                                  numa=socket, cpus=P5_SOCKET_CPUS[socket])
                # rdma-core's predictable name (bus and slot in decimal); EFA has no netdev
                name = f"rdmap{int(efa[5:7], 16)}s0"
                ibdir = f"{path}/infiniband/{name}"
                t.link(f"{ibdir}/device", "../../../" + efa)
                t.write(f"{ibdir}/ports/1/link_layer", "Unknown\n")
                t.link(f"/sys/class/infiniband/{name}", "../../devices/" + ibdir[len("/sys/devices/"):])
            gpus.append(gpu)
    fabric = {"state": 3, "status": 0, "cluster_uuid": "00000000-0000-0000-0000-000000000000", "clique_id": 0}
    devices = []
    for i, bdf in enumerate(sorted(gpus)):
        links = [
            {"link": l, "version": 6, "remote_bus_id": nvml_bus_id(NVSWITCH_BDFS[s]), "remote_type": 2}
            for l, s in enumerate(NVSWITCH_OF_LINK)
        ]
        devices.append(nvml_device(i, bdf, "NVIDIA H100 80GB HBM3", 81559, links, fabric))
    t.nvml({"format": 1, "driver_version": "580.126.20", "error": None, "devices": devices})
    (t.dir / "metadata.json").write_text(json.dumps({"ec2": {
        "instance-id": P5_INSTANCE_ID,
        "instance-type": "p5.48xlarge",
        "placement/availability-zone": "us-east-2a",
        "placement/region": "us-east-2",
    }}, indent=2, sort_keys=True) + "\n")


# -- (b) GB200 NVL72 compute tray -------------------------------------------------------------------

GB200_CLUSTER = "b9e3c1a2-5d4f-4a6b-8c7d-1e2f3a4b5c6d"
GB200_CLIQUE = 32766


def build_gb200() -> None:
    t = Tree("gb200-nvl72-tray")
    t.hostname("nvl72-r07-tray05")
    t.env()
    # Two Grace CPUs (72 cores each), two B200-class GPUs per Grace, each GPU alone in its own PCI
    # domain behind a root port (0008/0009 on socket 0, 0018/0019 on socket 1).
    gpus = []
    for domain, socket in ((0x0008, 0), (0x0009, 0), (0x0018, 1), (0x0019, 1)):
        rc = f"pci{domain:04x}:00"
        root = f"{domain:04x}:00:00.0"
        gpu = f"{domain:04x}:01:00.0"
        cpus = "0-71" if socket == 0 else "72-143"
        t.function(rc, [root], NVIDIA, "0x22b1", BRIDGE, numa=socket)
        t.function(rc, [root, gpu], NVIDIA, "0x2941", "0x030200", numa=socket, cpus=cpus, subsys=(NVIDIA, "0x2046"))
        gpus.append(gpu)
    fabric = {"state": 3, "status": 0, "cluster_uuid": GB200_CLUSTER, "clique_id": GB200_CLIQUE}
    devices = []
    for i, bdf in enumerate(sorted(gpus)):
        # 18 NVLink5 links to the rack's NVSwitch trays; the remote ports are not on this host.
        links = [{"link": l, "version": 7, "remote_bus_id": None, "remote_type": 2} for l in range(18)]
        devices.append(nvml_device(i, bdf, "NVIDIA GB200", 189471, links, fabric))
    t.nvml({"format": 1, "driver_version": "580.126.20", "error": None, "devices": devices})


# -- (c) one L4 in a VM -----------------------------------------------------------------------------


def build_l4() -> None:
    t = Tree("l4-single-pcie")
    t.hostname("l4-vm-1")
    t.env()
    t.function("pci0000:00", ["0000:00:00.0"], INTEL, "0x1237", "0x060000")
    t.function("pci0000:00", ["0000:00:01.0"], INTEL, "0x7000", "0x060100")
    t.function("pci0000:00", ["0000:00:03.0"], NVIDIA, "0x27b8", "0x030200", numa=-1, cpus="0-7", subsys=(NVIDIA, "0x16ca"))
    t.function("pci0000:00", ["0000:00:04.0"], "0x1af4", "0x1000", "0x020000", numa=-1, cpus="0-7")
    device = nvml_device(0, "0000:00:03.0", "NVIDIA L4", 23034, [], None)
    t.nvml({"format": 1, "driver_version": "580.126.20", "error": None, "devices": [device]})


# -- (d) an NVIDIA GPU whose device id the SKU table does not list ----------------------------------


def build_unknown() -> None:
    t = Tree("unknown-device-id")
    t.hostname("ws-unknown-gpu")
    t.env()
    t.function("pci0000:00", ["0000:00:00.0"], INTEL, "0x4660", "0x060000")
    t.function("pci0000:00", ["0000:00:01.0"], INTEL, "0x460d", BRIDGE, numa=0)
    gpu = "0000:01:00.0"
    t.function("pci0000:00", ["0000:00:01.0", gpu], NVIDIA, "0x2b85", "0x030000", numa=0, cpus="0-31", subsys=(NVIDIA, "0x2102"))
    # The card's HDMI audio function: same vendor, class 0x0403, never a GPU.
    t.function("pci0000:00", ["0000:00:01.0", "0000:01:00.1"], NVIDIA, "0x22e8", "0x040300", numa=0, cpus="0-31")
    device = nvml_device(0, gpu, "NVIDIA GeForce RTX 5090", 32607, [], None)
    t.nvml({"format": 1, "driver_version": "580.126.20", "error": None, "devices": [device]})


# -- (e) no accelerators ----------------------------------------------------------------------------


def build_none() -> None:
    t = Tree("no-accelerators")
    t.hostname("cpu-only-3")
    t.env()
    t.function("pci0000:00", ["0000:00:00.0"], INTEL, "0x1237", "0x060000")
    t.function("pci0000:00", ["0000:00:01.0"], INTEL, "0x7000", "0x060100")
    t.function("pci0000:00", ["0000:00:02.0"], "0x1234", "0x1111", "0x030000", numa=-1, cpus="0-3")  # QEMU stdvga
    t.function("pci0000:00", ["0000:00:03.0"], "0x1af4", "0x1000", "0x020000", numa=-1, cpus="0-3")  # virtio-net
    t.function("pci0000:00", ["0000:00:04.0"], "0x1af4", "0x1001", "0x010000", numa=-1, cpus="0-3")  # virtio-blk


# -- (f) one H100 on a GCE a3-highgpu-1g VM, with provider placement ------------------------------


def build_gce_a3() -> None:
    t = Tree("gce-a3-highgpu-1g")
    t.hostname("a3-vm-0")
    t.env()
    t.write("/sys/class/dmi/id/product_name", "Google Compute Engine\n")
    t.write("/sys/class/dmi/id/sys_vendor", "Google\n")
    t.function("pci0000:00", ["0000:00:00.0"], INTEL, "0x1237", "0x060000")
    t.function("pci0000:00", ["0000:00:01.0"], INTEL, "0x7110", "0x060100")
    t.function("pci0000:00", ["0000:00:04.0"], "0x1ae0", "0x0042", "0x020000", numa=0, cpus="0-25")  # gVNIC
    t.function("pci0000:00", ["0000:00:05.0"], NVIDIA, "0x2330", "0x030200", numa=0, cpus="0-25", subsys=(NVIDIA, "0x16c1"))
    fabric = {"state": 3, "status": 0, "cluster_uuid": "00000000-0000-0000-0000-000000000000", "clique_id": 0}
    device = nvml_device(0, "0000:00:05.0", "NVIDIA H100 80GB HBM3", 81559, [], fabric)
    t.nvml({"format": 1, "driver_version": "570.172.08", "error": None, "devices": [device]})
    topo = {"cluster": "us-central1-cluster-a3h", "block": "4f1c0b7e", "subBlock": "9a2d3c11", "host": "77e0aa31"}
    (t.dir / "metadata.json").write_text(json.dumps({"gce": {
        "instance/zone": "projects/123456789012/zones/us-central1-a",
        "instance/machine-type": "projects/123456789012/machineTypes/a3-highgpu-1g",
        "instance/attributes/physical_host_topology": json.dumps(topo, separators=(",", ":")),
    }}, indent=2, sort_keys=True) + "\n")


def main() -> None:
    for build in (build_h100, build_p5, build_gb200, build_l4, build_unknown, build_none, build_gce_a3):
        build()
        print("built", build.__name__)


if __name__ == "__main__":
    main()
