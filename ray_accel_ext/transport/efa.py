"""EFA through libfabric (aws-ofi-nccl for NCCL on p4/p5, Neuron collectives on Trn/Inf).

* ``FI_PROVIDER=efa`` on every host with an EFA device: keeps libfabric on EFA (the plugin forces
  the same filter when the variable is unset; required with aws-ofi-nccl <= 1.5.0);
* ``FI_EFA_USE_DEVICE_RDMA=1`` when every accelerator of the rank has an EFA device behind its PCIe
  switch (``PIX``/``PXB``): the device-RDMA path (GPUDirect on p4/p5, Neuron on Trn); needed with
  aws-ofi-nccl 1.6.x, harmless later ("not harmful to set it on p4/p5 instances with the newer
  software");
* not set: ``FI_EFA_FORK_SAFE`` ("Not needed anymore", the plugin sets it) and ``RDMAV_FORK_SAFE``
  ("Do not use").

Source: aws-ofi-nccl ``doc/efa-env-var.md``,
https://github.com/aws/aws-ofi-nccl/blob/master/doc/efa-env-var.md.
"""

from __future__ import annotations

from .context import PlanContext
from .model import HostView

__all__ = ["VARIABLES", "IDENTITY", "library", "applies", "host_env", "unit_env", "rank_env"]

_DOC = "https://github.com/aws/aws-ofi-nccl/blob/master/doc/efa-env-var.md"
IDENTITY = False  # no variable depends on the rank number
VARIABLES = {"FI_PROVIDER": _DOC, "FI_EFA_USE_DEVICE_RDMA": _DOC}
_NEAR = ("PIX", "PXB")


def library(view: HostView) -> str:
    return "efa"


def applies(view: HostView, ctx: PlanContext) -> bool:
    return "efa" in view.nic_kinds


def host_env(view: HostView, ctx: PlanContext, domain: int) -> dict[str, str]:
    return {"FI_PROVIDER": "efa"}


def unit_env(view: HostView, ctx: PlanContext, units, devices) -> dict[str, str]:
    if devices and all(any(p.path in _NEAR and view.nics.get(p.nic) is not None and view.nics[p.nic].kind == "efa"
                           for p in d.nics) for d in devices):
        return {"FI_EFA_USE_DEVICE_RDMA": "1"}
    return {}


def rank_env(view: HostView, ctx: PlanContext, rank: int, local_rank: int) -> dict[str, str]:
    return {}
