"""Machinery shared by the suite's base classes: settings per class, snapshot parametrization,
capability gating, xfails, and the rule that suite tests are never overridden."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..backend import AcceleratorBackend
from ..host import FsHost, open_host
from ..testing.fake_metadata import FakeGceMetadata, FakeImds
from ..testing.snapshots import metadata_spec, serve_snapshot
from .requirements import required_of
from .settings import Snapshot, SuiteConfig, resolve

__all__ = ["SuiteTests", "suite_id", "base_of", "open_snapshot", "counting_metadata", "golden_diff"]

_CACHE = pytest.StashKey[dict]()


def _config_for(cls: type, config: Any) -> SuiteConfig:
    cache = config.stash.setdefault(_CACHE, {}) if config is not None else {}
    if cls not in cache:
        cache[cls] = resolve(cls, config)
    return cache[cls]


def base_of(cls: type, test_name: str) -> type:
    """The ``Base...Tests`` class of the suite that defines ``test_name``."""
    for klass in cls.__mro__:
        if test_name in vars(klass) and klass.__module__.startswith("ray_accel_ext.conformance"):
            return klass
    return cls


def suite_id(cls: type, node_name: str) -> str:
    """``BaseDescriptionTests::test_matches_golden[snap]``: the id used in CHECKLIST.md and xfails."""
    return f"{base_of(cls, node_name.split('[', 1)[0]).__name__}::{node_name}"


def _suite_tests(cls: type) -> dict[str, tuple[type, Any]]:
    """Every ``test_*`` the suite's own classes give ``cls``: name -> (defining base, function)."""
    out: dict[str, tuple[type, Any]] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("ray_accel_ext.conformance.") and klass.__name__.startswith("Base"):
            for name, value in vars(klass).items():
                if name.startswith("test_"):
                    out[name] = (klass, value)
    return out


def overridden_tests(cls: type) -> list[str]:
    """Suite tests that ``cls`` (a vendor subclass) replaced, deleted or shadowed."""
    out = []
    for name, (base, func) in _suite_tests(cls).items():
        if getattr(cls, name, None) is not func:
            out.append(f"{name} (from {base.__name__})")
    return sorted(out)


def _overridden(name: str, base: type, cls: type):
    def test(self) -> None:
        pytest.fail(
            f"{cls.__qualname__} overrides the suite test {base.__name__}::{name}. Suite tests may not be "
            f"overridden, skipped by redefinition or deleted: a neutered test would report PASSED. "
            f"Declare missing support in Capabilities, or list '{base.__name__}::{name}  # <reason> <bug link>' "
            f"in your xfails file (CHECKLIST.md, 'Known failures')."
        )

    test.__name__ = name
    return test


