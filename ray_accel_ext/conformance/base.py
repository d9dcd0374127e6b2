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

# The package's list names the suite's classes once (it exports them lazily, from here).
from . import __all__ as _SUITE
from .base_description import BaseDescriptionTests as BaseDescriptionTests
from .base_detection import BaseDetectionTests as BaseDetectionTests
from .base_registration import BaseRegistrationTests as BaseRegistrationTests
from .base_runtime import BaseAdapterTests as BaseAdapterTests
from .base_runtime import BaseLiveRayTests as BaseLiveRayTests
from .base_runtime import BaseVisibilityTests as BaseVisibilityTests

__all__ = list(_SUITE)


