"""compat's probes against the Ray installed here: each feature's probe agrees with the table's first
release, each private interface this package uses is found, and a feature or interface faked away
is switched off by its probe whatever the version says. CI runs this file on the oldest supported
Ray and on the newest (ci/ray_matrix.sh), so each row is checked at both ends; the releases between
were read from their wheels (the ``where`` column)."""

from __future__ import annotations

import re

import pytest

from ray_accel_ext.compat import (
    MIN_RAY_VERSION,
    RAY_FEATURES,
    RAY_INTERFACES,
    TESTED_RAY_VERSIONS,
    feature_problem,
    has_feature,
    interface_problem,
    is_supported_ray,
    is_tested_ray,
    missing_features,
    ray_version,
    require_feature,
)
from ray_accel_ext.errors import RayVersionError
from tests.support.paths import REPO

ray = pytest.importorskip("ray")


def test_installed_ray_is_supported_and_tested():
    assert is_supported_ray(), ray_version()
    if not is_tested_ray():
        pytest.skip(f"Ray {ray_version()} is newer than the newest tested release {max(TESTED_RAY_VERSIONS)}: "
                    "run CI on it, then move TESTED_RAY_VERSIONS up")


@pytest.mark.parametrize("name", sorted(RAY_FEATURES))
def test_feature_probe_matches_the_table_on_this_ray(name):
    installed = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", ray_version()).groups())
    assert (feature_problem(name) is None) == (installed >= RAY_FEATURES[name].since), (
        name, ray_version(), feature_problem(name), RAY_FEATURES[name].where)
    assert has_feature(name) == (feature_problem(name) is None)


@pytest.mark.parametrize("name", sorted(RAY_INTERFACES))
def test_private_interfaces_are_found_on_this_ray(name):
    assert interface_problem(name) is None, (name, ray_version(), RAY_INTERFACES[name].where)


def test_a_feature_faked_away_is_off_whatever_the_version(monkeypatch):
    import sys

    from ray_accel_ext.placement import use_topology_strategy

    pg_module = sys.modules["ray.util.placement_group"]  # ray.util.placement_group the attribute is the function

    def placement_group(bundles, strategy="PACK", name="", lifetime=None, bundle_label_selector=None):
        raise AssertionError("never called")

    monkeypatch.setattr(pg_module, "placement_group", placement_group)
    assert "placement_group() has no topology_strategy=" in feature_problem("topology_strategy")
    assert use_topology_strategy(None) is False and has_feature("bundle_label_selector")
    with pytest.raises(RayVersionError, match="has no topology_strategy="):
        require_feature("topology_strategy")


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
    # Requirements on Ray itself (not on this package's own extras, "ray-accel-ext[...]").
    pins = [r for extra in project["optional-dependencies"].values() for r in extra
            if re.split(r"[\[<>=!~;\s]", r, maxsplit=1)[0] == "ray"]
    assert pins and all(re.fullmatch(rf"ray(\[[a-z,]+\])?>={re.escape(low)}", p) for p in pins), pins  # no upper bound
    readme = (repo / "README.md").read_text()
    assert f"Ray {low} and newer" in readme
    high = max(TESTED_RAY_VERSIONS)
    assert f"{low} to {high[0]}.{high[1]}" in readme
