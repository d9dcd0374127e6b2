"""Ray Train, Serve and Data on reserved domains, with the transport plan applied in every worker.

* :func:`reserve_for_training` -> :class:`TrainJob`: ``scaling_config()`` (workers pinned to the
  reserved hosts in rank order), ``torch_config()`` / ``jax_config()`` (the plan applied before
  the process group / JAX starts), ``fit(trainer)`` (domains released when training ends or fails).
* :func:`serve_options`, :func:`rank_actor_options`: a Serve replica spanning the domain.
* :func:`map_options`, :func:`with_plan`: a Ray Data map stage on the domain.

Needs ``ray[train]`` (and torch or jax for the framework configs). See ``docs/transport.md``.
"""

from __future__ import annotations

from .data import map_options, with_plan
from .job import TrainJob, reserve_for_training
from .lease import ClaimLease
from .serve import rank_actor_options, serve_options

__all__ = [
    "TrainJob",
    "reserve_for_training",
    "ClaimLease",
    "serve_options",
    "rank_actor_options",
    "map_options",
    "with_plan",
]