class SuiteTests:
    """Base of every ``Base...Tests`` class. Vendors set class attributes, never override tests.

    Attributes (all optional; unset ones come from ``--accel-*`` options / environment):
        backend_cls: the backend class under test.
        snapshots: snapshot directory, or folder of them, or a list (relative to the test file).
        xfails: xfails file (relative to the test file): ``Base...Tests::test_x[snap]  # reason link``.
        live_ray: run the live Ray check (slow) without ``--accel-live-ray``.
    """

    backend_cls: ClassVar[type[AcceleratorBackend] | None] = None
    snapshots: ClassVar[Any] = None
    xfails: ClassVar[str | None] = None
    live_ray: ClassVar[bool | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__.startswith("ray_accel_ext.conformance.") and cls.__name__.startswith("Base"):
            return
        for name, (base, func) in _suite_tests(cls).items():
            if name in vars(cls) and vars(cls)[name] is not func:
                setattr(cls, name, _overridden(name, base, cls))

    # -- collection ------------------------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        suite = _config_for(metafunc.cls, metafunc.config)
        if "snapshot" in metafunc.fixturenames:
            metafunc.parametrize("snapshot", suite.snapshots, ids=[s.id for s in suite.snapshots])
        if "device_snapshot" in metafunc.fixturenames:
            found = [s for s in suite.snapshots if s.has_devices]
            metafunc.parametrize("device_snapshot", found, ids=[s.id for s in found])
        if "live_snapshot" in metafunc.fixturenames:
            found = [s for s in suite.snapshots if s.has_devices][:1]
            metafunc.parametrize("live_snapshot", found, ids=[s.id for s in found])

    # -- fixtures --------------------------------------------------------------------------------

    @pytest.fixture
    def suite(self, request: pytest.FixtureRequest) -> SuiteConfig:
        """The resolved settings; fails every test when the backend cannot be loaded."""
        suite = _config_for(type(request.instance), request.config)
        if suite.load_error:
            pytest.fail(f"{suite.origin}: {suite.load_error}")
        return suite

    @pytest.fixture
    def backend(self, suite: SuiteConfig) -> AcceleratorBackend:
        """A fresh instance of the backend under test (built with no arguments, bounded)."""
        from .bounded import bounded

        return bounded(suite.backend_cls, what=f"{suite.name}() (construction)")  # type: ignore[arg-type]

    @pytest.fixture(autouse=True)
    def _accel_suite_gate(self, request: pytest.FixtureRequest) -> None:
        """Skip tests whose capabilities are not declared; mark xfails-file entries strict xfail."""
        suite = _config_for(type(request.instance), request.config)
        if suite.load_error or suite.backend_cls is None:
            return
        declared = suite.backend_cls.capabilities
        for cap in required_of(request.function):
            if not getattr(declared, cap, False):
                pytest.skip(f"{suite.name} does not declare Capabilities({cap}=True)")
        reason = suite.xfail_reason(suite_id(type(request.instance), request.node.name))
        if reason:
            request.node.add_marker(pytest.mark.xfail(reason=f"xfails file: {reason}", strict=True))


# -- helpers used by the tests ------------------------------------------------------------------


@contextlib.contextmanager
def open_snapshot(snapshot: Snapshot, budget_s: float | None = None) -> Iterator[FsHost]:
    """The snapshot as a host, its metadata served the way its golden file was recorded."""
    with serve_snapshot(snapshot.path) as env:
        yield open_host(snapshot.path, environ=env, budget_s=budget_s)


@contextlib.contextmanager
def counting_metadata(snapshot: Snapshot | None) -> Iterator[tuple[dict[str, str], list[Any]]]:
    """Both metadata fakes, always on loopback, answering the snapshot's values (or 404)."""
    spec = metadata_spec(snapshot.path) if snapshot is not None else {}
    gce = FakeGceMetadata(spec.get("gce"), spec.get("gce_faults"))
    imds = FakeImds(spec.get("ec2"), spec.get("ec2_faults"))
    with gce, imds:
        yield {**gce.env(), **imds.env()}, [gce, imds]


def host_with(snapshot: Snapshot | None, env: dict[str, str], root: Path | None = None) -> FsHost:
    """A host for ``snapshot`` (or an empty ``root``) whose metadata endpoints are ``env``'s."""
    if snapshot is not None:
        return open_host(snapshot.path, environ=env)
    assert root is not None
    return FsHost(root, env=env)


def golden_diff(expected: Any, actual: Any, path: str = "", limit: int = 15) -> list[str]:
    """Field paths where ``actual`` differs from ``expected`` (``devices[3].numa_node: 0 != 1``)."""
    out: list[str] = []

    def walk(e: Any, a: Any, p: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(e, dict) and isinstance(a, dict):
            for k in sorted(set(e) | set(a)):
                sub = f"{p}.{k}" if p else str(k)
                if k not in a:
                    out.append(f"{sub}: missing (golden has {json.dumps(e[k])[:80]})")
                elif k not in e:
                    out.append(f"{sub}: unexpected (golden lacks it; got {json.dumps(a[k])[:80]})")
                else:
                    walk(e[k], a[k], sub)
        elif isinstance(e, list) and isinstance(a, list):
            if len(e) != len(a):
                out.append(f"{p}: golden has {len(e)} item(s), got {len(a)}")
            for i, (x, y) in enumerate(zip(e, a)):
                walk(x, y, f"{p}[{i}]")
        elif e != a:
            out.append(f"{p}: golden {json.dumps(e)[:80]}, got {json.dumps(a)[:80]}")

    walk(expected, actual, path)
    return out
