"""Reserved hosts from recorded snapshots, for planning transports without Ray.

:func:`snapshot_facts` discovers one host snapshot (its metadata fakes served, the same path the
start hook takes) and returns the :class:`~ray_accel_ext.transport.HostFacts` a live node would
publish: the labels and resources of its Ray spec, the descriptions, the snapshot's hostname. The
node id, address and interface are the caller's (a simulated cluster's or a test's).
:func:`replicate` copies those facts to many hosts of one domain for scale tests and benchmarks
(only the identity changes: node id, hostname, fabric worker index, and an address from 198.18.0.0/15,
the range RFC 2544 sets aside for benchmarks, which is never contacted).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from ray_accel_ext.host import open_host
from ray_accel_ext.hw.cloud import hostname
from ray_accel_ext.labels import FABRIC_DOMAIN, FABRIC_WORKER
from ray_accel_ext.model import Fabric, NodeDescription
from ray_accel_ext.testing.snapshots import run_snapshot
from ray_accel_ext.transport.model import HostFacts

__all__ = ["snapshot_facts", "replicate"]



def snapshot_facts(
    snapshot: str | os.PathLike[str],
    node_id: str,
    address: str,
    *,
    socket_ifname: str | None = "eth0",
    reserved: Mapping[str, float] | None = None,
) -> HostFacts:
    """The facts a node started from ``snapshot`` publishes, under the given identity."""
    inventory, spec = run_snapshot(snapshot, environ={})
    name = hostname(open_host(snapshot, environ={}))
    return HostFacts(node_id=node_id, address=address, labels=dict(spec.labels), resources=dict(spec.resources),
                     descriptions=inventory.descriptions, hostname=name, socket_ifname=socket_ifname,
                     reserved=dict(reserved) if reserved is not None else None)


def _with_worker(desc: NodeDescription, worker: int, hosts: int) -> NodeDescription:
    fabric = desc.fabric or Fabric(kind="host", id="")
    return dataclasses.replace(desc, fabric=dataclasses.replace(fabric, worker=worker, hosts=max(hosts, fabric.hosts)))


def replicate(template: HostFacts, count: int, *, domain: str | None = None) -> list[HostFacts]:
    """``count`` hosts of one domain that look like ``template`` (worker index 0..count-1)."""
    out = []
    for i in range(count):
        labels = dict(template.labels)
        labels[FABRIC_WORKER] = str(i)
        if domain is not None:
            labels[FABRIC_DOMAIN] = domain
        descriptions = tuple(_with_worker(d, i, count) for d in template.descriptions)
        if domain is not None:
            descriptions = tuple(dataclasses.replace(d, fabric=dataclasses.replace(d.fabric, id=domain))
                                 for d in descriptions)
        out.append(dataclasses.replace(template, node_id=f"{template.node_id}-{i:04d}",
                                       address=f"198.{18 + i // 65536 % 2}.{i // 256 % 256}.{i % 256}",
                                       hostname=f"{template.hostname or 'host'}-{i:04d}", labels=labels,
                                       descriptions=descriptions))
    return out
