"""AMD Instinct GPU backend (entry point ``ray_accel_ext.backends.amd_gpu:AMDGPUBackend``)."""

from .backend import AMDGPUBackend

__all__ = ["AMDGPUBackend"]
