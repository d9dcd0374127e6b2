"""Slice arithmetic from facts: how many hosts this host's TPU slice has and how its chips are
laid out. Pure: no I/O.

The number of hosts is not a constant of the TPU generation: it is the chips of the slice (its
accelerator type) divided by the chips of one host. Those come, first found wins, from

1. the chip block the TPU runtime is configured with: ``TPU_CHIPS_PER_HOST_BOUNDS`` /
   ``CHIPS_PER_HOST_BOUNDS`` (GKE's TPU device plugin sets both, hardware.md 4.3) or tpu-env
   ``CHIPS_PER_HOST_BOUNDS`` (a TPU VM, hardware.md 4.2);
2. the machine type, whose ``-<N>t`` suffix is the host's chips (``ct6e-standard-4t``,
   ``ct5lp-hightpu-8t``; https://cloud.google.com/tpu/docs/v6e, .../v5e);
3. the chips found on this host.

A slice smaller than one host is one (sub-)host, as Ray counts it ("a sub-host is still treated
as a host", ``TPUAcceleratorManager.get_num_workers_in_current_tpu_pod``). Whenever
``hosts x chips found on this host != chips in the slice``, or two sources disagree, the reason
(naming both numbers) goes into ``problems`` and the node is degraded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ...model import Problem
from .ici import (
    IciLayout,
    Triple,
    chip_block_for,
    parse_bounds,
    parse_wrap,
    wrap_rule,
)
from .topology import AcceleratorType, Topology

__all__ = ["HostFacts", "SliceLayout", "host_facts", "machine_type_chips", "slice_layout"]

# Cloud TPU machine types: ct4p-hightpu-4t, ct5lp-hightpu-1t/4t/8t, ct5p-hightpu-4t,
# ct6e-standard-1t/4t/8t (https://cloud.google.com/tpu/docs/v5e, /v5p, /v6e), tpu7x-standard-4t.
_MACHINE_RE = re.compile(r"^(?:ct\d+[a-z]*|tpu\d+[a-z]*)-[a-z0-9]+-(\d{1,2})t$", re.ASCII)
_TRUE = ("1", "true", "yes")


def machine_type_chips(machine_type: str | None) -> int | None:
    """Chips of a Cloud TPU machine type (``projects/1/machineTypes/ct6e-standard-4t`` -> 4)."""
    if not machine_type:
        return None
    m = _MACHINE_RE.match(machine_type.rsplit("/", 1)[-1].strip().lower())
    return int(m.group(1)) if m and int(m.group(1)) > 0 else None


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What this host says about its place in the slice, each with where it came from."""

    chips_seen: int
    chip_block: Triple | None = None
    chip_block_source: str | None = None
    host_bounds: Triple | None = None
    host_bounds_source: str | None = None
    machine_type: str | None = None
    wrap: tuple[bool, bool, bool] | None = None
    wrap_source: str | None = None
    twisted: bool = False
    visible_subset: bool = False  # TPU_VISIBLE_CHIPS names a subset of the host's chips


def _first(sources: list[tuple[str, Mapping[str, str]]], keys: tuple[str, ...]) -> tuple[str | None, str | None]:
    for label, values in sources:
        for key in keys:
            if values.get(key):
                return values[key], f"{label}{key}"
    return None, None


def host_facts(chips_seen: int, env: Mapping[str, str], tpu_env: Mapping[str, str],
               machine_type: str | None, problems: list[Problem | str]) -> HostFacts:
    """Collect the layout facts of the GKE variables (``env``), tpu-env and the machine type."""
    sources = [("", env), ("tpu-env ", tpu_env)]
    block_text, block_src = _first(sources, ("TPU_CHIPS_PER_HOST_BOUNDS", "CHIPS_PER_HOST_BOUNDS"))
    hosts_text, hosts_src = _first(sources, ("TPU_HOST_BOUNDS", "HOST_BOUNDS"))
    wrap_text, wrap_src = _first(sources, ("TPU_TOPOLOGY_WRAP", "WRAP"))
    alt_text, _ = _first(sources, ("TPU_TOPOLOGY_ALT", "ALT"))
    out = {}
    for name, text, src, parse in (("chip_block", block_text, block_src, parse_bounds),
                                   ("host_bounds", hosts_text, hosts_src, parse_bounds),
                                   ("wrap", wrap_text, wrap_src, parse_wrap)):
        value = parse(text)
        if text and value is None:
            problems.append(f"{src}={text[:40]!r} is not three comma-separated values; ignored")
        out[name], out[f"{name}_source"] = value, (src if value is not None else None)
    return HostFacts(
        chips_seen=chips_seen, machine_type=machine_type,
        twisted=(alt_text or "").strip().lower() in _TRUE,
        visible_subset=bool(env.get("TPU_VISIBLE_CHIPS", "").strip()), **out,
    )


