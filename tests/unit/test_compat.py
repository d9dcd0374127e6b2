"""compat.RAY_FEATURES against the Ray installed here: each feature is there exactly when the table
says so. CI runs this file on the oldest supported Ray and on the newest (ci/ray_matrix.sh), so
each row is checked at both ends; the releases between were read from their wheels (the
``where`` column)."""

from __future__ import annotations

import inspect

import pytest

from ray_accel_ext.compat import (
    MIN_RAY_VERSION,
    RAY_FEATURES,
    TESTED_RAY_VERSIONS,
    has_feature,
    is_supported_ray,
    is_tested_ray,
    missing_features,
    ray_version,
    require_feature,
)
from ray_accel_ext.errors import RayVersionError
from tests.support.paths import REPO

ray = pytest.importorskip("ray")


def _present(name: str) -> bool:
    if name == "start_hook":
        import ray.scripts.scripts as scripts
        from ray._private.parameter import RayParams

        params = inspect.signature(RayParams).parameters
        return ("load_class(os.environ[ray_constants.RAY_START_HOOK])(ray_params, head)" in inspect.getsource(scripts)
                and {"resources", "labels", "num_gpus"} <= set(params))
    if name == "label_selector":
        from ray._common import ray_option_utils

        return "label_selector" in ray_option_utils.task_options and "label_selector" in ray_option_utils.actor_options
    if name in ("bundle_label_selector", "topology_strategy"):
        from ray.util.placement_group import placement_group

        return name in inspect.signature(placement_group).parameters
    if name == "tpu_slice_placement_group":
        import ray.util.tpu as tpu

        return {"topology", "accelerator_version"} <= set(inspect.signature(tpu.slice_placement_group).parameters)
    raise AssertionError(f"no probe for {name}")


def test_installed_ray_is_supported_and_tested():
    assert is_supported_ray(), ray_version()
    if not is_tested_ray():
        pytest.skip(f"Ray {ray_version()} is newer than the newest tested release {max(TESTED_RAY_VERSIONS)}: "
                    "run CI on it, then move TESTED_RAY_VERSIONS up")


@pytest.mark.parametrize("name", sorted(RAY_FEATURES))
def test_feature_table_matches_this_ray(name):
    assert has_feature(name) == _present(name), (name, ray_version(), RAY_FEATURES[name].where)


def test_what_the_version_lacks_is_refused_with_the_reason():
    for feature in missing_features():
        with pytest.raises(RayVersionError, match=f"{feature.name} needs Ray {feature.since[0]}.{feature.since[1]}"):
            require_feature(feature.name)


def test_the_range():
    assert min(TESTED_RAY_VERSIONS) == MIN_RAY_VERSION
    assert not is_supported_ray("2.54.1") and is_supported_ray("2.55.0") and is_supported_ray("3.0.0")
    assert is_tested_ray("2.57.1") and not is_tested_ray("2.61.0") and not is_tested_ray("2.54.0")
    assert [f.name for f in missing_features("2.56.1")] == ["topology_strategy"]
    assert missing_features("2.57.0") == [] and len(missing_features("2.40.0")) == len(RAY_FEATURES)


def test_package_metadata_and_readme_state_the_same_range():
    import re

    import tomllib

    repo = REPO
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    low = f"{MIN_RAY_VERSION[0]}.{MIN_RAY_VERSION[1]}"
    pins = [r for extra in project["optional-dependencies"].values() for r in extra if re.match(r"ray\b", r)]
    assert pins and all(re.fullmatch(rf"ray(\[[a-z,]+\])?>={re.escape(low)}", p) for p in pins), pins  # no upper bound
    readme = (repo / "README.md").read_text()
    assert f"Ray {low} and newer" in readme
    high = max(TESTED_RAY_VERSIONS)
    assert f"{low} to {high[0]}.{high[1]}" in readme
