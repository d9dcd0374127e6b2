"""A TPU subslice request as placement steps: the hosts of one aligned block of a slice. Pure.

``DomainRequest(subslice="2x2x1")`` asks for one sub-shape of a TPU slice, as Ray's
``ray.util.tpu.subslice_placement_group(subslice_topology=...)`` does (Ray PRs #64578, #65403).
The slice's geometry comes from what its hosts publish: the topology (``ray.io/tpu-topology``),
the chip block of one host (``tpu.rayaccel.io/chips-per-host-bounds``) and the host grid
(``tpu.rayaccel.io/host-bounds``). The sub-shape over the chip block is a block of hosts; the
slice tiles into such blocks, numbered x-minor (index = x + X*y + X*Y*z, the order of the TPU
runtime and of JAX's device mesh; Ray 2.60's ``_get_physical_worker_id_from_coords`` reads the
axes in another order, docs/tpu.md). A worker's place in the host grid is its id in the same
x-minor order. Each block becomes one step that asks for its workers
(``rayaccel.io/fabric-worker in(...)``) of one slice; the steps are tried block by block, or only
``subslice_index``'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from ..cluster.nodes import NodeView
from ..labels import FABRIC_WORKER, TPU_ATTR_PREFIX, TPU_TOPOLOGY
from .choose import match_selector
from .request import DomainRequest

__all__ = ["expand_subslices", "subslice_workers", "parse_shape"]

CHIP_BLOCK = f"{TPU_ATTR_PREFIX}/chips-per-host-bounds"
HOST_BOUNDS = f"{TPU_ATTR_PREFIX}/host-bounds"


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"2x4"`` -> (2, 4, 1); ``"2x2x2"`` -> (2, 2, 2). Raises ValueError."""
    parts = text.strip().lower().split("x")
    if not 2 <= len(parts) <= 3 or not all(p.isascii() and p.isdecimal() and int(p) > 0 for p in parts):
        raise ValueError(f"not a TPU shape: {text!r} (expected AxB or AxBxC)")
    dims = [int(p) for p in parts] + [1] * (3 - len(parts))
    return dims[0], dims[1], dims[2]


def subslice_workers(topology: str, chip_block: str, host_bounds: str, shape: str) -> list[tuple[int, ...]]:
    """The worker ids of every ``shape`` block of a slice, block index order (x-minor)."""
    topo, block, hosts, sub = (parse_shape(t) for t in (topology, chip_block, host_bounds, shape))
    if any(s > t for s, t in zip(sub, topo)) or any(t % s for s, t in zip(sub, topo)):
        raise ValueError(f"subslice {shape} does not tile topology {topology}")
    if any(s % b for s, b in zip(sub, block)):
        raise ValueError(f"subslice {shape} is not whole hosts of {chip_block.replace(',', 'x')} chips")
    per = tuple(s // b for s, b in zip(sub, block))  # hosts per block, per axis
    counts = tuple(h // p for h, p in zip(hosts, per))
    out = []
    for index in range(math.prod(counts)):
        bx, by, bz = index % counts[0], index // counts[0] % counts[1], index // (counts[0] * counts[1])
        out.append(tuple(sorted(
            (bx * per[0] + x) + hosts[0] * (by * per[1] + y) + hosts[0] * hosts[1] * (bz * per[2] + z)
            for z in range(per[2]) for y in range(per[1]) for x in range(per[0]))))
    return out


def _geometry(step: DomainRequest, nodes: Sequence[NodeView]) -> tuple[str, str, str]:
    found = {(n.labels.get(TPU_TOPOLOGY), n.labels.get(CHIP_BLOCK), n.labels.get(HOST_BOUNDS))
             for n in nodes if match_selector(n.labels, step.selector) and n.labels.get(TPU_TOPOLOGY)}
    found = {g for g in found if all(g)}
    if len(found) != 1:
        raise ValueError(f"subslice {step.subslice}: the TPU slices matching {dict(step.selector)} have "
                         f"{'no' if not found else 'more than one'} published geometry (topology, "
                         f"{CHIP_BLOCK}, {HOST_BOUNDS}); narrow the selector to one topology")
    return found.pop()


def expand_subslices(steps: Sequence[DomainRequest], nodes: Sequence[NodeView]) -> list[DomainRequest]:
    """Every subslice step replaced by one step per block of workers; other steps kept."""
    out: list[DomainRequest] = []
    for step in steps:
        if step.subslice is None:
            out.append(step)
            continue
        topology, block, hosts = _geometry(step, nodes)
        groups = subslice_workers(topology, block, hosts, step.subslice)
        indices = range(len(groups)) if step.subslice_index is None else [step.subslice_index]
        if step.subslice_index is not None and not 0 <= step.subslice_index < len(groups):
            raise ValueError(f"subslice_index {step.subslice_index} is outside 0..{len(groups) - 1} for "
                             f"{step.subslice} blocks of {topology}")
        share = step.deadline_s / len(indices)
        for i in indices:
            workers = ",".join(map(str, groups[i]))
            selector = {**step.selector, TPU_TOPOLOGY: topology, FABRIC_WORKER: f"in({workers})"}
            out.append(replace(step, hosts=len(groups[i]), selector=selector, subslice=None, subslice_index=None,
                               complete=False, deadline_s=share, name=f"{step.label()}[{i}]"))
    return out
