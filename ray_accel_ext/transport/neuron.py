"""The Neuron runtime (Trainium, Inferentia) for one rank: cores, rank index, collectives root.

* ``NEURON_RT_VISIBLE_CORES``: the rank's NeuronCore ids in range form (``0-31``); Ray sets the
  same set itself for a task that holds ``neuron_cores``, the plan repeats it so a process started
  outside Ray (torchrun under the task) sees it too;
* ``NEURON_RT_ROOT_COMM_ID``: ``<coordinator address>:<port>`` of rank 0's host, the bootstrap
  root of the Neuron collectives (same value on every rank);
* ``NEURON_PJRT_PROCESS_INDEX``: the rank; ``NEURON_PJRT_PROCESSES_NUM_DEVICES``: NeuronCores per
  rank, comma-separated, in rank order (what the PJRT plugin uses to number devices across
  processes).

Sources: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/api/nrt-env-var-reference.html
(visible cores, root comm id); pytorch/xla ``torch_xla/_internal/neuron.py`` (``host:port`` form,
default port 62182, the two ``NEURON_PJRT_*`` variables and their formats).
"""

from __future__ import annotations

from .context import PlanContext
from .model import HostView
from .order import unit_ranges

__all__ = ["VARIABLES", "IDENTITY", "library", "applies", "host_env", "unit_env", "rank_env"]

_NRT = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/neuron-runtime/api/nrt-env-var-reference.html"
_XLA = "https://github.com/pytorch/xla/blob/master/torch_xla/_internal/neuron.py"
IDENTITY = True  # NEURON_PJRT_PROCESS_INDEX is the rank
VARIABLES = {
    "NEURON_RT_VISIBLE_CORES": _NRT,
    "NEURON_RT_ROOT_COMM_ID": _NRT,
    "NEURON_PJRT_PROCESS_INDEX": _XLA,
    "NEURON_PJRT_PROCESSES_NUM_DEVICES": _XLA,
}


def library(view: HostView) -> str:
    return "neuron"


def applies(view: HostView, ctx: PlanContext) -> bool:
    return view.resource == "neuron_cores"


def host_env(view: HostView, ctx: PlanContext, domain: int) -> dict[str, str]:
    return {
        "NEURON_RT_ROOT_COMM_ID": f"{ctx.coordinator}:{ctx.ports['neuron']}",
        "NEURON_PJRT_PROCESSES_NUM_DEVICES": ctx.units_per_rank_csv,
    }


def unit_env(view: HostView, ctx: PlanContext, units, devices) -> dict[str, str]:
    return {"NEURON_RT_VISIBLE_CORES": unit_ranges(sorted(units))}


def rank_env(view: HostView, ctx: PlanContext, rank: int, local_rank: int) -> dict[str, str]:
    return {"NEURON_PJRT_PROCESS_INDEX": str(rank)}
