"""The suite: ``Base<Area>Tests`` classes a backend's test module subclasses with class data.

::

    from ray_accel_ext.conformance.base import BaseDescriptionTests
    from ray_accel_ext_acme import AcmeNPUBackend

    class TestAcmeDescription(BaseDescriptionTests):
        backend_cls = AcmeNPUBackend
        snapshots = "hosts"          # next to this test file

Parameters: ``snapshot`` runs over every snapshot given, ``device_snapshot`` over those whose
golden file has a description from this backend, ``live_snapshot`` over the first of those.
Every assertion message names the backend and the snapshot and says what to fix.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import time
from pathlib import Path

import pytest

from ..adapter import to_ray_node
from ..backend import SUPPORTED_API_VERSIONS, AcceleratorBackend, Capabilities
from ..errors import BackendLoadError
from ..labels import (
    PROJECT_PREFIX,
    RAY_PREFIX,
    SKU,
    is_valid_key,
    is_valid_prefix,
    is_valid_value,
    key_prefix,
)
from ..model import NodeDescription, NodeInventory
from ..registry import available_backends, load_backend, validate_backend_class
from ..testing.snapshots import metadata_spec
from ._core import (
    SuiteTests,
    counting_metadata,
    golden_diff,
    host_with,
    open_snapshot,
    overridden_tests,
)
from .guards import NetworkGuard, ProcessState
from .requirements import CAPABILITY_FIELDS, missing, requires, shown_by
from .settings import Snapshot, SuiteConfig

__all__ = [
    "BaseRegistrationTests",
    "BaseDetectionTests",
    "BaseDescriptionTests",
    "BaseAdapterTests",
    "BaseVisibilityTests",
    "BaseLiveRayTests",
]

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
        assert backend.detect(host) is True, (
            f"{backend.name}.detect() is not True on snapshot {snapshot}, whose golden file has a "
            f"{backend.name} description"
        )
        try:
            desc = backend.describe(host)
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


class BaseRegistrationTests(SuiteTests):
    """The backend comes in through the entry point and its class data is well formed."""

    def test_backend_loads(self, suite: SuiteConfig) -> None:
        try:
            validate_backend_class(suite.backend_cls, None, suite.origin)
        except BackendLoadError as exc:
            pytest.fail(str(exc))

    def test_entry_point_resolves(self, suite: SuiteConfig) -> None:
        name = suite.name
        specs = [s for s in available_backends() if s.name == name]
        if not specs:
            pytest.skip(
                f"{name} ({suite.origin}) is not installed under the 'ray_accel_ext.backends' entry point; "
                f"pip install its distribution to check registration"
            )
        loaded = load_backend(specs[0])
        assert type(loaded) is suite.backend_cls, (
            f"entry point {name!r} = {specs[0].value} ({specs[0].dist}) loads {type(loaded).__module__}."
            f"{type(loaded).__qualname__}, not the class under test {suite.backend_cls.__module__}."
            f"{suite.backend_cls.__qualname__}"
        )

    def test_name_well_formed(self, suite: SuiteConfig) -> None:
        name = getattr(suite.backend_cls, "name", None)
        assert isinstance(name, str) and _NAME_RE.match(name), (
            f"{suite.origin}: name {name!r} must be lower_snake_case (a-z, 0-9, _), start with a letter, at most 63 chars"
        )

    def test_label_prefix_owned(self, suite: SuiteConfig) -> None:
        prefix = getattr(suite.backend_cls, "label_prefix", None)
        assert is_valid_prefix(prefix), f"{suite.name}: label_prefix {prefix!r} is not a DNS subdomain such as 'acme.ai'"
        assert prefix not in (RAY_PREFIX, PROJECT_PREFIX) and not prefix.endswith("." + RAY_PREFIX), (
            f"{suite.name}: label_prefix {prefix!r} is reserved (Ray owns {RAY_PREFIX}, the core schema owns "
            f"{PROJECT_PREFIX}); use a domain you own"
        )
        in_tree = suite.backend_cls.__module__.startswith("ray_accel_ext.")
        assert in_tree or not prefix.endswith("." + PROJECT_PREFIX), (
            f"{suite.name}: label_prefix {prefix!r} is under {PROJECT_PREFIX}, which only ray_accel_ext's own "
            f"backends use; a third-party backend labels under a domain its vendor owns (e.g. 'amd.com')"
        )

    def test_resource_name_valid(self, suite: SuiteConfig) -> None:
        resource = getattr(suite.backend_cls, "resource_name", None)
        assert isinstance(resource, str) and resource and resource not in ("CPU", "memory", "object_store_memory") \
            and is_valid_value(resource), (
            f"{suite.name}: resource_name {resource!r} is not a usable Ray resource name "
            f"(a non-reserved name from [A-Za-z0-9_.-], like 'GPU' or 'acme_npu')"
        )

    def test_api_version_supported(self, suite: SuiteConfig) -> None:
        version = getattr(suite.backend_cls, "api_version", None)
        assert version in SUPPORTED_API_VERSIONS, (
            f"{suite.name}: api_version {version!r} is not supported by this ray_accel_ext "
            f"(supported: {sorted(SUPPORTED_API_VERSIONS)})"
        )

    def test_capabilities_declared_as_data(self, suite: SuiteConfig) -> None:
        caps = getattr(suite.backend_cls, "capabilities", None)
        assert isinstance(caps, Capabilities), (
            f"{suite.name}: capabilities must be a class attribute holding a "
            f"ray_accel_ext.backend.Capabilities, got {type(caps).__name__}"
        )

    def test_duplicate_registration_rejected(self, suite: SuiteConfig, tmp_path: Path) -> None:
        name = suite.name
        installed = any(s.name == name for s in available_backends())
        for i in range(1 if installed else 2):
            dist = tmp_path / f"conformance_duplicate_{i}-0.0.dist-info"
            dist.mkdir()
            (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: conformance-duplicate-{i}\nVersion: 0.0\n")
            (dist / "entry_points.txt").write_text(
                f"[ray_accel_ext.backends]\n{name} = conformance_duplicate_{i}:Backend\n"
            )
        sys.path.insert(0, str(tmp_path))
        try:
            with pytest.raises(BackendLoadError) as info:
                available_backends()
        finally:
            sys.path.remove(str(tmp_path))
        assert name in str(info.value) and "conformance-duplicate-0" in str(info.value), (
            f"a second distribution claiming {name!r} must be named in the error, got: {info.value}"
        )

    def test_xfails_file_valid(self, suite: SuiteConfig) -> None:
        errors = list(suite.xfail_errors)
        known = {f"{b.__name__}::{n}" for b in _BASES for n in vars(b) if n.startswith("test_")}
        for test_id in suite.xfails:
            if test_id.split("[", 1)[0] not in known:
                errors.append(f"{test_id}: no such suite test (stale entry?)")
        assert not errors, f"xfails file {suite.xfails_file}:\n  " + "\n  ".join(errors)

    def test_no_suite_test_overridden(self) -> None:
        found = []
        for cls in _vendor_classes(SuiteTests):
            overridden = overridden_tests(cls)
            if overridden:
                found.append(f"{cls.__module__}.{cls.__qualname__} overrides {', '.join(overridden)}")
        assert not found, (
            "suite tests were overridden (a neutered test would report PASSED):\n  " + "\n  ".join(found)
            + "\nDeclare the gap in Capabilities or list the test id in the xfails file with a reason and a link "
            "(CHECKLIST.md, 'Known failures')"
        )


def _vendor_classes(root: type) -> list[type]:
    """Every loaded subclass of ``root`` outside the suite's own base module."""
    out, todo = [], list(root.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__ != __name__:
            out.append(cls)
    return out


class BaseDetectionTests(SuiteTests):
    """``detect`` is cheap, honest and harmless; ``describe`` is pure and within budget."""

    def test_detect_false_on_empty_host(self, backend: AcceleratorBackend, tmp_path: Path) -> None:
        root = tmp_path / "rootfs"
        root.mkdir()
        guard = NetworkGuard()
        with counting_metadata(None) as (env, servers), guard.active():
            try:
                found = backend.detect(host_with(None, env, root))
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
                found = backend.detect(host)
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
                if backend.detect(host):
                    backend.describe(host)
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
                if backend.detect(host):
                    backend.describe(host)
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
                if backend.detect(host):
                    backend.describe(host)
            sent = 0
        else:
            with counting_metadata(snapshot) as (env, servers):
                host = host_with(snapshot, env)
                with guard.active():
                    try:
                        if backend.detect(host):
                            backend.describe(host)
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


class BaseDescriptionTests(SuiteTests):
    """``describe`` gives exactly the golden file, consistent and round-trippable."""

    def test_snapshots_given(self, suite: SuiteConfig) -> None:
        assert any(s.has_devices for s in suite.snapshots), (
            f"no snapshot with {suite.name} devices among {len(suite.snapshots)} snapshot(s) from "
            f"{list(suite.snapshot_sources) or 'nowhere'}; pass --accel-snapshots DIR (or set snapshots = ...) "
            f"pointing at recorded hosts with golden expected.json files"
        )

    def test_snapshots_include_an_empty_host(self, suite: SuiteConfig) -> None:
        assert any(s.expected is not None and not s.has_devices for s in suite.snapshots), (
            f"{suite.name}: no snapshot without {suite.name} devices; ship an 'empty' host snapshot "
            f"(CHECKLIST.md, 'Snapshots') so detection is shown to say False"
        )

    def test_snapshot_documented(self, snapshot: Snapshot) -> None:
        readme = snapshot.path / "README.md"
        assert readme.is_file() and readme.read_text().strip(), (
            f"snapshot {snapshot} has no README.md saying what machine it stands for and where its facts come from"
        )
        assert snapshot.expected is not None, (
            f"snapshot {snapshot} has no readable expected.json; write it with "
            f"'python -m ray_accel_ext.testing.snapshots --update {snapshot.path}' after checking the output by eye"
        )

    def test_matches_golden(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        desc = _describe(backend, device_snapshot, suite)
        diff = golden_diff(device_snapshot.description, desc.to_dict())
        assert not diff, (
            f"{backend.name}.describe() on snapshot {device_snapshot} differs from its expected.json:\n  "
            + "\n  ".join(diff)
        )

    def test_consistent(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        desc = _describe(backend, device_snapshot, suite)
        errors = desc.consistency_errors()
        if desc.backend != backend.name:
            errors.append(f"backend: {desc.backend!r}, expected the entry-point name {backend.name!r}")
        if desc.resource_name != backend.resource_name:
            errors.append(f"resource_name: {desc.resource_name!r}, but the class declares {backend.resource_name!r}")
        if not desc.devices:
            errors.append("devices: empty although detect() is True")
        for key in desc.attributes:
            if key_prefix(key) != backend.label_prefix:
                errors.append(f"attributes[{key!r}]: outside the backend's label_prefix {backend.label_prefix!r}")
        assert not errors, f"{backend.name} on snapshot {device_snapshot}:\n  " + "\n  ".join(errors)

    def test_round_trip(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        desc = _describe(backend, device_snapshot, suite)
        data = json.loads(json.dumps(desc.to_dict()))
        again = NodeDescription.from_dict(data)
        assert again == desc, (
            f"{backend.name} on snapshot {device_snapshot}: NodeDescription.from_dict(to_dict()) differs:\n  "
            + "\n  ".join(golden_diff(desc.to_dict(), again.to_dict()))
        )

    def _promise(self, cap: str, backend: AcceleratorBackend, snap: Snapshot, suite: SuiteConfig) -> None:
        desc = _describe(backend, snap, suite)
        with open_snapshot(snap) as host:
            gaps = missing(cap, desc, host, snap.description, bool(metadata_spec(snap.path)))
        assert not gaps, (
            f"{backend.name} declares Capabilities({cap}=True) but on snapshot {snap} "
            f"{CAPABILITY_FIELDS[cap]} is not filled in:\n  " + "\n  ".join(gaps)
        )

    @requires("topology_links")
    def test_links_filled(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        self._promise("topology_links", backend, device_snapshot, suite)

    @requires("nic_affinity")
    def test_nic_affinity_filled(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        self._promise("nic_affinity", backend, device_snapshot, suite)

    @requires("numa_affinity")
    def test_numa_affinity_filled(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        self._promise("numa_affinity", backend, device_snapshot, suite)

    @requires("fabric_domains")
    def test_fabric_domain_filled(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        self._promise("fabric_domains", backend, device_snapshot, suite)

    @requires("provider_location")
    def test_provider_location_filled(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        self._promise("provider_location", backend, device_snapshot, suite)

    def test_declared_capabilities_are_shown(self, suite: SuiteConfig) -> None:
        snaps = [s for s in suite.snapshots if s.has_devices]
        descs = [(s, _describe(suite.backend_cls(), s, suite)) for s in snaps]
        unshown = [
            cap for cap in suite.backend_cls.capabilities.declared()
            if cap != "uses_network" and not any(shown_by(cap, d) for _, d in descs)
        ]
        assert not unshown, (
            f"{suite.name} declares {', '.join(f'{c}=True' for c in unshown)} but none of its snapshots "
            f"({', '.join(s.id for s in snaps) or 'none'}) shows it ({', '.join(CAPABILITY_FIELDS[c] for c in unshown)} "
            f"empty everywhere); add a snapshot of a machine that has it"
        )


class BaseAdapterTests(SuiteTests):
    """What Ray receives from this backend's description is valid and stays in its namespace."""

    def _spec(self, backend: AcceleratorBackend, snap: Snapshot, suite: SuiteConfig):
        desc = _describe(backend, snap, suite)
        return desc, to_ray_node(NodeInventory(descriptions=(desc,)))

    def test_resources_valid_for_ray(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        desc, spec = self._spec(backend, device_snapshot, suite)
        errors = []
        for name, qty in spec.resources.items():
            if not name or any(c.isspace() for c in name):
                errors.append(f"resource {name!r}: empty or contains whitespace")
            if not (isinstance(qty, (int, float)) and math.isfinite(qty) and qty > 0):
                errors.append(f"resource {name!r}: quantity {qty!r} is not a positive finite number")
            elif abs(round(qty / _MIN_GRANULARITY) * _MIN_GRANULARITY - qty) > 1e-9:
                errors.append(f"resource {name!r}: quantity {qty!r} is finer than Ray's 0.0001 granularity")
            elif qty > 1 and not float(qty).is_integer():
                errors.append(f"resource {name!r}: quantity {qty!r} above 1 must be whole (Ray cannot request it)")
        if spec.resources.get(backend.resource_name) != desc.resource_quantity:
            errors.append(
                f"resource {backend.resource_name!r} is {spec.resources.get(backend.resource_name)!r}, "
                f"expected resource_quantity {desc.resource_quantity!r}"
            )
        assert not errors, f"{backend.name} on snapshot {device_snapshot}:\n  " + "\n  ".join(errors)

    def test_labels_valid_for_ray_selectors(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        _desc, spec = self._spec(backend, device_snapshot, suite)
        errors = [f"{k}={v!r}" for k, v in spec.labels.items() if not (is_valid_key(k) and is_valid_value(v) and v)]
        try:
            from ray._private import label_utils
        except ImportError:  # Ray is optional for the suite; our own rules mirror Ray's
            label_utils = None
        if label_utils is not None:
            for key, value in spec.labels.items():
                problem = label_utils.validate_label_key(key) or label_utils.validate_label_selector({key: value})
                if problem:
                    errors.append(f"{key}={value!r}: Ray says {problem}")
        assert not errors, (
            f"{backend.name} on snapshot {device_snapshot}: labels Ray's selectors cannot match:\n  " + "\n  ".join(errors)
        )

    def test_vendor_labels_under_own_prefix(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        desc, spec = self._spec(backend, device_snapshot, suite)
        errors = []
        for key, value in desc.attributes.items():
            if key_prefix(key) != backend.label_prefix:
                errors.append(f"attribute {key!r} is outside the backend's label_prefix {backend.label_prefix!r}")
            elif spec.labels.get(key) != value:
                errors.append(
                    f"attribute {key}={value!r} is not published as given (Ray got {spec.labels.get(key)!r}); "
                    f"values must already be valid label values"
                )
        for key in spec.labels:
            if key_prefix(key) not in (RAY_PREFIX, PROJECT_PREFIX, backend.label_prefix):
                errors.append(f"label {key!r} is in nobody's namespace (allowed: {RAY_PREFIX}, {PROJECT_PREFIX}, {backend.label_prefix})")
        assert not errors, f"{backend.name} on snapshot {device_snapshot}:\n  " + "\n  ".join(errors)

    def test_matches_golden_ray_spec(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        expected = device_snapshot.expected or {}
        if len(expected.get("descriptions", [])) != 1 or expected.get("problems"):
            pytest.skip(f"snapshot {device_snapshot}'s golden Ray spec covers other families or problems too")
        _desc, spec = self._spec(backend, device_snapshot, suite)
        diff = golden_diff(expected.get("ray"), spec.to_dict())
        assert not diff, f"{backend.name}: Ray spec on snapshot {device_snapshot} differs from expected.json:\n  " + "\n  ".join(diff)


class BaseVisibilityTests(SuiteTests):
    """``visible_devices_env`` is pure and ``parse_visible_devices`` inverts it."""

    @staticmethod
    def _subsets(n: int) -> list[list[int]]:
        subsets = [[0], [n - 1], list(range(0, n, 2)), list(range(n)), []]
        out: list[list[int]] = []
        for s in subsets:
            if s not in out:
                out.append(s)
        return out

    @requires("device_visibility")
    def test_visible_devices_env_is_pure(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        desc = _describe(backend, device_snapshot, suite)
        for subset in self._subsets(len(desc.devices)):
            devices = [desc.devices[i] for i in subset]
            before = dict(os.environ)
            first = dict(backend.visible_devices_env(devices))
            second = dict(backend.visible_devices_env(list(devices)))
            assert dict(os.environ) == before, f"{backend.name}.visible_devices_env({subset}) changed os.environ; it must only return"
            assert first == second, f"{backend.name}.visible_devices_env({subset}) is not deterministic: {first} then {second}"
            assert first, f"{backend.name} declares device_visibility but visible_devices_env({subset}) is empty"
            bad = {k: v for k, v in first.items() if not (isinstance(k, str) and k.isidentifier() and isinstance(v, str))}
            assert not bad, f"{backend.name}.visible_devices_env({subset}): not str variable names/values: {bad}"

    @requires("device_visibility")
    def test_visible_devices_round_trip(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        desc = _describe(backend, device_snapshot, suite)
        for subset in self._subsets(len(desc.devices)):
            env = backend.visible_devices_env([desc.devices[i] for i in subset])
            parsed = backend.parse_visible_devices(env)
            assert parsed == subset, (
                f"{backend.name} on snapshot {device_snapshot}: parse_visible_devices(visible_devices_env(devices {subset}))"
                f" = {parsed!r}, expected {subset} (env was {dict(env)})"
            )

    @requires("device_visibility")
    def test_unset_means_all_devices(self, backend: AcceleratorBackend) -> None:
        assert backend.parse_visible_devices({}) is None, (
            f"{backend.name}.parse_visible_devices({{}}) must be None (no variable: every device is visible)"
        )


class BaseLiveRayTests(SuiteTests):
    """A real ``ray start`` through the hook on a snapshot shows what the backend promised."""

    def test_ray_node_shows_promised_resources_and_labels(self, suite: SuiteConfig, live_snapshot: Snapshot) -> None:
        if not suite.live_ray:
            pytest.skip("live Ray check is opt-in: pass --accel-live-ray or set RAY_ACCEL_CONFORMANCE_LIVE_RAY=1")
        if not any(s.name == suite.name for s in available_backends()):
            pytest.skip(f"{suite.name} is not installed under the entry point, so `ray start` cannot load it")
        from ..testing.cluster import SimulatedCluster
        from ..testing.snapshots import run_snapshot

        inventory, spec = run_snapshot(live_snapshot.path)
        desc = next((d for d in inventory.descriptions if d.backend == suite.name), None)
        assert desc is not None, f"discovery on snapshot {live_snapshot} found no {suite.name} devices: {inventory.reasons()}"
        import ray

        with SimulatedCluster() as cluster:
            cluster.add_node(live_snapshot.path, name="conformance", num_cpus=1)
            cluster.connect()
            node = cluster.ray_node("conformance")
            resources, labels = node["Resources"], node["Labels"]
            errors = [
                f"resource {k}: node has {resources.get(k)!r}, promised {v!r}"
                for k, v in spec.resources.items() if resources.get(k) != v
            ]
            errors += [f"label {k}: node has {labels.get(k)!r}, promised {v!r}" for k, v in spec.labels.items() if labels.get(k) != v]
            assert not errors, (
                f"{suite.name}: the Ray node started through RAY_START_HOOK on snapshot {live_snapshot} lacks what "
                f"discovery promised:\n  " + "\n  ".join(errors) + f"\n--- ray start log ---\n{cluster.node('conformance').log()[-2000:]}"
            )
            if desc.resource_quantity >= 1:
                sku_key = SKU

                resource = suite.backend_cls.resource_name
                ask = {"num_gpus": 1} if resource == "GPU" else {"resources": {resource: 1}}

                @ray.remote(num_cpus=0)
                def where() -> str:
                    return ray.get_runtime_context().get_node_id()

                ref = where.options(label_selector={sku_key: spec.labels[sku_key]}, **ask).remote()
                assert ray.get(ref, timeout=60) == node["NodeID"], (
                    f"a task asking for 1 {suite.backend_cls.resource_name} and {sku_key}={spec.labels[sku_key]} "
                    f"did not run on the {suite.name} node"
                )


_BASES = (
    BaseRegistrationTests,
    BaseDetectionTests,
    BaseDescriptionTests,
    BaseAdapterTests,
    BaseVisibilityTests,
    BaseLiveRayTests,
)
