"""Suite area: registration (entry point, name, prefix, API version, capabilities as data)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ..backend import SUPPORTED_API_VERSIONS, Capabilities
from ..errors import BackendLoadError
from ..labels import (
    PROJECT_PREFIX,
    RAY_PREFIX,
    is_valid_prefix,
    is_valid_value,
)
from ..node.registry import available_backends, load_backend, validate_backend_class
from ._core import (
    SuiteTests,
    overridden_tests,
)
from .base_common import _NAME_RE
from .settings import SuiteConfig

__all__ = ['BaseRegistrationTests']


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
        # the suite areas are SuiteTests' direct subclasses (vendor classes subclass those)
        known = {f"{b.__name__}::{n}" for b in SuiteTests.__subclasses__() for n in vars(b) if n.startswith("test_")}
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
