"""The Ray versions this package supports, and which Ray features and interfaces the installed Ray has.

Supported: Ray 2.55 and every newer release (no upper bound in the package metadata, so installing
this package never holds Ray back). CI runs the Ray-integration tests on the oldest supported
release and on the newest (:data:`TESTED_RAY_VERSIONS` records which; it decides nothing at run time).

What runs is decided by **probes of the installed Ray's shape**, never by its version number: each
public feature of :data:`RAY_FEATURES` and each private interface of :data:`RAY_INTERFACES` has a
probe that looks for the function, parameter or constant this package uses. A feature a Ray lacks
is switched off with a message, never a crash: :func:`has_feature` decides the default,
:func:`require_feature` raises :class:`~ray_accel_ext.errors.RayVersionError` when a caller asks for
it explicitly. A private interface whose probe fails (:func:`interface_problem`) is not used, and
the node says so (``ray-accel doctor``: ``ray-interface-missing``). The ``since`` column is the
first release that has a feature, read from that release's wheel: it answers "which Ray would" for
a Ray that is not installed here (a manifest's ``rayVersion``), and the table check
(``tests/unit/test_compat.py``) holds it against the probes on the oldest and the newest Ray.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import RayVersionError

__all__ = [
    "MIN_RAY_VERSION", "TESTED_RAY_VERSIONS", "RAY_FEATURES", "RAY_INTERFACES", "RayFeature", "RayInterface",
    "ray_version", "is_supported_ray", "is_tested_ray", "has_feature", "require_feature", "missing_features",
    "feature_problem", "interface_problem", "tested_range_text",
]

MIN_RAY_VERSION: tuple[int, int] = (2, 55)
# (major, minor) pairs CI runs the Ray tests against: the oldest supported and the newest release.
# A record for CI and the docs; nothing at run time depends on it (the probes below decide).
TESTED_RAY_VERSIONS: tuple[tuple[int, int], ...] = ((2, 55), (2, 60))


def _probe_start_hook() -> str | None:
    from ray._private import ray_constants
    from ray._private.parameter import RayParams

    missing = {"resources", "labels", "num_gpus"} - set(inspect.signature(RayParams).parameters)
    if getattr(ray_constants, "RAY_START_HOOK", None) != "RAY_START_HOOK":
        return "ray._private.ray_constants.RAY_START_HOOK is not 'RAY_START_HOOK'"
    return f"RayParams lacks {', '.join(sorted(missing))}" if missing else None


def _probe_label_selector() -> str | None:
    from ray._common import ray_option_utils

    ok = "label_selector" in ray_option_utils.task_options and "label_selector" in ray_option_utils.actor_options
    return None if ok else "the task/actor options lack label_selector"


@functools.lru_cache(maxsize=8)
def _parameters(fn: Callable[..., Any]) -> frozenset[str]:
    """``fn``'s parameter names, read once per function object (placement asks on every call)."""
    return frozenset(inspect.signature(fn).parameters)


def _pg_parameter(name: str) -> Callable[[], str | None]:
    def probe() -> str | None:
        from ray.util.placement_group import placement_group

        return None if name in _parameters(placement_group) else f"placement_group() has no {name}="
    return probe


def _probe_tpu_slice_pg() -> str | None:
    import ray.util.tpu as tpu

    fn = getattr(tpu, "slice_placement_group", None)
    if fn is None:
        return "ray.util.tpu has no slice_placement_group"
    missing = {"topology", "accelerator_version"} - set(inspect.signature(fn).parameters)
    return f"slice_placement_group() lacks {', '.join(sorted(missing))}" if missing else None


def _probe_accelerator_registry() -> str | None:
    import ray._private.accelerators as accelerators

    import _ray_accel_ext_devices as boot

    return boot.registry_problem(accelerators)


