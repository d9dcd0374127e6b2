"""The Ray versions this package supports and tests, and which Ray features each of them has.

Supported: Ray 2.55 and every newer release (no upper bound in the package metadata, so installing
this package never holds Ray back). CI runs the Ray-integration tests on the oldest supported
release and on the newest (:data:`TESTED_RAY_VERSIONS`); the releases between them differ only in
the features tabled in :data:`RAY_FEATURES`, each found in that release's wheel (file named).

A feature a Ray lacks is switched off with a message, never a crash: :func:`has_feature` decides
the default, :func:`require_feature` raises :class:`~ray_accel_ext.errors.RayVersionError` when a
caller asks for it explicitly. Features that touch a Ray internal or an experimental API also call
:func:`require_tested_ray` and refuse outside the tested range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import RayVersionError

__all__ = [
    "MIN_RAY_VERSION", "TESTED_RAY_VERSIONS", "RAY_FEATURES", "RayFeature", "ray_version", "is_supported_ray",
    "is_tested_ray", "require_tested_ray", "has_feature", "require_feature", "missing_features",
    "tested_range_text",
]

MIN_RAY_VERSION: tuple[int, int] = (2, 55)
# (major, minor) pairs CI runs the Ray tests against: the oldest supported and the newest release.
# Move the second one up together with a CI run on the new release.
TESTED_RAY_VERSIONS: tuple[tuple[int, int], ...] = ((2, 55), (2, 60))


@dataclass(frozen=True)
class RayFeature:
    """One Ray feature this package uses: the first supported release that has it, where it lives
    in Ray, and what this package does without it."""

    name: str
    since: tuple[int, int]
    where: str
    without: str


RAY_FEATURES: dict[str, RayFeature] = {f.name: f for f in (
    RayFeature("start_hook", (2, 55),
               "ray/scripts/scripts.py: RAY_START_HOOK loaded with load_class and called as (ray_params, head), "
               "ray_params.resources/labels/num_gpus (2.55.1 line 862, 2.60.0 line 965)",
               "the node starts without accelerator labels"),
    RayFeature("label_selector", (2, 55),
               "ray/_common/ray_option_utils.py: the label_selector and fallback_strategy task/actor options",
               "tasks cannot be placed by label (ray-accel demo and the conformance suite's placement check refuse)"),
    RayFeature("bundle_label_selector", (2, 55),
               "ray/util/placement_group.py: placement_group(bundle_label_selector=)",
               "ray_accel_ext.placement cannot pin bundles to a domain and refuses"),
    RayFeature("topology_strategy", (2, 57),
               "ray/util/placement_group.py: placement_group(topology_strategy=) and the State API column "
               "(ray/util/state/common.py); absent from 2.55.1 and 2.56.1",
               "placement pins every bundle with bundle_label_selector only, and the inventory shows no "
               "topology_strategy"),
    RayFeature("tpu_slice_placement_group", (2, 55),
               "ray/util/tpu.py: slice_placement_group(topology, accelerator_version, resources_per_bundle, "
               "num_slices) reading ray.io/tpu-* labels and the TPU-<pod type>-head resource "
               "(chips_per_vm, head_reservation_timeout_s and release_head_pgs from 2.56, pg_per_slice and "
               "tpu_resource_per_chip from 2.58)",
               "Ray's own TPU slice helpers are unavailable; ray_accel_ext.placement still reserves slices"),
)}


def ray_version() -> str | None:
    """The installed Ray version, or None when Ray is not importable."""
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
    """True within the range CI covers: from the oldest to the newest tested release."""
    mm = _major_minor(_installed(version))
    return mm is not None and min(TESTED_RAY_VERSIONS) <= mm <= max(TESTED_RAY_VERSIONS)


def tested_range_text() -> str:
    low, high = min(TESTED_RAY_VERSIONS), max(TESTED_RAY_VERSIONS)
    return f"{low[0]}.{low[1]} to {high[0]}.{high[1]}"


def has_feature(name: str, version: str | None = None) -> bool:
    """Whether the installed Ray (or ``version``) has the feature ``name`` of :data:`RAY_FEATURES`."""
    mm = _major_minor(_installed(version))
    return mm is not None and mm >= RAY_FEATURES[name].since


def require_feature(name: str, version: str | None = None) -> None:
    """Raise RayVersionError, saying what needs which Ray, unless the feature is there."""
    version = _installed(version)
    if not has_feature(name, version):
        feature = RAY_FEATURES[name]
        raise RayVersionError(
            f"{feature.name} needs Ray {feature.since[0]}.{feature.since[1]} or newer ({feature.where}); "
            f"installed: {version or 'none'}. Without it: {feature.without}",
            feature=name,
            installed=version,
        )


def missing_features(version: str | None = None) -> list[RayFeature]:
    """The features of :data:`RAY_FEATURES` the installed Ray (or ``version``) lacks."""
    return [f for f in RAY_FEATURES.values() if not has_feature(f.name, version)]


def require_tested_ray(feature: str, version: str | None = None) -> None:
    """Raise RayVersionError unless the installed Ray is in the tested range."""
    version = _installed(version)
    if not is_tested_ray(version):
        raise RayVersionError(
            f"{feature} uses Ray internals and is tested only with Ray {tested_range_text()}; "
            f"installed: {version or 'none'}",
            feature=feature,
            installed=version,
        )
