"""Google Cloud TPU backend (entry point ``ray_accel_ext.backends.tpu:TPUBackend``)."""

from .backend import TPUBackend

__all__ = ["TPUBackend"]
