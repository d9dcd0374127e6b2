"""Suite area: detection (False on an empty host, pure, bounded, offline)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from ..backend import AcceleratorBackend
from ..host.snapshot import ROOTFS
from ._core import (
    SuiteTests,
    counting_metadata,
    golden_diff,
    host_with,
    open_snapshot,
)
from .base_common import _backend_modules, _describe
from .bounded import bounded
from .guards import NetworkGuard, ProcessState
from .settings import Snapshot, SuiteConfig

__all__ = ['BaseDetectionTests']


def _detect(backend: AcceleratorBackend, host) -> bool:
    return bounded(backend.detect, host, what=f"{backend.name}.detect()", host=host)


def _describe_once(backend: AcceleratorBackend, host) -> object:
    return bounded(backend.describe, host, what=f"{backend.name}.describe()", host=host)


class BaseDetectionTests(SuiteTests):
    """``detect`` is cheap, honest and harmless; ``describe`` is pure and within budget."""

    def test_detect_false_on_empty_host(self, backend: AcceleratorBackend, tmp_path: Path) -> None:
        root = tmp_path / ROOTFS
        root.mkdir()
        guard = NetworkGuard()
        with counting_metadata(None) as (env, servers), guard.active():
            try:
                empty = host_with(None, env, root)
                found = bounded(backend.detect, empty, what=f"{backend.name}.detect() on an empty host", host=empty)
            except Exception as exc:  # noqa: BLE001
                pytest.fail(f"{backend.name}.detect() raised {type(exc).__name__}: {exc} on an empty host "
                            f"(no /sys, /proc, /dev); detect must return False, never raise")
        assert found is False, f"{backend.name}.detect() returned {found!r} on an empty host; expected False"
        if not backend.capabilities.uses_network:
            sent = sum(s.count() for s in servers)
            assert not guard.attempts and not sent, (
                f"{backend.name}.detect() used the network on an empty host ({sent} metadata request(s); "
                f"{'; '.join(map(str, guard.attempts)) or 'no sockets'}) without declaring Capabilities(uses_network=True)"
            )

    def test_detect_matches_golden(self, backend: AcceleratorBackend, snapshot: Snapshot) -> None:
        with open_snapshot(snapshot) as host:
            try:
                found = bounded(backend.detect, host, what=f"{backend.name}.detect() on snapshot {snapshot}", host=host)
            except Exception as exc:  # noqa: BLE001
                pytest.fail(f"{backend.name}.detect() raised {type(exc).__name__}: {exc} on snapshot {snapshot}; it must never raise")
        assert isinstance(found, bool), f"{backend.name}.detect() returned {type(found).__name__} on snapshot {snapshot}; expected bool"
        assert found == snapshot.has_devices, (
            f"{backend.name}.detect() is {found} on snapshot {snapshot}, but its golden file "
            f"{'has' if snapshot.has_devices else 'has no'} {backend.name} description"
        )

    def test_leaves_process_unchanged(self, suite: SuiteConfig, backend: AcceleratorBackend, snapshot: Snapshot) -> None:
        modules = _backend_modules(suite.backend_cls)
        with open_snapshot(snapshot) as host:
            before = ProcessState.capture(modules)
            try:
                if _detect(backend, host):
                    _describe_once(backend, host)
            except Exception as exc:  # noqa: BLE001 - purity is judged even when describe fails
                note = f" (describe raised {type(exc).__name__}: {exc})"
            else:
                note = ""
            changes = ProcessState.capture(modules).changes_since(before)
        assert not changes, (
            f"{backend.name} changed the process on snapshot {snapshot}{note}; backends must return values "
            f"and never change the process:\n  " + "\n  ".join(changes)
        )

    def test_within_time_budget(self, backend: AcceleratorBackend, snapshot: Snapshot) -> None:
        with open_snapshot(snapshot) as host:
            budget = host.deadline.budget_s
            started = time.perf_counter()
            with contextlib.suppress(Exception):  # errors are judged by the other tests; this one times
                if _detect(backend, host):
                    _describe_once(backend, host)
            elapsed = time.perf_counter() - started
        assert elapsed <= budget, (
            f"{backend.name} took {elapsed:.2f}s on snapshot {snapshot}, over the {budget:g}s discovery budget "
            f"(RAY_ACCEL_BUDGET_S); use host.deadline for anything that waits"
        )

    def test_no_network_unless_declared(self, backend: AcceleratorBackend, snapshot: Snapshot) -> None:
        declared = backend.capabilities.uses_network
        guard = NetworkGuard()
        if declared:
            with open_snapshot(snapshot) as host, guard.active():
                if _detect(backend, host):
                    _describe_once(backend, host)
            sent = 0
        else:
            with counting_metadata(snapshot) as (env, servers):
                host = host_with(snapshot, env)
                with guard.active():
                    try:
                        if _detect(backend, host):
                            _describe_once(backend, host)
                    except Exception:  # noqa: BLE001 - a refused connection may surface; judged below
                        pass
                sent = sum(s.count() for s in servers)
        direct = guard.direct()
        assert not direct, (
            f"{backend.name} opened network connections itself on snapshot {snapshot}: "
            f"{'; '.join(map(str, direct))}. Cloud metadata and provider APIs go only through host.metadata"
        )
        assert declared or not (sent or guard.attempts), (
            f"{backend.name} used the network on snapshot {snapshot} ({sent} metadata request(s); "
            f"{'; '.join(map(str, guard.attempts)) or 'no sockets'}) but does not declare Capabilities(uses_network=True)"
        )

    def test_no_state_carried_between_hosts(self, suite: SuiteConfig) -> None:
        snaps = [s for s in suite.snapshots if s.has_devices]
        if not snaps:
            pytest.skip(f"no snapshot with {suite.name} devices")
        reused = suite.backend_cls()
        order = snaps + list(reversed(snaps))
        for snap in order:
            got = _describe(reused, snap).to_dict()
            fresh = _describe(suite.backend_cls(), snap).to_dict()
            diff = golden_diff(fresh, got)
            assert not diff, (
                f"{suite.name}: an instance that described other hosts first gives a different answer on "
                f"snapshot {snap} (state kept between calls):\n  " + "\n  ".join(diff)
            )
