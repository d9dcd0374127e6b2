"""NeuronLink topology: device links (driver sysfs, neuron-ls, or the generation's torus table),
the host's fabric domain (Trn2 UltraServer or the host itself) and torus coordinates."""

from __future__ import annotations

import dataclasses

from ...host import Host
from ...hw.cloud import host_fabric
from ...model import Device, Fabric, Link, Problem
from ...problems import LINK_DOWN
from .read import CLASS_DIR, LsDevice, SysfsDevice, UltraServerIds
from .skus import Generation, InstanceType, NeuronTable

__all__ = ["links_of", "links_down", "note_unreadable", "fabric_of", "with_coords"]


def links_of(numbers: list[int], sysfs: dict[int, SysfsDevice], ls: dict[int, LsDevice] | None,
           gen: Generation | None, table: NeuronTable, problems: list[Problem | str]) -> tuple[Link, ...]:
    kind = gen.interconnect if gen and gen.interconnect else "neuronlink"
    index = {n: i for i, n in enumerate(numbers)}
    neighbours: dict[int, tuple[int, ...]] | None = None
    if numbers and all(n in sysfs and sysfs[n].connected is not None for n in numbers):
        neighbours = {n: sysfs[n].connected or () for n in numbers}
    elif ls is not None and all(n in ls and ls[n].connected is not None for n in numbers):
        neighbours = {n: ls[n].connected or () for n in numbers}
    elif gen is not None and gen.name in table.torus_neighbors and len(numbers) == len(table.torus_neighbors[gen.name]):
        neighbours = dict(zip(numbers, table.torus_neighbors[gen.name]))
    if neighbours is None:
        return ()
    pairs = {
        (min(index[a], index[b]), max(index[a], index[b]))
        for a, peers in neighbours.items()
        for b in peers
        if b in index and b != a
    }
    return tuple(Link(a=a, b=b, kind=kind) for a, b in sorted(pairs))


def links_down(numbers: list[int], sysfs: dict[int, SysfsDevice], ls: dict[int, LsDevice] | None,
               gen: Generation | None, instance: InstanceType | None) -> list[Problem]:
    """A ``link-down`` problem for each device listing fewer NeuronLink neighbours than its
    generation gives it (the SKU database's ``neuronlinks``; Trainium2: 4), as the driver's
    ``connected_devices`` or ``neuron-ls`` list them (never the packaged table). Only on a node
    with every device of its instance type: a smaller one has no full torus to compare with."""
    want = gen.neuronlinks if gen is not None else None
    if not want or instance is None or len(numbers) != instance.devices:
        return []
    out = []
    for index, n in enumerate(numbers):
        listed = sysfs[n].connected if n in sysfs and sysfs[n].connected is not None else None
        if listed is None and ls is not None and n in ls:
            listed = ls[n].connected
        active = len({p for p in listed or () if p != n})
        if listed is not None and active < want:
            out.append(Problem(code=LINK_DOWN, device=index, message=(
                f"neuron{n} lists {active} of its {want} NeuronLink neighbours; collectives through it "
                "take another path or hang")))
    return out


def note_unreadable(sysfs: dict[int, SysfsDevice], ls: dict[int, LsDevice] | None, gen: Generation | None,
                     links: tuple[Link, ...], problems: list[Problem | str]) -> None:
    """Root-only files degrade the description only when no other source covered them."""
    for dev in sysfs.values():
        for line in dev.unreadable:
            path = line.split(":", 1)[0]
            if path.endswith("/core_count") and (ls is not None or gen is not None):
                continue  # neuron-ls nc_count or the generation's physical core count stands in
            if path.endswith("/connected_devices") and (links or len(sysfs) <= 1):
                continue  # neuron-ls or the driver's own table gave the neighbours
            if path.endswith("/device_name") and gen is not None:
                continue
            problems.append(line)


def fabric_of(host: Host, table: NeuronTable, instance_type: str | None, us: UltraServerIds | None,
            gen: Generation | None, n_devices: int, problems: list[Problem | str]) -> Fabric:
    inst = table.instance(instance_type)
    plane = "4x4" if gen is not None and gen.topology == "2d-torus" and n_devices == 16 else None
    if us is not None:
        topology = inst.ultraserver_topology if inst and inst.ultraserver_topology and us.hosts == 4 else None
        if topology is None and plane:
            topology = f"{plane}x{us.hosts}"
        return Fabric(kind="ultraserver", id=us.server_id, hosts=us.hosts, worker=us.node_id,
                      topology=topology, product=instance_type)
    if inst is not None and inst.ultraserver_hosts:
        problems.append(
            f"{instance_type} is an UltraServer instance but {CLASS_DIR}/server_id_4 gives no server id; "
            "describing the host as its own domain"
        )
    return dataclasses.replace(host_fabric(host, problems), topology=plane, product=instance_type)


def with_coords(devices: list[Device], links: tuple[Link, ...], fabric: Fabric) -> list[Device]:
    """(row, col) in the 4x4 torus (+ the UltraServer node id) when the links are exactly that torus."""
    if len(devices) != 16 or not links:
        return devices
    torus = {tuple(sorted((i, (i // 4) * 4 + (i + 1) % 4))) for i in range(16)}
    torus |= {tuple(sorted((i, (i + 4) % 16))) for i in range(16)}
    if {(l.a, l.b) for l in links} != torus:
        return devices
    extra = (fabric.worker,) if fabric.kind == "ultraserver" else ()
    return [dataclasses.replace(d, coords=(d.index // 4, d.index % 4, *extra)) for d in devices]
