"""What every library module sees while the plan is built: the plan-wide facts of one reservation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..model import PATH_CLASSES, Device, Nic
from .model import HostView

__all__ = ["PlanContext", "c2c_nics", "nearest_nics", "worst_path"]

DEFAULT_PORTS: Mapping[str, int] = {
    # Ray's default (ray/_private/accelerators/tpu.py DEFAULT_MEGASCALE_PORT, Ray 2.60).
    "megascale": 8081,
    # torch-xla's default root port for the Neuron runtime (torch_xla/_internal/neuron.py).
    "neuron": 62182,
}


@dataclass(frozen=True, slots=True)
class PlanContext:
    """Plan-wide facts: world size, coordinator, domains, ports, per-rank unit counts, and the
    switches that must be equal on every rank of one communicator (multi-slice, multi-node NVLink)."""

    world_size: int
    coordinator: str
    num_domains: int
    tpu_multislice: bool
    tpu_shared_hosts: bool
    multi_node_nvlink: bool
    reserved_in_fabric: Mapping[str, int]
    ports: Mapping[str, int]
    units_per_rank_csv: str


def nearest_nics(view: HostView, devices: tuple[Device, ...], kinds: tuple[str, ...]) -> list[tuple[Nic, str]]:
    """The NICs of ``kinds`` nearest ``devices`` (each device's best path class), first seen first."""
    out: list[tuple[Nic, str]] = []
    seen: set[str] = set()
    for device in devices:
        for path in device.nics:
            nic = view.nics.get(path.nic)
            if nic is None or nic.kind not in kinds or nic.name in seen:
                continue
            seen.add(nic.name)
            out.append((nic, path.path))
    return out


def c2c_nics(view: HostView, devices: tuple[Device, ...], kinds: tuple[str, ...]) -> list[Nic] | None:
    """On a Grace host (``cpu_link`` ``c2c``): the NICs of ``kinds`` on each device's NUMA node, by
    name, which NCCL ranks ``P2C`` (C2C to the CPU, then PHB; NVIDIA/nccl ``src/graph/paths.cc``)
    while nvidia-smi says ``SYS``. None elsewhere, or when a device's Grace has no such NIC."""
    if view.cpu_link != "c2c" or not devices:
        return None
    out: list[Nic] = []
    for device in devices:
        mine = [n for n in sorted(view.nics.values(), key=lambda n: n.name)
                if n.kind in kinds and device.numa_node is not None and n.numa_node == device.numa_node]
        if not mine:
            return None
        out += [n for n in mine if n not in out]
    return out


def worst_path(devices: tuple[Device, ...], view: HostView, kinds: tuple[str, ...]) -> str | None:
    """The farthest of each device's nearest-NIC path class (None when a device has no such NIC)."""
    worst = -1
    for device in devices:
        best = min((PATH_CLASSES.index(p.path) for p in device.nics
                    if p.nic in view.nics and view.nics[p.nic].kind in kinds), default=None)
        if best is None:
            return None
        worst = max(worst, best)
    return PATH_CLASSES[worst] if worst >= 0 else None