def _probe_tpu_manager_env() -> str | None:
    from ray._private.accelerators import tpu

    expected = {"GKE_TPU_ACCELERATOR_TYPE_ENV_VAR": "TPU_ACCELERATOR_TYPE", "GKE_TPU_NAME_ENV_VAR": "TPU_NAME",
                "GKE_TPU_WORKER_ID_ENV_VAR": "TPU_WORKER_ID", "GKE_TPU_TOPOLOGY_ENV_VAR": "TPU_TOPOLOGY"}
    wrong = [f"{k} != {v!r}" for k, v in expected.items() if getattr(tpu, k, None) != v]
    if not hasattr(tpu, "TPUAcceleratorManager"):
        wrong.insert(0, "no TPUAcceleratorManager")
    return f"ray._private.accelerators.tpu: {', '.join(wrong)}" if wrong else None


@dataclass(frozen=True)
class RayFeature:
    """One Ray feature this package uses: the first supported release that has it, where it lives
    in Ray, what this package does without it, and the probe that finds it in the installed Ray
    (returns what is missing, None when it is there)."""

    name: str
    since: tuple[int, int]
    where: str
    without: str
    probe: Callable[[], str | None] = field(default=lambda: None, compare=False, repr=False)


@dataclass(frozen=True)
class RayInterface:
    """A private Ray interface this package uses, and the probe of its shape."""

    name: str
    where: str
    without: str
    probe: Callable[[], str | None] = field(compare=False, repr=False)


RAY_FEATURES: dict[str, RayFeature] = {f.name: f for f in (
    RayFeature("start_hook", (2, 55),
               "ray/scripts/scripts.py: RAY_START_HOOK loaded with load_class and called as (ray_params, head), "
               "ray_params.resources/labels/num_gpus (2.55.1 line 862, 2.60.0 line 965)",
               "the node starts without accelerator labels", probe=_probe_start_hook),
    RayFeature("label_selector", (2, 55),
               "ray/_common/ray_option_utils.py: the label_selector and fallback_strategy task/actor options",
               "tasks cannot be placed by label (ray-accel demo and the conformance suite's placement check refuse)",
               probe=_probe_label_selector),
    RayFeature("bundle_label_selector", (2, 55),
               "ray/util/placement_group.py: placement_group(bundle_label_selector=)",
               "ray_accel_ext.placement cannot pin bundles to a domain and refuses", probe=_pg_parameter("bundle_label_selector")),
    RayFeature("topology_strategy", (2, 57),
               "ray/util/placement_group.py: placement_group(topology_strategy=) and the State API column "
               "(ray/util/state/common.py); absent from 2.55.1 and 2.56.1",
               "placement pins every bundle with bundle_label_selector only, and the inventory shows no "
               "topology_strategy", probe=_pg_parameter("topology_strategy")),
    RayFeature("tpu_slice_placement_group", (2, 55),
               "ray/util/tpu.py: slice_placement_group(topology, accelerator_version, resources_per_bundle, "
               "num_slices) reading ray.io/tpu-* labels and the TPU-<pod type>-head resource "
               "(chips_per_vm, head_reservation_timeout_s and release_head_pgs from 2.56, pg_per_slice and "
               "tpu_resource_per_chip from 2.58)",
               "Ray's own TPU slice helpers are unavailable; ray_accel_ext.placement still reserves slices", probe=_probe_tpu_slice_pg),
)}

RAY_INTERFACES: dict[str, RayInterface] = {i.name: i for i in (
    RayInterface("accelerator_registry",
                 "ray/_private/accelerators/__init__.py: get_all_accelerator_managers, "
                 "get_all_accelerator_resource_names, get_accelerator_manager_for_resource, and the "
                 "AcceleratorManager static methods (accelerator.py)",
                 "vendor families are not isolated per task (every task sees every device) and the families Ray "
                 "detects itself are not pinned next to ours (Ray keeps one family per node)",
                 _probe_accelerator_registry),
    RayInterface("tpu_manager_env",
                 "ray/_private/accelerators/tpu.py: TPUAcceleratorManager reading TPU_ACCELERATOR_TYPE, TPU_NAME, "
                 "TPU_WORKER_ID and TPU_TOPOLOGY (the GKE_TPU_*_ENV_VAR constants)",
                 "the start hook does not hand its TPU slice to Ray's TPU manager, which then asks the metadata "
                 "server itself",
                 _probe_tpu_manager_env),
)}


