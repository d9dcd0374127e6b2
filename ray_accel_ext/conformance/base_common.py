"""Helpers every suite area shares: describe once per snapshot, the backend's own modules."""

from __future__ import annotations

import re
import sys

import pytest

from ..backend import AcceleratorBackend
from ..model import NodeDescription
from ._core import (
    open_snapshot,
)
from .bounded import bounded
from .settings import Snapshot, SuiteConfig

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_MIN_GRANULARITY = 0.0001  # Ray rounds node resources to 1e-4 (ray_constants.MIN_RESOURCE_GRANULARITY)


def _describe(backend: AcceleratorBackend, snapshot: Snapshot, suite: SuiteConfig | None = None) -> NodeDescription:
    """detect + describe on ``snapshot``; with ``suite``, once per class and snapshot (the purity
    and statelessness tests call the backend afresh)."""
    if suite is not None:
        if snapshot.path not in suite.described:
            suite.described[snapshot.path] = _describe(backend, snapshot)
        return suite.described[snapshot.path]
    with open_snapshot(snapshot) as host:
        assert bounded(backend.detect, host, what=f"{backend.name}.detect()", host=host) is True, (
            f"{backend.name}.detect() is not True on snapshot {snapshot}, whose golden file has a "
            f"{backend.name} description"
        )
        try:
            desc = bounded(backend.describe, host, what=f"{backend.name}.describe()", host=host)
        except Exception as exc:  # noqa: BLE001 - reported with what to do instead
            pytest.fail(
                f"{backend.name}.describe() raised {type(exc).__name__}: {exc} on snapshot {snapshot}; put what "
                f"cannot be read into NodeDescription.problems instead of raising"
            )
    assert isinstance(desc, NodeDescription), (
        f"{backend.name}.describe() on snapshot {snapshot} returned {type(desc).__name__}, expected NodeDescription"
    )
    return desc


def _backend_modules(backend_cls: type) -> list[str]:
    """The backend's module, plus its package's other modules when the package is the vendor's own."""
    module = backend_cls.__module__
    parent = module.rpartition(".")[0]
    if not parent or (parent.split(".")[0] == "ray_accel_ext" and parent != "ray_accel_ext.backends"):
        return [module]
    return [m for m in list(sys.modules) if m == parent or m.startswith(parent + ".")]
