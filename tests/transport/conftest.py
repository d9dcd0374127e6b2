"""Reserved hosts for transport-plan tests, from the recorded snapshots under tests/data/hosts.

Each snapshot is discovered once (its metadata fakes served on loopback); many-host domains are
copies of those facts with their own node id, hostname and fabric worker index
(:mod:`tests.support.transport_hosts`). Addresses come from 198.51.100.0/24 (RFC 5737
documentation range): they are data, never contacted.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ray_accel_ext.transport import HostFacts, ReservedDomain
from tests.support.transport_hosts import replicate, snapshot_facts

HOSTS = Path(__file__).resolve().parents[1] / "data" / "hosts"


@functools.cache
def template(rel: str) -> HostFacts:
    """The facts of snapshot ``rel`` (``nvidia_gpu/h100-sxm-8gpu-dgx``) as node ``<name>``."""
    return snapshot_facts(HOSTS / rel, rel.rsplit("/", 1)[-1], "198.51.100.1")


def domain(rel: str, hosts: int, name: str = "d0", **reserved) -> ReservedDomain:
    """``hosts`` copies of a snapshot as one reserved domain (``reserved`` per host if given)."""
    facts = []
    for i, f in enumerate(replicate(template(rel), hosts, domain=name)):
        facts.append(HostFacts(node_id=f"{name}-n{i}", address=f"198.51.100.{10 + i + 20 * int(name[-1:] or 0)}",
                               labels=f.labels, resources=f.resources, descriptions=f.descriptions,
                               hostname=f"{name}-host{i}", socket_ifname="eth0", reserved=reserved or None))
    return ReservedDomain(name, tuple(facts))
