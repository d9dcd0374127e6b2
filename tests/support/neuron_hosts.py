"""Builders for AWS Neuron host snapshots (``tests/data/hosts/neuron/*``).

Writes exactly what the Neuron backend reads, with the real formats of ``reference/hardware.md``
sections 2.4, 2.8 and 5: virtual class devices without a PCI parent, ``core_count`` without a
trailing newline, ``connected_devices`` as ``"a, b, c, d\\n"``, ``neuron-ls -j`` JSON with domain-less
BDFs and string NUMA nodes, EFA devices under ``/sys/class/infiniband`` named ``rdmap<bus>s<slot>``
(decimal) with ``link_layer`` ``Unknown`` and no netdev, and real relative symlinks.

Regenerate the shipped snapshots (then review and update the goldens)::

    .venv/bin/python -m tests.support.neuron_hosts tests/data/hosts/neuron
    .venv/bin/python -m ray_accel_ext.testing.snapshots --update tests/data/hosts/neuron

:func:`ultraserver_node` derives the other nodes of an UltraServer from one node's snapshot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["NeuronHostSpec", "SwitchGroup", "build", "build_empty", "ultraserver_node", "SPECS", "EMPTY", "main"]

GIB = 1 << 30
TRN2_TORUS = [
    [12, 1, 3, 4], [0, 13, 5, 2], [14, 3, 1, 6], [2, 15, 7, 0],
    [8, 5, 7, 0], [4, 9, 1, 6], [10, 7, 5, 2], [6, 11, 3, 4],
    [4, 9, 11, 12], [8, 5, 13, 10], [6, 11, 9, 14], [10, 7, 15, 8],
    [0, 13, 15, 8], [12, 1, 9, 14], [2, 15, 13, 10], [14, 3, 11, 12],
]  # driver table trn2_32xl_neigbor_ids (v3/neuron_dhal_v3.c)
# neuron-ls prints the same neighbour sets in its own order (aws-neuron-sdk neuron-ls.rst).
TRN2_LS_CONNECTED = [
    [12, 3, 4, 1], [13, 0, 5, 2], [14, 1, 6, 3], [15, 2, 7, 0],
    [0, 7, 8, 5], [1, 4, 9, 6], [2, 5, 10, 7], [3, 6, 11, 4],
    [4, 11, 12, 9], [5, 8, 13, 10], [6, 9, 14, 11], [7, 10, 15, 8],
    [8, 15, 0, 13], [9, 12, 1, 14], [10, 13, 2, 15], [11, 14, 3, 12],
]
# neuron-ls.rst trn2 example: device -> (bus, NUMA node). Logical order differs from bus order.
TRN2_BUSES = [0xCC, 0xB5, 0xB6, 0xCB, 0x6F, 0x58, 0x59, 0x6E, 0x9B, 0x84, 0x85, 0x9A, 0xF8, 0xE1, 0xE2, 0xF7]
TRN2_NUMA = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
TRN2_CPUS = {0: "0-47,96-143", 1: "48-95,144-191"}


@dataclass
class SwitchGroup:
    """One PCIe switch below its own root port: endpoints ``("neuron", device number)`` or
    ``("efa", None)`` in downstream-port order; endpoint k sits on bus ``root_bus + 3 + k``."""

    root_bus: int
    numa: int
    endpoints: list[tuple[str, int | None]]


@dataclass
class NeuronHostSpec:
    """Everything one snapshot holds."""

    name: str
    readme: str
    pci_device_id: str  # 0x7364
    device_name: str  # Trainium2
    arch_type: str  # NDv3
    arch_instance_type: str  # Trn2
    physical_cores: int
    memory_bytes: int
    groups: list[SwitchGroup]
    cpus: dict[int, str]
    connected: list[list[int]]  # sysfs connected_devices per device
    ls_connected: list[list[int]] | None = None  # neuron-ls order, defaults to ``connected``
    logical_nc_config: int | None = None  # neuron-ls logical_neuroncore_config (trn2 only)
    efa_device_id: str = "0xefa1"
    product_name: str | None = None  # DMI; None: no /sys/class/dmi (containers)
    hostname: str = "ip-10-0-0-1"
    neuron_ls: str = "record"  # "record" | "missing"
    ultraserver: dict[str, str] | None = None  # class-level files, name -> content
    ec2: dict[str, str] = field(default_factory=dict)
    ec2_faults: dict[str, Any] = field(default_factory=dict)


def _write(root: Path, rel: str, content: str) -> None:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


def _link(root: Path, rel: str, target_rel: str) -> None:
    link = root / rel.lstrip("/")
    link.parent.mkdir(parents=True, exist_ok=True)
    target = root / target_rel.lstrip("/")
    link.symlink_to(os.path.relpath(target, link.parent))


def _bdf(bus: int, dev: int = 0) -> str:
    return f"0000:{bus:02x}:{dev:02x}.0"


def _pci_function(root: Path, path: str, vendor: str, device: str, cls: str, numa: int, cpus: str) -> None:
    for name, value in (("vendor", vendor), ("device", device), ("class", cls),
                        ("numa_node", str(numa)), ("local_cpulist", cpus)):
        _write(root, f"{path}/{name}", value + "\n")
    _link(root, f"/sys/bus/pci/devices/{path.rsplit('/', 1)[1]}", path)


def build(spec: NeuronHostSpec, dest: Path) -> Path:
    """Write the snapshot ``dest`` (replaced if it exists) from ``spec``."""
    if dest.exists():
        shutil.rmtree(dest)
    root = dest / "rootfs"
    root.mkdir(parents=True)
    n = len(spec.connected)
    bdf_of: dict[int, str] = {}
    numa_of: dict[int, int] = {}
    for g in spec.groups:
        r = g.root_bus
        port = f"/sys/devices/pci0000:{r:02x}/{_bdf(r, 1)}/{_bdf(r + 1)}"
        for k, (kind, number) in enumerate(g.endpoints):
            bus = r + 3 + k
            path = f"{port}/{_bdf(r + 2, k)}/{_bdf(bus)}"
            cpus = spec.cpus[g.numa]
            if kind == "neuron":
                _pci_function(root, path, "0x1d0f", spec.pci_device_id, "0x088000", g.numa, cpus)
                assert number is not None
                bdf_of[number] = _bdf(bus)
                numa_of[number] = g.numa
            else:
                _pci_function(root, path, "0x1d0f", spec.efa_device_id, "0x020000", g.numa, cpus)
                ib = f"rdmap{bus}s0"  # rdma-core predictable name: bus and slot in decimal
                _write(root, f"{path}/infiniband/{ib}/ports/1/link_layer", "Unknown\n")
                _link(root, f"{path}/infiniband/{ib}/device", path)
                _link(root, f"/sys/class/infiniband/{ib}", f"{path}/infiniband/{ib}")
    for i in range(n):
        base = f"/sys/devices/virtual/neuron_device/neuron{i}"
        _write(root, f"{base}/core_count", str(spec.physical_cores))  # no newline, as the driver writes it
        _write(root, f"{base}/connected_devices", ", ".join(map(str, spec.connected[i])) + "\n")
        _write(root, f"{base}/info/architecture/arch_type", spec.arch_type + "\n")
        _write(root, f"{base}/info/architecture/instance_type", spec.arch_instance_type + "\n")
        _write(root, f"{base}/info/architecture/device_name", spec.device_name + "\n")
        _link(root, f"/sys/class/neuron_device/neuron{i}", base)
        _write(root, f"/dev/neuron{i}", "")
    for name, content in (spec.ultraserver or {}).items():
        _write(root, f"/sys/class/neuron_device/{name}", content)
    if spec.product_name is not None:
        _write(root, "/sys/class/dmi/id/product_name", spec.product_name + "\n")
        _write(root, "/sys/class/dmi/id/sys_vendor", "Amazon EC2\n")
    _write(root, "/proc/sys/kernel/hostname", spec.hostname + "\n")

    commands = dest / "commands"
    commands.mkdir()
    if spec.neuron_ls == "missing":
        record: dict[str, Any] = {"argv": ["/opt/aws/neuron/bin/neuron-ls", "-j"], "missing": True}
    else:
        lnc = spec.logical_nc_config or 1
        per = spec.physical_cores // lnc
        entries = []
        for i in range(n):
            entry: dict[str, Any] = {
                "neuron_device": i,
                "bdf": bdf_of[i][5:],  # neuron-ls drops the PCI domain
                "cpu_affinity": spec.cpus[numa_of[i]],
                "numa_node": str(numa_of[i]),  # a string in neuron-ls output
                "connected_to": (spec.ls_connected or spec.connected)[i] or None,
                "nc_count": per,
            }
            if spec.logical_nc_config is not None:
                entry["logical_neuroncore_config"] = spec.logical_nc_config
            entry.update({"memory_size": spec.memory_bytes, "neuroncore_ids": list(range(i * per, i * per + per)),
                          "neuron_processes": []})
            entries.append(entry)
        record = {"argv": ["/opt/aws/neuron/bin/neuron-ls", "-j"], "stdout": json.dumps(entries, indent=4) + "\n",
                  "returncode": 0}
    (commands / "neuron-ls.json").write_text(json.dumps(record, indent=2) + "\n")
    metadata: dict[str, Any] = {"ec2": spec.ec2}
    if spec.ec2_faults:
        metadata["ec2_faults"] = spec.ec2_faults
    (dest / "metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    (dest / "env.json").write_text("{}\n")
    (dest / "README.md").write_text(spec.readme.strip() + "\n")
    return dest


def _ec2(instance_type: str, instance_id: str, zone: str = "us-east-2b") -> dict[str, str]:
    return {
        "instance-type": instance_type,
        "instance-id": instance_id,
        "placement/availability-zone": zone,
        "placement/region": zone[:-1],
    }


def _trn2_groups() -> list[SwitchGroup]:
    # Two Trainium2 devices and two EFA NICs behind each PCIe switch (synthetic, see README).
    groups = []
    for lo in sorted({b for b in TRN2_BUSES if b - 1 not in TRN2_BUSES}):
        a, b = TRN2_BUSES.index(lo), TRN2_BUSES.index(lo + 1)
        groups.append(SwitchGroup(lo - 4, TRN2_NUMA[a], [("efa", None), ("neuron", a), ("neuron", b), ("efa", None)]))
    return groups


_TRN2_COMMON = dict(
    pci_device_id="0x7364", device_name="Trainium2", arch_type="NDv3", arch_instance_type="Trn2",
    physical_cores=8, memory_bytes=96 * GIB, cpus=TRN2_CPUS, connected=TRN2_TORUS,
    ls_connected=TRN2_LS_CONNECTED, logical_nc_config=2, efa_device_id="0xefa2",
)

_TRN2_README = """
# trn2.48xlarge{title}

