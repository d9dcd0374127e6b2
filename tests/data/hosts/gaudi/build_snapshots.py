"""Builds the Intel Gaudi host snapshots in this folder (the generated trees are committed too).

    .venv/bin/python tests/data/hosts/gaudi/build_snapshots.py
    .venv/bin/python -m ray_accel_ext.testing.snapshots --update tests/data/hosts/gaudi

Only what the Gaudi backend reads is written, in the formats of the habanalabs driver
(``Documentation/ABI/testing/sysfs-driver-habanalabs``; ``common/sysfs.c``: ``device_type``,
``module_id``, ``pci_addr``, ``status`` in the PCI function's directory, the ``accel<N>`` class device
below it and ``/sys/class/accel/accel<N>`` pointing at it, ``/sys/bus/pci/drivers/habanalabs/<BDF>``
links), the kernel's PCI and net sysfs (reference/hardware.md 2.1-2.4; ``net/<if>/speed`` in Mb/s),
``/dev/accel/accel<N>``, the hostname, and ``hl-smi -Q ... -f csv,noheader`` output
(``commands/hl-smi.json``). Each snapshot's README says what it stands for; README.md and
expected.json are not touched by this script.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ray_accel_ext.backends.gaudi import hlsmi

HERE = Path(__file__).resolve().parent
HABANA = "0x1da3"
CPUS_2S = ["0-63,128-191", "64-127,192-255"]
# Four PCIe switches (two per socket) with two Gaudi 3 OAMs each: (root bus, [endpoint buses]); the
# switch's upstream port is on root bus + 1, its downstream ports on root bus + 2 (layout illustrative).
SWITCHES = [(0x18, [0x1b, 0x1c]), (0x30, [0x33, 0x34]), (0x98, [0x9b, 0x9c]), (0xb0, [0xb3, 0xb4])]
# OAM slot (module id) of the device on each endpoint bus, in bus order: the driver numbers accel
# devices in probe (bus) order, the baseboard wiring decides the module ids (illustrative).
MODULE_IDS = [2, 3, 0, 1, 6, 7, 4, 5]


class Tree:
    def __init__(self, name: str) -> None:
        self.dir = HERE / name
        for sub in ("rootfs", "commands"):
            shutil.rmtree(self.dir / sub, ignore_errors=True)
        (self.dir / "rootfs").mkdir(parents=True)
        (self.dir / "env.json").write_text("{}\n")

    def write(self, rel: str, text: str) -> None:
        path = self.dir / "rootfs" / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def link(self, rel: str, target_rel: str) -> None:
        path = self.dir / "rootfs" / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(os.path.relpath(self.dir / "rootfs" / target_rel.lstrip("/"), path.parent))

    def host(self, hostname: str, cpus: list[str]) -> None:
        self.write("/proc/sys/kernel/hostname", hostname + "\n")
        self.write("/sys/devices/system/node/online", f"0-{len(cpus) - 1}\n")
        for i, c in enumerate(cpus):
            self.write(f"/sys/devices/system/node/node{i}/cpulist", c + "\n")

    def function(self, path: str, vendor: str, device: str, cls: str, numa: int, cpus: str, subsystem: str) -> str:
        for name, value in (("vendor", vendor), ("device", device), ("class", cls), ("subsystem_vendor", vendor),
                            ("subsystem_device", subsystem), ("numa_node", str(numa)), ("local_cpulist", cpus)):
            self.write(f"{path}/{name}", value + "\n")
        bdf = path.rsplit("/", 1)[1]
        self.link(f"/sys/bus/pci/devices/{bdf}", path)
        return bdf

    def hl_smi(self, stdout: str) -> None:
        (self.dir / "commands").mkdir(exist_ok=True)
        record = {"argv": hlsmi.argv(), "returncode": 0, "stdout": stdout}
        (self.dir / "commands/hl-smi.json").write_text(json.dumps(record, indent=2) + "\n")


def build_hls3() -> None:
    t = Tree("hls3-gaudi3-8")
    t.host("hls3-node-01", CPUS_2S)
    rows = []
    accel = 0
    for s, (root_bus, buses) in enumerate(SWITCHES):
        socket = 0 if s < 2 else 1
        rc = f"pci0000:{root_bus:02x}"
        port = f"0000:{root_bus:02x}:01.0"
        upstream = f"0000:{root_bus + 1:02x}:00.0"
        t.write(f"/sys/devices/{rc}/{port}/class", "0x060400\n")
        t.write(f"/sys/devices/{rc}/{port}/{upstream}/class", "0x060400\n")
        for k, bus in enumerate(buses):
            down = f"0000:{root_bus + 2:02x}:{k:02x}.0"
            bdf = f"0000:{bus:02x}:00.0"
            t.write(f"/sys/devices/{rc}/{port}/{upstream}/{down}/class", "0x060400\n")
            path = f"/sys/devices/{rc}/{port}/{upstream}/{down}/{bdf}"
            t.function(path, HABANA, "0x1060", "0x120000", socket, CPUS_2S[socket], "0x1060")
            module = MODULE_IDS[accel]
            for name, value in (("device_type", "GAUDI3"), ("module_id", str(module)), ("pci_addr", bdf),
                                ("status", "Operational")):
                t.write(f"{path}/{name}", value + "\n")
            t.write(f"{path}/accel/accel{accel}/dev", f"261:{accel}\n")
            t.link(f"{path}/accel/accel{accel}/device", path)
            t.link(f"/sys/class/accel/accel{accel}", f"{path}/accel/accel{accel}")
            t.link(f"/sys/bus/pci/drivers/habanalabs/{bdf}", path)
            t.write(f"/dev/accel/accel{accel}", "")
            # Three scale-out ports per Gaudi 3, 200 GbE each; udev names the ports of one function
            # by dev_port (enp<bus>s0d<port>); the port numbers are illustrative.
            for port_no in (21, 22, 23):
                ifname = f"enp{bus}s0d{port_no}"
                t.write(f"{path}/net/{ifname}/speed", "200000\n")
                t.write(f"{path}/net/{ifname}/operstate", "up\n")
                t.write(f"{path}/net/{ifname}/dev_port", f"{port_no}\n")
                t.link(f"/sys/class/net/{ifname}", f"{path}/net/{ifname}")
            rows.append((accel, module, bdf))
            accel += 1
    stdout = "".join(
        f"{i}, {m}, {bdf}, HL-325L, AN3{m:07d}, 01P4-HL3090A0-18-U4V19{m}-22-07-0{m}, 131072 MiB, 1.22.1-97ec1a4\n"
        for i, m, bdf in rows
    )
    t.hl_smi(stdout)


def build_empty() -> None:
    t = Tree("no-gaudi")  # a CPU host: no Habana function, no habanalabs driver
    t.host("cpu-node-07", ["0-31"])
    t.function("/sys/devices/pci0000:00/0000:00:00.0", "0x8086", "0x09a2", "0x060000", 0, "0-31", "0x0000")
    t.function("/sys/devices/pci0000:00/0000:00:1f.6", "0x8086", "0x15fb", "0x020000", 0, "0-31", "0x0000")


if __name__ == "__main__":
    build_hls3()
    build_empty()
    print(json.dumps(sorted(p.name for p in HERE.iterdir() if (p / "rootfs").is_dir())))
