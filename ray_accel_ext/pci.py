"""Deprecated path: use :mod:`ray_accel_ext.hw.pci`. Kept for one release for vendors who imported it."""

import warnings as _warnings

from .hw.pci import *  # noqa: F403
from .hw.pci import __all__  # noqa: F401

_warnings.warn(
    "ray_accel_ext.pci moved to ray_accel_ext.hw.pci; the old path goes away in the next release",
    DeprecationWarning,
    stacklevel=2,
)
