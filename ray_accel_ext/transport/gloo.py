"""Gloo (PyTorch's CPU collectives, also used for its barriers and object collectives).

``GLOO_SOCKET_IFNAME``: the interface holding the node's Ray address (an exact name, no ``=``
prefix). Source: https://pytorch.org/docs/stable/distributed.html#choosing-the-network-interface-to-use.
"""

from __future__ import annotations

from .context import PlanContext
from .model import HostView

__all__ = ["VARIABLES", "IDENTITY", "library", "applies", "host_env", "unit_env", "rank_env"]

IDENTITY = False  # no variable depends on the rank number
VARIABLES = {"GLOO_SOCKET_IFNAME": "https://pytorch.org/docs/stable/distributed.html#choosing-the-network-interface-to-use"}


def library(view: HostView) -> str:
    return "gloo"


def applies(view: HostView, ctx: PlanContext) -> bool:
    return bool(view.socket_ifname)


def host_env(view: HostView, ctx: PlanContext, domain: int) -> dict[str, str]:
    return {"GLOO_SOCKET_IFNAME": str(view.socket_ifname)}


def unit_env(view: HostView, ctx: PlanContext, units, devices) -> dict[str, str]:
    return {}


def rank_env(view: HostView, ctx: PlanContext, rank: int, local_rank: int) -> dict[str, str]:
    return {}
