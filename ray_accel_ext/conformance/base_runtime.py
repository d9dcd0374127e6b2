"""Suite areas: the adapter (resources and labels), device visibility, and a live Ray node."""

from __future__ import annotations

import math
import os

import pytest

from ..backend import AcceleratorBackend
from ..labels import (
    PROJECT_PREFIX,
    RAY_PREFIX,
    SKU,
    is_valid_key,
    is_valid_value,
    key_prefix,
)
from ..model import NodeInventory
from ..node.adapter import to_ray_node
from ..node.registry import available_backends
from ._core import (
    SuiteTests,
    golden_diff,
)
from .base_common import _MIN_GRANULARITY, _describe
from .bounded import bounded
from .requirements import requires
from .settings import Snapshot, SuiteConfig

__all__ = ['BaseAdapterTests', 'BaseVisibilityTests', 'BaseLiveRayTests']


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
        # A node whose every device is partitioned (all GPUs in MIG mode) offers none whole.
        if spec.resources.get(backend.resource_name, 0.0 if desc.partitions else None) != desc.resource_quantity:
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
        if not desc.devices:
            pytest.skip("every device is partitioned: none is offered whole")
        for subset in self._subsets(len(desc.devices)):
            devices = [desc.devices[i] for i in subset]
            before = dict(os.environ)
            first = dict(bounded(backend.visible_devices_env, devices, what=f"{backend.name}.visible_devices_env()"))
            second = dict(bounded(backend.visible_devices_env, list(devices), what=f"{backend.name}.visible_devices_env()"))
            assert dict(os.environ) == before, f"{backend.name}.visible_devices_env({subset}) changed os.environ; it must only return"
            assert first == second, f"{backend.name}.visible_devices_env({subset}) is not deterministic: {first} then {second}"
            assert first, f"{backend.name} declares device_visibility but visible_devices_env({subset}) is empty"
            bad = {k: v for k, v in first.items() if not (isinstance(k, str) and k.isidentifier() and isinstance(v, str))}
            assert not bad, f"{backend.name}.visible_devices_env({subset}): not str variable names/values: {bad}"

    @requires("device_visibility")
    def test_visible_devices_round_trip(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        desc = _describe(backend, device_snapshot, suite)
        if not desc.devices:
            pytest.skip("every device is partitioned: none is offered whole")
        for subset in self._subsets(len(desc.devices)):
            env = bounded(backend.visible_devices_env, [desc.devices[i] for i in subset], what=f"{backend.name}.visible_devices_env()")
            parsed = bounded(backend.parse_visible_devices, env, what=f"{backend.name}.parse_visible_devices()")
            assert parsed == subset, (
                f"{backend.name} on snapshot {device_snapshot}: parse_visible_devices(visible_devices_env(devices {subset}))"
                f" = {parsed!r}, expected {subset} (env was {dict(env)})"
            )

    @requires("device_visibility")
    def test_unset_means_all_devices(self, backend: AcceleratorBackend) -> None:
        assert bounded(backend.parse_visible_devices, {}, what=f"{backend.name}.parse_visible_devices()") is None, (
            f"{backend.name}.parse_visible_devices({{}}) must be None (no variable: every device is visible)"
        )


class BaseLiveRayTests(SuiteTests):
    """A real ``ray start`` through the hook on a snapshot shows what the backend promised."""

    def test_ray_node_shows_promised_resources_and_labels(self, suite: SuiteConfig, live_snapshot: Snapshot) -> None:
        desc, spec = self._live_description(suite, live_snapshot)
        import ray

        from ..testing.cluster import SimulatedCluster

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

    @requires("device_visibility")
    def test_ray_isolates_devices_per_task(self, suite: SuiteConfig, backend: AcceleratorBackend, live_snapshot: Snapshot) -> None:
        """Two concurrent one-unit tasks get different ids and the variables for their device; a two-unit
        task gets two ids (``docs/vendors.md``, "What a backend gets at runtime")."""
        desc, _ = self._live_description(suite, live_snapshot)
        from ..node.ray_devices import ray_names

        if backend.resource_name in (ray_names() or ()):
            pytest.skip(f"{backend.resource_name} is Ray's own resource: Ray's own manager isolates it, not "
                        f"{suite.name}.visible_devices_env")
        if len(desc.devices) < 2:
            pytest.skip(f"snapshot {live_snapshot} has {len(desc.devices)} {suite.name} device(s); isolation needs two")
        from .live_isolation import check_isolation

        check_isolation(backend, desc, live_snapshot)

    def _live_description(self, suite: SuiteConfig, live_snapshot: Snapshot):
        """(the backend's description on the snapshot, the node's Ray spec); skips where the live
        check is not asked for or the backend is not installed under the entry point."""
        if not suite.live_ray:
            pytest.skip("live Ray check is opt-in: pass --accel-live-ray or set RAY_ACCEL_CONFORMANCE_LIVE_RAY=1")
        if not any(s.name == suite.name for s in available_backends()):
            pytest.skip(f"{suite.name} is not installed under the entry point, so `ray start` cannot load it")
        from ..testing.snapshots import run_snapshot

        inventory, spec = run_snapshot(live_snapshot.path)
        desc = next((d for d in inventory.descriptions if d.backend == suite.name), None)
        assert desc is not None, f"discovery on snapshot {live_snapshot} found no {suite.name} devices: {inventory.reasons()}"
        return desc, spec
