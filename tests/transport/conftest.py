"""Reserved hosts for transport-plan tests, from the recorded snapshots under tests/data/hosts.

Each snapshot is discovered once (its metadata fakes served on loopback); many-host domains are
copies of those facts with their own node id, hostname and fabric worker index
(:mod:`tests.support.transport_hosts`). Addresses come from 198.51.100.0/24 (RFC 5737
documentation range): they are data, never contacted.

The modules that run Ray (``test_bindings_integration.py``, ``test_train_integration.py``) share
one simulated cluster (:func:`ray_cluster`); each connects its driver for its own tests only.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

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


@pytest.fixture(scope="package")
def ray_cluster(tmp_path_factory):
    """A head without accelerators (2 CPUs), one GB200 NVLink domain of two trays (clique 51) and
    two TPU v5p-16 slices of two hosts each (``slice-b``, ``slice-a``), every node a ``ray start``
    through the start hook; started on first use, stopped after this package's tests. No driver is
    connected between modules (``test_plan_api.py`` checks what happens outside a Ray session)."""
    from ray_accel_ext.testing.cluster import SimulatedCluster
    from tests.support.domains import SNAPSHOTS, add_in_batches, gb200_domain, tpu_slice

    snaps = tmp_path_factory.mktemp("transport")
    specs = [(s, {"name": s.name}) for s in gb200_domain(snaps, 51, trays=2)]
    for name in ("slice-b", "slice-a"):
        specs += [(s, {"name": s.name}) for s in tpu_slice(snaps, name, 2, source=SNAPSHOTS / "tpu" / "gce-v5p-16-worker1")]
    with SimulatedCluster() as c:
        c.add_node(SNAPSHOTS / "nvidia_gpu" / "no-accelerators", name="head", num_cpus=2)
        add_in_batches(c, specs)
        yield c
