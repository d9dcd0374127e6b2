"""UCX (UCC, MPI, NIXL over UCX): the rank's nearest InfiniBand/RoCE devices as ``<hca>:<port>``.

Port 1 is the port discovery reads (``/sys/class/infiniband/<hca>/ports/1``). Source: Open MPI's
UCX guide, https://docs.open-mpi.org/en/v5.0.0/tuning-apps/networking/ib-and-roce.html
(``UCX_NET_DEVICES=mlx5_0:1``) and UCX's FAQ, https://openucx.readthedocs.io/en/master/faq.html.
"""

from __future__ import annotations

from .context import PlanContext, c2c_nics, nearest_nics
from .model import HostView

__all__ = ["VARIABLES", "IDENTITY", "library", "applies", "host_env", "unit_env", "rank_env"]

IDENTITY = False  # no variable depends on the rank number
VARIABLES = {"UCX_NET_DEVICES": "https://docs.open-mpi.org/en/v5.0.0/tuning-apps/networking/ib-and-roce.html"}
IB_KINDS = ("infiniband", "roce")


def library(view: HostView) -> str:
    return "ucx"


def applies(view: HostView, ctx: PlanContext) -> bool:
    return not view.nic_kinds.isdisjoint(IB_KINDS)


def host_env(view: HostView, ctx: PlanContext, domain: int) -> dict[str, str]:
    return {}


def unit_env(view: HostView, ctx: PlanContext, units, devices) -> dict[str, str]:
    local = c2c_nics(view, devices, IB_KINDS)  # a Grace host: NCCL's P2C NICs, not nvidia-smi's all-SYS
    nics = local if local else [nic for nic, _ in nearest_nics(view, devices, IB_KINDS)]
    names = [f"{nic.name}:1" for nic in nics]
    return {"UCX_NET_DEVICES": ",".join(names)} if names else {}


def rank_env(view: HostView, ctx: PlanContext, rank: int, local_rank: int) -> dict[str, str]:
    return {}
