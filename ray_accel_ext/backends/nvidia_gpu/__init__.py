"""NVIDIA GPU backend (entry point ``ray_accel_ext.backends.nvidia_gpu:NvidiaGPUBackend``)."""

from .backend import NvidiaGPUBackend

__all__ = ["NvidiaGPUBackend"]
