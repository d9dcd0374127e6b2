"""Domain-aware placement: reserve hosts inside ONE domain, all or nothing, with a fallback chain.

A *domain* is the set of alive nodes that share one value of a level's label key:

=========  ================================  =============================================
level      label key                         what the backends publish
=========  ================================  =============================================
fabric     ``rayaccel.io/fabric-domain``     TPU slice, multi-node NVLink domain, Trn2
                                             UltraServer; a lone host is its own domain
rack       ``rayaccel.io/rack``              provider rack (GCP sub-block, AWS rack node)
block      ``rayaccel.io/block``             provider block
=========  ================================  =============================================

Any other label key (``ray.io/tpu-slice-name``) can be passed as the level too.

How one step is placed (see ``docs/placement.md``):

1. read the inventory (``ray.nodes()``: labels and total resources of alive nodes);
2. :func:`choose_domain` (pure, linear in the node count) picks the best-fitting free domain
   whose matching nodes can hold every bundle; a request no domain could ever hold fails at once
   with :class:`~ray_accel_ext.errors.WouldSplitDomain` (no waiting);
3. the domain is *claimed* in a cluster-wide registry (a named detached actor, so concurrent
   callers in any driver or worker never get the same domain or an overlapping node set; it
   rebuilds its claims from Ray's placement-group table when it restarts, and callers waiting
   for a domain are served in the order they started waiting: :mod:`.claims`);
4. a placement group is created whose every bundle carries ``bundle_label_selector``
   ``{<level key>: <domain>, **selector}``, so Ray itself keeps the group inside the domain, plus
   (on the tested Ray range) ``topology_strategy={<level key>: "STRICT_PACK"}``;
5. the group is awaited until the step's deadline; on timeout it is removed, the claim dropped and
   the next domain tried; when the step runs out of time or domains, the next step of the chain;
6. the ready reservation lists its bundles in rank order (``Reservation.ranks``, ``rank0``): the
   domain's host order from hardware indices where the hosts publish them, else a stable
   cluster-side order (:mod:`.ranks`).

Every placement emits one ``placement`` JSON log line and Ray metrics
(:mod:`ray_accel_ext.telemetry`); the cluster's state gauges come from one metrics process
(:mod:`ray_accel_ext.cluster.exporter`).
"""

from __future__ import annotations

from ..cluster.nodes import NodeView, node_views
from .choose import DomainChoice, choose_domain, match_selector
from .claims import CLAIMS_ACTOR, CLAIMS_NAMESPACE, claims_queue, claims_snapshot
from .ranks import DomainRanks, HostRank, rank_domain, rank_domains
from .request import LEVELS, DomainRequest, level_key
from .reservation import (
    BundleRank,
    Reservation,
    read_inventory,
    reserve,
    reserve_domain,
    use_topology_strategy,
)

__all__ = [
    "LEVELS",
    "level_key",
    "DomainRequest",
    "DomainChoice",
    "Reservation",
    "BundleRank",
    "DomainRanks",
    "HostRank",
    "rank_domain",
    "rank_domains",
    "NodeView",
    "choose_domain",
    "match_selector",
    "node_views",
    "read_inventory",
    "reserve",
    "reserve_domain",
    "use_topology_strategy",
    "claims_snapshot",
    "claims_queue",
    "CLAIMS_ACTOR",
    "CLAIMS_NAMESPACE",
]