@dataclass(frozen=True, slots=True)
class SliceLayout:
    """The slice as this host sees it: chips per host, hosts, and (when the topology and the chip
    block are known and agree) the chip grid over the hosts."""

    accelerator_type: AcceleratorType
    chips_per_host: int
    chips_per_host_source: str
    hosts: int
    ici: IciLayout | None
    twisted: bool = False


def _chips_per_host(acc: AcceleratorType, facts: HostFacts, problems: list[Problem | str]) -> tuple[int, str]:
    declared: list[tuple[int, str]] = []
    if facts.chip_block is not None:
        declared.append((math.prod(facts.chip_block), f"{facts.chip_block_source}={','.join(map(str, facts.chip_block))}"))
    machine = machine_type_chips(facts.machine_type)
    if machine is not None:
        declared.append((machine, f"machine type {facts.machine_type.rsplit('/', 1)[-1]}"))
    if len(declared) == 2 and declared[0][0] != declared[1][0]:
        # GKE and tpu-env give the block the runtime uses (a sub-host allocation's, too): it wins.
        (n1, s1), (n2, s2) = declared
        if not (n1 < n2 and (facts.visible_subset or n1 == acc.chips)):
            problems.append(f"chips per host: {s1} says {n1}, {s2} says {n2}; using {n1}")
    if declared:
        return declared[0]
    if facts.chips_seen > 0:
        return facts.chips_seen, "chips on this host"
    return acc.nominal_chips_per_host, f"the usual {acc.nominal_chips_per_host}-chip host of {acc.text}"


def slice_layout(acc: AcceleratorType, topology: Topology | None, facts: HostFacts,
                 problems: list[Problem | str]) -> SliceLayout:
    """Hosts and chip grid of ``acc`` (topology ``topology``, when known) seen from this host."""
    per_host, source = _chips_per_host(acc, facts, problems)
    in_slice = min(per_host, acc.chips)  # a sub-host slice uses part of its host
    hosts = -(-acc.chips // per_host)
    seen = facts.chips_seen
    if seen and hosts * seen != acc.chips:
        via = "" if source == "chips on this host" else f" ({per_host} chips per host from {source})"
        problems.append(f"slice arithmetic: {acc.text} has {acc.chips} chips, but {hosts} host(s) x {seen} "
                        f"chips on this host = {hosts * seen}{via}")
    ici = _ici(acc, topology, facts, in_slice, hosts, problems) if topology is not None else None
    return SliceLayout(acc, per_host, source, hosts, ici, facts.twisted)


def _ici(acc: AcceleratorType, topology: Topology, facts: HostFacts, in_slice: int, hosts: int,
         problems: list[Problem | str]) -> IciLayout | None:
    block = facts.chip_block or chip_block_for(in_slice)
    if block is None:
        problems.append(f"no known chip layout for {in_slice} chips per host; chip coordinates and links left out")
        return None
    topo = topology.bounds3
    if any(t % b for t, b in zip(topo, block)):
        problems.append(f"topology {topology.text} does not divide into hosts of {'x'.join(map(str, block))} chips; "
                        "chip coordinates and links left out")
        return None
    host_bounds = (topo[0] // block[0], topo[1] // block[1], topo[2] // block[2])
    if facts.host_bounds is not None and facts.host_bounds != host_bounds:
        problems.append(f"{facts.host_bounds_source}={','.join(map(str, facts.host_bounds))}, but topology "
                        f"{topology.text} over {'x'.join(map(str, block))}-chip hosts gives "
                        f"{','.join(map(str, host_bounds))}; chip coordinates and links left out")
        return None
    if math.prod(host_bounds) != hosts:
        return None  # the slice arithmetic above already named the disagreement
    wrap = facts.wrap if facts.wrap is not None else wrap_rule(acc.generation.name, topo)
    return IciLayout(topology=topo, dims=len(topology.dims), chip_block=block, host_bounds=host_bounds, wrap=wrap)
