"""A TPU subslice request as placement steps: the hosts of one aligned block of a slice. Pure.

``DomainRequest(subslice="2x2x1")`` asks for one sub-shape of a TPU slice, as Ray's
``ray.util.tpu.subslice_placement_group(subslice_topology=...)`` does (Ray PRs #64578, #65403).
The blocks come from what the slice's hosts publish (:mod:`..node.tpu_subslices`): the topology
(``ray.io/tpu-topology``), one host's chip block and the host grid. A shape every host of the slice
labels (``ray.io/tpu-subslice-<shape>``, Ray's shapes) is selected by that label: block ``i`` is the
hosts labelled ``i``. Any other shape of whole hosts (``4x2``, ``4x4x2``) is selected by worker id
(``rayaccel.io/fabric-worker in(...)``), blocks numbered the same way (x-minor). Each block becomes
one step for one slice; the steps are tried block by block, or only ``subslice_index``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..cluster.nodes import NodeView
from ..labels import FABRIC_WORKER, TPU_ATTR_CHIP_BLOCK, TPU_ATTR_HOST_BOUNDS, TPU_TOPOLOGY
from ..node.tpu_subslices import parse_shape, subslice_key, subslice_workers
from .choose import match_selector
from .request import DomainRequest

__all__ = ["expand_subslices", "subslice_workers", "parse_shape"]


def _matching(step: DomainRequest, nodes: Sequence[NodeView]) -> list[NodeView]:
    return [n for n in nodes if match_selector(n.labels, step.selector) and n.labels.get(TPU_TOPOLOGY)]


def _geometry(step: DomainRequest, nodes: Sequence[NodeView]) -> tuple[str, str, str]:
    found = {(n.labels.get(TPU_TOPOLOGY), n.labels.get(TPU_ATTR_CHIP_BLOCK), n.labels.get(TPU_ATTR_HOST_BOUNDS))
             for n in nodes}
    found = {g for g in found if all(g)}
    if len(found) != 1:
        raise ValueError(f"subslice {step.subslice}: the TPU slices matching {dict(step.selector)} have "
                         f"{'no' if not found else 'more than one'} published geometry (topology, "
                         f"{TPU_ATTR_CHIP_BLOCK}, {TPU_ATTR_HOST_BOUNDS}); narrow the selector to one topology")
    return found.pop()


def expand_subslices(steps: Sequence[DomainRequest], nodes: Sequence[NodeView]) -> list[DomainRequest]:
    """Every subslice step replaced by one step per block of hosts; other steps kept."""
    out: list[DomainRequest] = []
    for step in steps:
        if step.subslice is None:
            out.append(step)
            continue
        matching = _matching(step, nodes)
        topology, block, hosts = _geometry(step, matching)
        groups = subslice_workers(topology, block, hosts, step.subslice)
        indices = range(len(groups)) if step.subslice_index is None else [step.subslice_index]
        if step.subslice_index is not None and not 0 <= step.subslice_index < len(groups):
            raise ValueError(f"subslice_index {step.subslice_index} is outside 0..{len(groups) - 1} for "
                             f"{step.subslice} blocks of {topology}")
        key = subslice_key(step.subslice, topology)
        labelled = all(key in n.labels for n in matching)
        share = step.deadline_s / len(indices)
        for i in indices:
            pick = {key: str(i)} if labelled else {FABRIC_WORKER: f"in({','.join(map(str, groups[i]))})"}
            selector = {**step.selector, TPU_TOPOLOGY: topology, **pick}
            out.append(replace(step, hosts=len(groups[i]), selector=selector, subslice=None, subslice_index=None,
                               complete=False, deadline_s=share, name=f"{step.label()}[{i}]"))
    return out
