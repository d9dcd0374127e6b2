"""The node start's time envelope: every wait on the node-start path, named, in one place.

The discovery budget (``RAY_ACCEL_BUDGET_S``, default 3 s) is resolved once into a
:class:`~ray_accel_ext.host.protocol.Deadline` (:func:`start_deadline`) that every step receives:
the host's reads and metadata requests, discovery's joins, the hook's wait for discovery's answer,
and Ray's own families. Past the budget the node start spends at most :data:`START_SLACK_S`::

    0 ........................ budget ....... +JOIN/WORKER_GRACE ... +HOOK_GRACE ... +START_SLACK
    |  discovery (backends staggered by STAGGER_S)  | joins end      | hook stops    | Ray-native
                                                                       waiting       families end
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from ..host.protocol import Deadline

__all__ = [
    "STAGGER_S",
    "JOIN_GRACE_S",
    "CHECKS_MARGIN_S",
    "WORKER_GRACE_S",
    "HOOK_GRACE_S",
    "START_SLACK_S",
    "RAY_NATIVE_LIMIT_S",
    "MIN_STEP_S",
    "start_deadline",
    "join_ends",
    "answer_wait",
    "ray_native_limit",
]

#: an in-process backend starts when the one before it is done or has had this long (discovery)
STAGGER_S = 0.25
#: grace past the budget for threads that are about to finish; the budget itself is the bound
JOIN_GRACE_S = 0.05
#: the host checks stop waiting for the backends this long before the budget's end, so the id reads
#: that wait was for end within the budget (node/host_checks.py)
CHECKS_MARGIN_S = 0.1
#: a worker process is killed by its supervising thread at the deadline; killing and reaping take
#: a few milliseconds, more on a loaded machine
WORKER_GRACE_S = 0.25
#: how long past the budget the hook waits for discovery to hand over its answer
HOOK_GRACE_S = 0.75
#: what the whole start hook may spend past the budget (Ray's own families in what is left)
START_SLACK_S = 0.95
#: the most Ray's own accelerator managers are given (``ray_native``), budget or not
RAY_NATIVE_LIMIT_S = 2.0
#: the least any step is given, so that a spent budget still lets a step answer "nothing"
MIN_STEP_S = 0.05


def start_deadline(environ: Mapping[str, str], budget_s: float | None = None) -> Deadline:
    """The node start's one deadline: ``budget_s`` when given, else the budget ``environ`` names."""
    return Deadline(budget_s) if budget_s is not None else Deadline.from_env(environ)


def join_ends(deadline: Deadline) -> tuple[float, float]:
    """Monotonic end times of discovery's joins: (in-process threads, worker processes)."""
    end = max(deadline.end, time.monotonic())  # a spent budget still gives the graces
    return end + JOIN_GRACE_S, end + WORKER_GRACE_S


def answer_wait(deadline: Deadline) -> float:
    """How long the hook waits for discovery's answer from now."""
    return max(0.0, deadline.end + HOOK_GRACE_S - time.monotonic())


def ray_native_limit(deadline: Deadline) -> float:
    """The time Ray's own families get from now: what is left of the budget plus the slack."""
    return min(RAY_NATIVE_LIMIT_S, max(MIN_STEP_S, deadline.end + START_SLACK_S - time.monotonic()))
