"""``JaxConfig`` that applies a transport plan (``MEGASCALE_*`` for multi-slice) in every worker
before ``jax.distributed.initialize``.

Pass ``use_tpu=True`` here (it initialises JAX on TPU) while the job's ``ScalingConfig`` keeps
``use_tpu=False``: Ray Train refuses label selectors with ``use_tpu=True`` (it reserves slices
itself then), and the label selectors are what pin the workers to the reserved hosts in rank order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray.train.v2.jax import JaxConfig

from .backends import planned_backend

__all__ = ["PlannedJaxConfig"]


@dataclass
class PlannedJaxConfig(JaxConfig):
    """``JaxConfig`` plus ``transport_plan``, applied on each worker before JAX starts."""

    transport_plan: Any = None

    @property
    def backend_cls(self):
        return planned_backend(super().backend_cls)