An EC2 trn2.48xlarge{what}: 16 Trainium2 devices (PCI `0x1d0f:0x7364`, 8 physical NeuronCores
each, LNC=2 by default -> 4 logical cores, 96 GiB), NeuronLink-v3 4x4 2D torus, 192 vCPUs on
two NUMA nodes.

Sources: device numbers, BDFs, NUMA nodes, CPU affinity and the `neuron-ls -j` neighbour order
come from the trn2 example of `aws-neuron-sdk tools/neuron-sys-tools/neuron-ls.rst @81ce03a`;
`connected_devices` is the driver's `trn2_32xl_neigbor_ids` table (`aws-neuron-driver
v3/neuron_dhal_v3.c @fca19f7`); file formats from `neuron_cdev.c` (`core_count` has no newline).
See `reference/hardware.md` sections 2.8, 5.1, 8.4.

Synthetic parts (not captured from a machine): the PCIe tree above the devices (one switch per
pair of adjacent-bus devices, each switch also holding two EFA functions `0x1d0f:0xefa2`,
16 EFA in all; the EFA count and device id of trn2 are not confirmed), the hostname and the
metadata values. Files are written by `tests/support/neuron_hosts.py`.
{extra}"""


def _specs() -> list[NeuronHostSpec]:
    specs = [
        NeuronHostSpec(
            name="inf2-xlarge",
            readme="""
# inf2.xlarge

An EC2 inf2.xlarge: one Inferentia2 device (PCI `0x1d0f:0x7264`, 2 NeuronCore-v2, 32 GiB), no
NeuronLink peers (`connected_devices` is `"\\n"`), no EFA, 4 vCPUs on one NUMA node.

Sources: device facts from `reference/hardware.md` sections 1.5, 2.8, 5.2 and the Inferentia2
architecture page; the PCI address, the switch above it, the hostname and metadata values are
synthetic. Written by `tests/support/neuron_hosts.py`.

Expected: `neuron_cores` 2, `accelerator_type:aws-neuron-core`, `rayaccel.io/sku=inferentia2`,
discovery `ok`.
""",
            pci_device_id="0x7264", device_name="Inferentia2", arch_type="NDv2", arch_instance_type="Inf2",
            physical_cores=2, memory_bytes=32 * GIB, cpus={0: "0-3"}, connected=[[]],
            groups=[SwitchGroup(0x10, 0, [("neuron", 0)])],
            product_name="inf2.xlarge", hostname="ip-10-0-2-11",
            ec2=_ec2("inf2.xlarge", "i-0inf2000000000001"),
        ),
        NeuronHostSpec(
            name="trn1-32xlarge",
            readme="""
# trn1.32xlarge

An EC2 trn1.32xlarge: 16 Trainium devices (PCI `0x1d0f:0x7164`, 2 NeuronCore-v2 each, 32 GiB),
NeuronLink-v2 2D torus (AWS also calls it a 4D hypercube: the 4x4 torus and the 4-cube are the
same graph), 8 EFA devices (800 Gbps), 128 vCPUs on two NUMA nodes.

Sources: counts from the Trn1 architecture page and the Neuron multi-node setup guide
("trn1.32xlarge has 8 EFA devices"); formats from `reference/hardware.md` sections 2.4, 2.8, 5.1.

Synthetic parts: Trn1 neighbours come from firmware and were not captured, so
`connected_devices` uses the same row-major 4x4 torus as the Trn2 driver table; BDFs, the PCIe tree
(two devices and one EFA `0x1d0f:0xefa1` behind each switch), CPU lists, hostname and metadata are
made up. No `logical_neuroncore_config` in `neuron-ls` output (it is printed on trn2 only).
Written by `tests/support/neuron_hosts.py`.

Expected: `neuron_cores` 32, `rayaccel.io/sku=trainium1`, `interconnect=neuronlink-v2`,
`rdma-nics=8`, every device with a PIX EFA (`gpudirect=true`), discovery `ok`.
""",
            pci_device_id="0x7164", device_name="Trainium1", arch_type="NDv2", arch_instance_type="Trn1",
            physical_cores=2, memory_bytes=32 * GIB, cpus={0: "0-31,64-95", 1: "32-63,96-127"},
            connected=TRN2_TORUS,
            groups=[SwitchGroup(0x10 + 0x10 * g, 0 if g < 4 else 1, [("efa", None), ("neuron", 2 * g), ("neuron", 2 * g + 1)])
                    for g in range(8)],
            product_name="trn1.32xlarge", hostname="ip-10-0-3-21",
            ec2=_ec2("trn1.32xlarge", "i-0trn1000000000001"),
        ),
        NeuronHostSpec(
            name="trn2-48xlarge",
            readme=_TRN2_README.format(title="", what="", extra="""
Expected: `neuron_cores` 64, `rayaccel.io/sku=trainium2`, `interconnect=neuronlink-v3`,
`fabric-topology=4x4` (the host is its own domain), `rdma-nics=16`, discovery `ok`.
"""),
            groups=_trn2_groups(), product_name="trn2.48xlarge", hostname="ip-10-0-4-31",
            ec2=_ec2("trn2.48xlarge", "i-0trn2000000000001"), **_TRN2_COMMON,
        ),
        NeuronHostSpec(
            name="trn2-48xlarge-no-neuron-ls",
            readme=_TRN2_README.format(title=" without neuron-ls", what=" where the Neuron tools package is not installed", extra="""
`commands/neuron-ls.json` records the tool as missing. Without it nothing maps `neuronN` to its
PCI function (the class devices have no PCI parent), so NUMA nodes, CPUs and EFA affinity are
unknown. Expected: still `neuron_cores` 64 and the torus links (from sysfs), discovery `degraded`.
"""),
            groups=_trn2_groups(), product_name="trn2.48xlarge", hostname="ip-10-0-4-32", neuron_ls="missing",
            ec2=_ec2("trn2.48xlarge", "i-0trn2000000000002"), **_TRN2_COMMON,
        ),
        NeuronHostSpec(
            name="trn2u-48xlarge-node1",
            readme=_TRN2_README.format(title=" (trn2u, node 1 of a Trn2 UltraServer)", what="u.48xlarge, node 1 of 4 of a Trn2 UltraServer", extra="""
UltraServer identity: the class-level files `/sys/class/neuron_device/server_id_4`
(`%016llx\\n`), `node_id_4` (`%d\\n`) and `ultraserver_mode` (`1,4`: X4 and standalone supported),
as the driver's pod election writes them (`v3/neuron_pelect.c`); DMI `product_name` is
`trn2u.48xlarge`. The server id is made up. `tests.support.neuron_hosts.ultraserver_node`
derives nodes 0, 2 and 3 of the same UltraServer from this snapshot.

Expected: `rayaccel.io/fabric-domain=<server id>`, `fabric-hosts=4`, `fabric-worker=1`,
`fabric-topology=4x4x4`, discovery `ok`.
"""),
            groups=_trn2_groups(), product_name="trn2u.48xlarge", hostname="ip-10-0-5-41",
            ultraserver={"server_id_4": "5f3a9c1e00b2d471\n", "node_id_4": "1\n",
                         "server_id_2": "5f3a9c1e00b2d470\n", "node_id_2": "1\n", "ultraserver_mode": "1,4\n"},
            ec2=_ec2("trn2u.48xlarge", "i-0trn2u00000000001"), **_TRN2_COMMON,
        ),
        NeuronHostSpec(
            name="inf2-xlarge-imds-no-token",
            readme="""
# inf2.xlarge in a container whose IMDS refuses the token request

The inf2.xlarge of `../inf2-xlarge`, seen from a container: no `/sys/class/dmi` (so no
network-free instance type), and the EC2 metadata service answers `PUT /latest/api/token` with
HTTP 403 (`metadata.json` `ec2_faults`; the exact status IMDS uses when it refuses is not
confirmed, any refusal takes the same path).

Expected: the device is still described from sysfs, `neuron-ls` and its PCI id
(`rayaccel.io/sku=inferentia2`, `neuron_cores` 2), the instance type is unknown, discovery
`degraded` naming the refused token request. Written by `tests/support/neuron_hosts.py`.
""",
            pci_device_id="0x7264", device_name="Inferentia2", arch_type="NDv2", arch_instance_type="Inf2",
            physical_cores=2, memory_bytes=32 * GIB, cpus={0: "0-3"}, connected=[[]],
            groups=[SwitchGroup(0x10, 0, [("neuron", 0)])],
            product_name=None, hostname="inf2-pod-7c9d",
            ec2=_ec2("inf2.xlarge", "i-0inf2000000000002"), ec2_faults={"api/token": {"status": 403}},
        ),
    ]
    return specs


SPECS = _specs()
EMPTY = "no-neuron-m7i-2xlarge"


def build_empty(dest: Path) -> Path:
    """An EC2 host without Neuron devices whose only AWS-vendor PCI function is its ENA NIC."""
    if dest.exists():
        shutil.rmtree(dest)
    root = dest / "rootfs"
    root.mkdir(parents=True)
    _pci_function(root, "/sys/devices/pci0000:00/0000:00:05.0", "0x1d0f", "0xec20", "0x020000", 0, "0-7")
    _write(root, "/sys/class/dmi/id/product_name", "m7i.2xlarge\n")
    _write(root, "/sys/class/dmi/id/sys_vendor", "Amazon EC2\n")
    _write(root, "/proc/sys/kernel/hostname", "ip-10-0-9-91\n")
    (dest / "metadata.json").write_text(json.dumps({"ec2": _ec2("m7i.2xlarge", "i-0m7i000000000001")}, indent=2,
                                                   sort_keys=True) + "\n")
    (dest / "env.json").write_text("{}\n")
    (dest / "README.md").write_text(
        "# m7i.2xlarge (no Neuron devices)\n\n"
        "An EC2 m7i.2xlarge: no `/dev/neuronN`, no `neuron_device` class, and one PCI function of the\n"
        "AWS vendor id `0x1d0f` that is not a Neuron device (ENA NIC `0xec20`, `reference/hardware.md`\n"
        "section 1.5). Detection must say False. Synthetic; written by\n"
        "`tests/support/neuron_hosts.py`.\n"
    )
    return dest


def ultraserver_node(snapshot: str | os.PathLike[str], dest: str | os.PathLike[str], node_id: int) -> Path:
    """A copy of UltraServer node ``snapshot`` as node ``node_id`` of the same UltraServer: same
    server id, its own ``node_id_4``/``node_id_2``, hostname and instance id; no golden."""
    src, dest = Path(snapshot), Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, symlinks=True)
    classdir = dest / "rootfs/sys/class/neuron_device"
    (classdir / "node_id_4").write_text(f"{node_id}\n")
    if (classdir / "node_id_2").exists():
        (classdir / "node_id_2").write_text(f"{node_id % 2}\n")
        # X2 pairs: nodes 0-1 and 2-3 (illustrative; only the 4-node ids are used as the domain).
        server2 = (classdir / "server_id_2").read_text().strip()
        (classdir / "server_id_2").write_text(f"{server2[:-1]}{node_id // 2}\n")
    hostname = dest / "rootfs/proc/sys/kernel/hostname"
    hostname.write_text(hostname.read_text().strip() + f"-n{node_id}\n")
    meta = json.loads((dest / "metadata.json").read_text())
    iid = meta["ec2"]["instance-id"]
    meta["ec2"]["instance-id"] = f"{iid[:-1]}{node_id}"
    (dest / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    (dest / "expected.json").unlink(missing_ok=True)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the Neuron host snapshots.")
    parser.add_argument("dest", help="folder to write the snapshots into (tests/data/hosts/neuron)")
    args = parser.parse_args(argv)
    for spec in SPECS:
        keep = Path(args.dest) / spec.name / "expected.json"
        saved = keep.read_text() if keep.exists() else None
        build(spec, Path(args.dest) / spec.name)
        if saved is not None:
            keep.write_text(saved)
        print(f"wrote {Path(args.dest) / spec.name}")
    keep = Path(args.dest) / EMPTY / "expected.json"
    saved = keep.read_text() if keep.exists() else None
    build_empty(Path(args.dest) / EMPTY)
    if saved is not None:
        keep.write_text(saved)
    print(f"wrote {Path(args.dest) / EMPTY}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
