"""``FakeBackend``: the reference backend the conformance suite tests itself against.

It reads a made-up but sysfs-shaped device class, so it needs no real hardware and exercises
every part of the contract (links, NUMA affinity, a fabric domain, device visibility)::

    /sys/class/fake_accel/hive                  fabric domain id (absent: the host is its own domain)
    /sys/class/fake_accel/accel<N>/uuid         stable device id
    /sys/class/fake_accel/accel<N>/numa_node    NUMA node (-1 unknown)
    /sys/class/fake_accel/accel<N>/local_cpulist
    /sys/class/fake_accel/accel<N>/links        space-separated peer indices
    /sys/class/fake_accel/accel<N>/memory_mib   memory per device

Snapshots of it ship with the suite under ``ray_accel_ext/conformance/data/hosts/fake_accel``.
``pytest --pyargs ray_accel_ext.conformance`` with no ``--accel-backend`` runs against it.
"""

from __future__ import annotations

import re

from ..backend import AcceleratorBackend, Capabilities
from ..errors import HostReadError
from ..host import Host
from ..hw.pci import parse_cpulist
from ..model import Device, Fabric, Link, NodeDescription, Problem, Sku
from ..problems import ProblemCode

__all__ = ["FakeBackend", "FAKE_CLASS", "PEER_MISSING"]

FAKE_CLASS = "/sys/class/fake_accel"
# A vendor's own problem code, declared on the backend class (docs/problems.md).
PEER_MISSING = ProblemCode(
    "fake-accel-peer-missing", "warning", "a fakelink names a peer device that does not exist",
    "reseat the fakelink bridge named in the message, then restart the Ray node",
)
_DEV_RE = re.compile(r"^accel(\d+)$")


class FakeBackend(AcceleratorBackend):
    """Devices of the made-up ``fake_accel`` class; pure, like every backend must be."""

    name = "fake_accel"
    resource_name = "fake_accel"
    label_prefix = "fake-accel.example.com"
    visible_devices_env_var = "FAKE_ACCEL_VISIBLE_DEVICES"
    problem_codes = (PEER_MISSING,)
    capabilities = Capabilities(
        topology_links=True, numa_affinity=True, fabric_domains=True, device_visibility=True
    )

    def detect(self, host: Host) -> bool:
        try:
            return any(_DEV_RE.match(n) for n in host.listdir(FAKE_CLASS))
        except HostReadError:
            return False

    def describe(self, host: Host) -> NodeDescription:
        names = sorted((n for n in host.listdir(FAKE_CLASS) if _DEV_RE.match(n)), key=lambda n: int(n[5:]))
        problems: list[Problem | str] = []
        devices: list[Device] = []
        links: set[tuple[int, int]] = set()
        memory = None
        for index, name in enumerate(names):
            base = f"{FAKE_CLASS}/{name}"
            numa, cpus = None, ()
            try:
                numa_text = host.read_optional(f"{base}/numa_node")
                numa = int(numa_text) if numa_text and int(numa_text) >= 0 else None
                cpus = parse_cpulist(host.read_optional(f"{base}/local_cpulist") or "")
                memory = int(host.read_optional(f"{base}/memory_mib") or 0) * (1 << 20) or memory
                peers = (host.read_optional(f"{base}/links") or "").split()
                links.update((min(index, int(p)), max(index, int(p))) for p in peers if int(p) != index)
            except (HostReadError, ValueError) as exc:
                problems.append(Problem.of(exc, f"{base}: {exc}", device=index))
            uuid = (host.read_optional(f"{base}/uuid") or name).strip()
            devices.append(Device(index=index, id=uuid, numa_node=numa, cpus=cpus))
        hive = (host.read_optional(f"{FAKE_CLASS}/hive") or "").strip()
        return NodeDescription(
            backend=self.name,
            sku=Sku(vendor="example", name="fake-accel-1", generation="gen1", memory_bytes=memory),
            resource_name=self.resource_name,
            resource_quantity=len(devices),
            devices=tuple(devices),
            interconnect="fakelink" if links else "pcie",
            links=tuple(Link(a=a, b=b, kind="fakelink") for a, b in sorted(links) if b < len(devices)),
            problems=tuple(problems) + tuple(
                Problem(code=PEER_MISSING.code, device=a, message=f"{FAKE_CLASS}/accel{a}/links: peer {b} does not exist")
                for a, b in sorted(links) if b >= len(devices)
            ),
            fabric=Fabric(kind="fake-hive", id=hive) if hive else None,
            attributes={f"{self.label_prefix}/driver": "fake-1.0"},
        )
