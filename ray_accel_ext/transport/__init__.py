"""Transport plans: for a reservation, every rank's collective-library environment, in topology order.

    from ray_accel_ext.placement import reserve_domain
    from ray_accel_ext.transport import plan_reservation

    with reserve_domain("fabric", hosts=2, selector={"ray.io/accelerator-type": "GB200"}) as r:
        plan = plan_reservation(r)            # probes the reserved nodes once, then plans (pure)
        plan.ranks[3].env                     # {"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_MNNVL_ENABLE": "1", ...}
        plan.coordinator.address              # rank 0's host

Inside a worker, :func:`apply_plan` sets the worker's own variables (found by node id and the
accelerator ids Ray gave it; no metadata server is called). The planner itself
(:func:`plan_transport`) is pure: it takes :class:`HostFacts` per reserved host, so it runs on
recorded snapshots and at scale without Ray. Variables and their sources: ``docs/transport.md``.
"""

from __future__ import annotations

from .apply import apply_plan
from .collect import facts_of, plan_reservation
from .model import DomainPlan, HostFacts, HostPlan, RankPlan, ReservedDomain, TransportPlanError
from .plan import LIBRARIES, VARIABLES, TransportPlan, plan_transport

__all__ = [
    "HostFacts",
    "ReservedDomain",
    "TransportPlan",
    "RankPlan",
    "HostPlan",
    "DomainPlan",
    "TransportPlanError",
    "plan_transport",
    "plan_reservation",
    "facts_of",
    "apply_plan",
    "LIBRARIES",
    "VARIABLES",
]
