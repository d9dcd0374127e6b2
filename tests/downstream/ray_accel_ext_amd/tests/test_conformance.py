"""ray_accel_ext's conformance suite on this backend: class data only, no overridden tests."""

from ray_accel_ext.conformance.base import (
    BaseAdapterTests,
    BaseDescriptionTests,
    BaseDetectionTests,
    BaseLiveRayTests,
    BaseRegistrationTests,
    BaseVisibilityTests,
)
from ray_accel_ext_amd import AMDGPUBackend


class AMD:
    backend_cls = AMDGPUBackend
    snapshots = "hosts"
    xfails = "../conformance-xfails.txt"


class TestRegistration(AMD, BaseRegistrationTests):
    pass


class TestDetection(AMD, BaseDetectionTests):
    pass


class TestDescription(AMD, BaseDescriptionTests):
    pass


class TestAdapter(AMD, BaseAdapterTests):
    pass


class TestVisibility(AMD, BaseVisibilityTests):
    pass


class TestLiveRay(AMD, BaseLiveRayTests):
    pass
