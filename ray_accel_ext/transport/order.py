"""Topology order: which device follows which inside a host, and which host follows which.

Ranks are numbered host by host (the domain's host index, ``rayaccel.io/fabric-worker``, then
hostname), and inside a host along a path through the device fabric that keeps neighbours
adjacent, so consecutive ranks (what ring algorithms connect) share an NVLink, NeuronLink or ICI
link whenever the fabric allows it:

* the path starts at the lowest device index and always steps to the unvisited neighbour with the
  most bonded links (``Link.lanes``), ties by lowest index; with no unvisited neighbour left it
  jumps to the lowest unvisited index;
* neighbours are the description's ``links``; a host without links but with chip coordinates
  (TPU) uses the ICI mesh: chips whose coordinates differ by one in one dimension.

On an all-to-all fabric (NVSwitch: every pair linked) the path is plain index order, which is also
the order Ray Train ranks the workers of one node in (lowest GPU id first, ``WorkerGroup.
_sort_workers_by_gpu_id_grouped_by_node`` in ``ray/train/v2/_internal/execution/worker_group/
worker_group.py``, Ray 2.60). A 2x2 TPU host gives 0, 1, 3, 2 (a ring); on a Trn2 4x4 torus
(wrap-around links) every step of the path is a NeuronLink: 0 1 2 3 7 4 5 6 10 9 8 11 15 12 13 14.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..hw.pci import format_cpulist
from ..model import Device, Link

__all__ = ["device_order", "neighbours", "host_sort_key"]


def neighbours(devices: Sequence[Device], links: Sequence[Link]) -> dict[int, dict[int, int]]:
    """Device index -> {neighbour index: lanes}, from links, else from chip coordinates."""
    out: dict[int, dict[int, int]] = {d.index: {} for d in devices}
    for link in links:
        if link.a in out and link.b in out and link.a != link.b:
            lanes = max(1, int(link.lanes))
            out[link.a][link.b] = max(out[link.a].get(link.b, 0), lanes)
            out[link.b][link.a] = max(out[link.b].get(link.a, 0), lanes)
    if links or not all(d.coords for d in devices):
        return out
    by_coords = {tuple(d.coords): d.index for d in devices if d.coords}
    for d in devices:
        coords = tuple(d.coords or ())
        for dim in range(len(coords)):
            for step in (-1, 1):
                other = by_coords.get(coords[:dim] + (coords[dim] + step,) + coords[dim + 1:])
                if other is not None:
                    out[d.index][other] = 1
    return out


def device_order(devices: Sequence[Device], links: Sequence[Link]) -> list[int]:
    """Device indices along the neighbour-keeping path (see the module doc)."""
    graph = neighbours(devices, links)
    remaining = sorted(graph)
    order: list[int] = []
    visited: set[int] = set()
    current: int | None = None
    while len(order) < len(remaining):
        if current is None:
            current = next(i for i in remaining if i not in visited)
        order.append(current)
        visited.add(current)
        options = [(-lanes, idx) for idx, lanes in graph[current].items() if idx not in visited]
        current = min(options)[1] if options else None
    return order


def host_sort_key(worker: int | None, hostname: str, node_id: str) -> tuple[bool, int, str, str]:
    """Hosts of one domain: by fabric worker index, then hostname, then node id. A host whose index
    the hardware does not give (``None``: a GB200 tray without NVML platform info) comes after the
    indexed ones, so one domain may mix hosts seen through their description and through labels."""
    return (worker is None, worker or 0, hostname, node_id)


def unit_ranges(units: Sequence[int]) -> str:
    """``0-3,8,10-11`` for a list of ids (the range syntax Neuron's visible-cores variable takes)."""
    return format_cpulist(units)


def labels_int(labels: Mapping[str, str], key: str, default: int | None) -> int | None:
    """Label ``key`` as a non-negative integer, ``default`` when absent or not one."""
    text = str(labels.get(key, ""))
    return int(text) if text.isdigit() else default
