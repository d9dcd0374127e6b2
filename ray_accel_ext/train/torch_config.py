"""``TorchConfig`` that applies a transport plan in every worker before the process group starts.

Imports ``torch`` (through ``ray.train.torch``): import this module only where torch is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray.train.torch import TorchConfig

from .backends import planned_backend

__all__ = ["PlannedTorchConfig"]


@dataclass
class PlannedTorchConfig(TorchConfig):
    """``TorchConfig`` plus ``transport_plan``, applied on each worker before ``init_process_group``."""

    transport_plan: Any = None

    @property
    def backend_cls(self):
        return planned_backend(super().backend_cls)
