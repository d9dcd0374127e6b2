"""TPU multi-slice (libtpu's megascale over the data-center network), for plans of 2+ TPU slices.

Every rank of slice ``k`` gets ``MEGASCALE_SLICE_ID=k``, ``MEGASCALE_NUM_SLICES``,
``MEGASCALE_COORDINATOR_ADDRESS`` (the address of slice 0's first host, rank 0's) and
``MEGASCALE_PORT`` (8081). These are the values Ray's own ``ray.util.tpu.get_tpu_coordinator_env_vars``
returns for ``JaxTrainer``. When several ranks share a TPU host, each takes port 8081 plus its
local rank and the coordinator address carries the base port (``<address>:8081``), as Ray's Torch
TPU path does (``ray/train/torch/config.py _set_tpu_multislice_env_vars``, Ray 2.60). A GKE TPU7x
pod's TPU containers share one network namespace: container ``c`` (``tpu.rayaccel.io/process-index``)
takes ``8081 + c``, as the KubeRay TPU webhook sets ``MEGASCALE_PORT`` (``main.go``,
``megascalePortBase``). GKE's JobSet sets the same
four for multi-slice workloads. A single slice needs none (libtpu reads ``TPU_WORKER_ID`` and
``TPU_WORKER_HOSTNAMES``, which the platform sets).

Sources: https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-multislice,
``ray/util/tpu.py`` (Ray 2.60).
"""

from __future__ import annotations

from .context import PlanContext
from .model import HostView

__all__ = ["VARIABLES", "IDENTITY", "library", "applies", "host_env", "unit_env", "rank_env"]

_GKE = "https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-multislice"
IDENTITY = True  # MEGASCALE_PORT follows the local rank
VARIABLES = {
    "MEGASCALE_COORDINATOR_ADDRESS": _GKE,
    "MEGASCALE_NUM_SLICES": _GKE,
    "MEGASCALE_SLICE_ID": _GKE,
    "MEGASCALE_PORT": _GKE,
}


def library(view: HostView) -> str:
    return "megascale"


def applies(view: HostView, ctx: PlanContext) -> bool:
    return ctx.tpu_multislice and view.fabric_kind == "tpu-slice"


def host_env(view: HostView, ctx: PlanContext, domain: int) -> dict[str, str]:
    return {
        "MEGASCALE_COORDINATOR_ADDRESS": (
            f"{ctx.coordinator}:{ctx.ports['megascale']}" if ctx.tpu_shared_hosts else ctx.coordinator),
        "MEGASCALE_NUM_SLICES": str(ctx.num_domains),
        "MEGASCALE_SLICE_ID": str(domain),
    }


def unit_env(view: HostView, ctx: PlanContext, units, devices) -> dict[str, str]:
    return {}


def rank_env(view: HostView, ctx: PlanContext, rank: int, local_rank: int) -> dict[str, str]:
    return {"MEGASCALE_PORT": str(ctx.ports["megascale"] + view.process_index + local_rank)}
