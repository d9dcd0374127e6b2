"""Host ranks inside a domain: one stable order of a domain's hosts, and its actual size.

Every domain kind gets one. The hardware index is ``rayaccel.io/fabric-worker`` where a backend
publishes it: ``TPU_WORKER_ID`` on a TPU slice, the node index on a Trn2 UltraServer, NVML's
platform tray index on an NVLink domain (``nvmlPlatformInfo_v2_t.trayIndex``, with the chassis
serial as ``rayaccel.io/rack``, where the driver exposes it). Hosts are ordered:

1. by the hardware index alone when every host has one and no two share it (a slice, a one-rack
   NVLink domain): ``source="hardware"``;
2. by rack, then hardware index, when every host has one and (rack, index) is unique (an NVLink
   domain over several chassis, each numbering its trays from 0): ``source="hardware"``;
3. otherwise cluster-side (``source="cluster"``): hosts with an index first, then the rest by
   rack, hostname (digits compared as numbers, so ``tray2`` < ``tray10``) and node id.

At a level other than ``fabric`` (a rack, a block) the hosts are grouped by fabric domain first.
The order depends only on what the nodes publish, never on the order Ray lists them in, so every
caller computes the same ranks; ``size`` is the domain's alive hosts now, ``expected_hosts`` what
``rayaccel.io/fabric-hosts`` says it can have (an upper bound on NVLink domains, where NVML does
not tell the partition size).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..cluster.nodes import NodeView, node_views
from ..labels import FABRIC_DOMAIN, FABRIC_HOSTS, FABRIC_WORKER, RACK

__all__ = ["HostRank", "DomainRanks", "rank_domain", "rank_domains"]

_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class HostRank:
    """One host's place in its domain."""

    index: int
    node_id: str
    hostname: str
    hardware_index: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "node_id": self.node_id, "hostname": self.hostname,
                "hardware_index": self.hardware_index}


@dataclass(frozen=True)
class DomainRanks:
    """A domain's hosts in rank order (``hosts[0]`` is rank 0)."""

    key: str
    domain: str
    hosts: tuple[HostRank, ...]
    source: str
    expected_hosts: int | None = None

    @property
    def size(self) -> int:
        """Alive hosts of the domain now."""
        return len(self.hosts)

    def index_of(self, node_id: str) -> int | None:
        return next((h.index for h in self.hosts if h.node_id == node_id), None)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "domain": self.domain, "size": self.size, "expected_hosts": self.expected_hosts,
                "source": self.source, "hosts": [h.to_dict() for h in self.hosts]}


def _natural(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(text))


def _hardware_index(node: NodeView) -> int | None:
    text = node.labels.get(FABRIC_WORKER, "")
    return int(text) if text.isdigit() else None


def rank_domain(members: Iterable[Mapping[str, Any] | NodeView], key: str = FABRIC_DOMAIN, domain: str = "") -> DomainRanks:
    """Rank the hosts of one domain (the alive nodes whose ``key`` label is ``domain``)."""
    nodes = node_views(members)
    group = (lambda n: "") if key == FABRIC_DOMAIN else (lambda n: n.labels.get(FABRIC_DOMAIN, ""))
    indexed = {n.node_id: _hardware_index(n) for n in nodes}
    values = list(indexed.values())
    complete = bool(nodes) and all(v is not None for v in values)
    plain = [(group(n), indexed[n.node_id]) for n in nodes]
    racked = [(group(n), n.labels.get(RACK, ""), indexed[n.node_id]) for n in nodes]
    if complete and len(set(plain)) == len(plain):
        ordered, source = sorted(nodes, key=lambda n: (group(n), indexed[n.node_id], n.node_id)), "hardware"
    elif complete and len(set(racked)) == len(racked):
        ordered = sorted(nodes, key=lambda n: (group(n), n.labels.get(RACK, ""), indexed[n.node_id], n.node_id))
        source = "hardware"
    else:
        ordered = sorted(nodes, key=lambda n: (
            group(n), indexed[n.node_id] is None, n.labels.get(RACK, ""),
            indexed[n.node_id] if indexed[n.node_id] is not None else 0, _natural(n.hostname), n.node_id))
        source = "cluster"
    expected = [int(n.labels[FABRIC_HOSTS]) for n in nodes if n.labels.get(FABRIC_HOSTS, "").isdigit()]
    hosts = tuple(HostRank(i, n.node_id, n.hostname, indexed[n.node_id]) for i, n in enumerate(ordered))
    return DomainRanks(key, domain, hosts, source, max(expected) if expected and key == FABRIC_DOMAIN else None)


def rank_domains(nodes: Iterable[Mapping[str, Any] | NodeView], key: str = FABRIC_DOMAIN) -> dict[str, DomainRanks]:
    """Ranks of every domain at ``key`` (a level's label key) in a node table."""
    groups: dict[str, list[NodeView]] = {}
    for node in node_views(nodes):
        value = node.labels.get(key)
        if value:
            groups.setdefault(value, []).append(node)
    return {value: rank_domain(members, key, value) for value, members in sorted(groups.items())}
