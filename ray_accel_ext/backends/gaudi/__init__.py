"""Intel Gaudi backend (entry point ``ray_accel_ext.backends.gaudi:GaudiBackend``)."""

from .backend import GaudiBackend

__all__ = ["GaudiBackend"]
