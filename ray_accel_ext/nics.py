"""Deprecated path: use :mod:`ray_accel_ext.hw.nics`. Kept for one release for vendors who imported it."""

import warnings as _warnings

from .hw.nics import *  # noqa: F403
from .hw.nics import __all__  # noqa: F401

_warnings.warn(
    "ray_accel_ext.nics moved to ray_accel_ext.hw.nics; the old path goes away in the next release",
    DeprecationWarning,
    stacklevel=2,
)