def ray_version() -> str | None:
    """The installed Ray version, or None when Ray is not importable."""
    return _ray_version_on(tuple(sys.path))


@functools.lru_cache(maxsize=4)
def _ray_version_on(path: tuple[str, ...]) -> str | None:
    # Read once per import path: each read parses Ray's whole METADATA file, and placement asks
    # on every reservation.
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("ray")
    except PackageNotFoundError:
        return None


def _major_minor(text: str | None) -> tuple[int, int] | None:
    m = re.match(r"^(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _installed(version: str | None) -> str | None:
    return version if version is not None else ray_version()


def is_supported_ray(version: str | None = None) -> bool:
    """True for Ray 2.55 and newer (``version`` defaults to the installed one)."""
    mm = _major_minor(_installed(version))
    return mm is not None and mm >= MIN_RAY_VERSION


def is_tested_ray(version: str | None = None) -> bool:
    """True within the range CI covers (information for ``doctor``; nothing is switched by it)."""
    mm = _major_minor(_installed(version))
    return mm is not None and min(TESTED_RAY_VERSIONS) <= mm <= max(TESTED_RAY_VERSIONS)


def tested_range_text() -> str:
    low, high = min(TESTED_RAY_VERSIONS), max(TESTED_RAY_VERSIONS)
    return f"{low[0]}.{low[1]} to {high[0]}.{high[1]}"


def _run_probe(probe: Callable[[], str | None]) -> str | None:
    try:
        return probe()
    except Exception as exc:  # noqa: BLE001 - an import or attribute that is not there is the answer
        return f"{type(exc).__name__}: {exc}"


def feature_problem(name: str) -> str | None:
    """What the installed Ray lacks of feature ``name`` (its probe), None when it has it."""
    if ray_version() is None:
        return "Ray is not installed"
    return _run_probe(RAY_FEATURES[name].probe)


def interface_problem(name: str) -> str | None:
    """Why the private interface ``name`` of :data:`RAY_INTERFACES` cannot be used with the installed
    Ray (its probe), None when it can."""
    if ray_version() is None:
        return "Ray is not installed"
    return _run_probe(RAY_INTERFACES[name].probe)


def has_feature(name: str, version: str | None = None) -> bool:
    """Whether the installed Ray has the feature ``name`` of :data:`RAY_FEATURES` (its probe), or,
    for a ``version`` that is not the installed one, whether that release would (the table)."""
    if version is None or version == ray_version():
        return feature_problem(name) is None
    mm = _major_minor(version)
    return mm is not None and mm >= RAY_FEATURES[name].since


def require_feature(name: str, version: str | None = None) -> None:
    """Raise RayVersionError, saying what needs which Ray, unless the feature is there."""
    version = _installed(version)
    if not has_feature(name, version):
        feature = RAY_FEATURES[name]
        found = feature_problem(name) if version == ray_version() else None
        raise RayVersionError(
            f"{feature.name} needs Ray {feature.since[0]}.{feature.since[1]} or newer ({feature.where}); "
            f"installed: {version or 'none'}{f' ({found})' if found else ''}. Without it: {feature.without}",
            feature=name,
            installed=version,
        )


def missing_features(version: str | None = None) -> list[RayFeature]:
    """The features of :data:`RAY_FEATURES` the installed Ray (or ``version``) lacks."""
    return [f for f in RAY_FEATURES.values() if not has_feature(f.name, version)]
