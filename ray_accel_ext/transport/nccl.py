"""NCCL (NVIDIA) and RCCL (AMD, which reads the same ``NCCL_*`` names) for one rank.

* ``NCCL_IB_HCA``: the InfiniBand/RoCE HCAs nearest the rank's GPUs (each GPU's best PCIe path
  class from the NIC pairing), in the ``=`` exact-match form so ``mlx5_1`` does not also select
  ``mlx5_10``.
* ``NCCL_SOCKET_IFNAME``: ``=<interface>`` holding the node's Ray address (bootstrap and socket
  transport go where Ray's own traffic already goes).
* ``NCCL_NET_GDR_LEVEL``: the measured path class between the rank's GPUs and their NICs (the
  farthest of them; ``NODE``, which NCCL has no name for, is its ``PHB``), so GPUDirect RDMA is
  used at exactly the distance the hardware has; not set when the nearest NIC is across sockets
  (``SYS``): NCCL's default (``PXB``) then keeps GPUDirect off, which is right there.
* On a Grace host (GPUs on NVLink-C2C, ``cpu_link`` ``c2c``) NCCL's own rule, not nvidia-smi's
  classes (which are ``SYS`` for every NIC there): a NIC on the GPU's Grace (the GPU's NUMA node)
  is ``P2C`` from it (``mergePathType``: C2C to the CPU, then PHB to the NIC) and those are the
  GPU's local NICs, so ``NCCL_IB_HCA`` lists them; GPUDirect RDMA is on at ``P2C`` when
  ``NCCL_NET_GDR_C2C`` is 1, NCCL's default from 2.27 (0 in 2.26), so ``NCCL_NET_GDR_C2C=1`` is
  set for NCCL 2.26 too and ``NCCL_NET_GDR_LEVEL`` is not (set, it would replace the C2C default;
  NVIDIA/nccl ``src/graph/paths.cc`` ``ncclTopoCheckGdr``, ``ncclTopoComputePaths``). A GPU whose
  Grace holds no RDMA NIC keeps the cross-socket (``SYS``) NICs and no GPUDirect.
* ``NCCL_MNNVL_ENABLE=1`` and ``NCCL_NVLS_ENABLE=1`` when every GPU host of the plan shares a
  multi-node NVLink domain (GB200 NVL72) with another reserved host: NCCL then uses the NVLink
  fabric across trays and NVLink SHARP over it, and fails loudly if IMEX is missing instead of
  falling back to the network. Set on every rank or on none (a communicator whose ranks disagree
  would check MNNVL on some ranks only); a plan that mixes such hosts with others leaves both to
  NCCL's auto-detection (default 2), as do single-host NVSwitch boards.

Sources: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html; accepted level names
and defaults in NVIDIA/nccl ``src/graph/paths.cc`` (``ncclGetLevel``, ``ncclTopoCheckGdr``),
``src/init.cc`` (``MNNVL_ENABLE`` default 2), ``src/transport/nvls.cc`` (``NVLS_ENABLE`` default 2);
RCCL: https://rocm.docs.amd.com/projects/rccl/en/latest/api-reference/env-variables.html.
"""

from __future__ import annotations

from .context import PlanContext, c2c_nics, nearest_nics, worst_path
from .model import HostView
from .view import PARTITION_PREFIX

__all__ = ["VARIABLES", "IDENTITY", "library", "applies", "host_env", "unit_env", "rank_env"]

_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
IDENTITY = False  # no variable depends on the rank number
VARIABLES = {
    "NCCL_IB_HCA": f"{_ENV}#nccl-ib-hca",
    "NCCL_SOCKET_IFNAME": f"{_ENV}#nccl-socket-ifname",
    "NCCL_NET_GDR_LEVEL": f"{_ENV}#nccl-net-gdr-level-formerly-nccl-ib-gdr-level",
    "NCCL_NET_GDR_C2C": f"{_ENV}#nccl-net-gdr-c2c",
    "NCCL_MNNVL_ENABLE": f"{_ENV}#nccl-mnnvl-enable",
    "NCCL_NVLS_ENABLE": f"{_ENV}#nccl-nvls-enable",
}
IB_KINDS = ("infiniband", "roce")
RDMA_KINDS = ("infiniband", "roce", "efa")
# NCCL path names (topoPathTypeStr); nvidia-smi's NODE is NCCL's PHB (through the CPU, one NUMA node).
_GDR_LEVEL = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB"}
_LIBRARY = {"nvidia": "nccl", "amd": "rccl"}


def library(view: HostView) -> str:
    return _LIBRARY.get(view.vendor, "")


def applies(view: HostView, ctx: PlanContext) -> bool:
    # A MIG instance is planned as a unit of its GPU (view.as_units): the same NIC pairing.
    return (view.resource == "GPU" or view.resource.startswith(PARTITION_PREFIX)) and view.vendor in _LIBRARY


def host_env(view: HostView, ctx: PlanContext, domain: int) -> dict[str, str]:
    env: dict[str, str] = {}
    if view.socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = "=" + view.socket_ifname
    if view.vendor == "nvidia" and ctx.multi_node_nvlink:
        env["NCCL_MNNVL_ENABLE"] = "1"
        env["NCCL_NVLS_ENABLE"] = "1"
    return env


def unit_env(view: HostView, ctx: PlanContext, units, devices) -> dict[str, str]:
    if not devices:
        return {}
    env: dict[str, str] = {}
    local = c2c_nics(view, devices, IB_KINDS)
    if local:
        env["NCCL_IB_HCA"] = "=" + ",".join(n.name for n in local)
        env["NCCL_NET_GDR_C2C"] = "1"
        return env
    hcas = [nic.name for nic, _ in nearest_nics(view, devices, IB_KINDS)]
    if hcas:
        env["NCCL_IB_HCA"] = "=" + ",".join(hcas)
    level = _GDR_LEVEL.get(worst_path(devices, view, RDMA_KINDS) or "")
    if level:
        env["NCCL_NET_GDR_LEVEL"] = level
    return env


def rank_env(view: HostView, ctx: PlanContext, rank: int, local_rank: int) -> dict[str, str]:
    return {}
