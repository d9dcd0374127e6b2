"""AMD Instinct GPUs for ray_accel_ext: registered as the ``amd_gpu`` backend."""

from .backend import AMDGPUBackend

__all__ = ["AMDGPUBackend"]
