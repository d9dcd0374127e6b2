"""The shared conformance suite for ``ray_accel_ext`` backends, shipped with the package.

Run it against an installed backend (black-box mode)::

    pytest --pyargs ray_accel_ext.conformance --accel-backend acme_npu \\
        --accel-snapshots tests/hosts [--accel-xfails conformance-xfails.txt] [--accel-live-ray]

(or ``ray-accel conformance acme_npu --snapshots tests/hosts``), or subclass its base classes in
your own tests (subclass mode), setting data, never overriding tests::

    from ray_accel_ext.conformance.base import BaseDescriptionTests

    class TestAcmeDescription(BaseDescriptionTests):
        backend_cls = AcmeNPUBackend
        snapshots = "hosts"

Every option also comes from an environment variable (``RAY_ACCEL_CONFORMANCE_BACKEND``,
``_SNAPSHOTS``, ``_XFAILS``, ``_LIVE_RAY``); see :mod:`ray_accel_ext.conformance.settings`. With
no backend given, the suite runs against the reference ``FakeBackend``, so it always tests itself.

Policy (borrowed from pandas' extension tests): the suite is versioned with ``ray_accel_ext``;
moving or renaming its tests is not done lightly, because vendors' xfails files and CHECKLIST.md
name them (``BaseDescriptionTests::test_matches_golden``). Pin a ``ray_accel_ext`` release in
your CI job. Tests check capabilities, never vendors: a capability you do not declare is skipped
with a reason, one you declare but do not deliver fails. Known failures go in the xfails file
(strict: a fixed bug fails as XPASS until its line is removed); overriding a suite test fails it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BaseRegistrationTests",
    "BaseDetectionTests",
    "BaseDescriptionTests",
    "BaseAdapterTests",
    "BaseVisibilityTests",
    "BaseLiveRayTests",
]


def __getattr__(name: str) -> Any:
    # Lazy: the pytest11 plugin imports this package in every pytest session; the suite itself
    # (and its imports) loads only when a conformance test is collected.
    if name in __all__:
        from . import base

        return getattr(base, name)
    raise AttributeError(name)
