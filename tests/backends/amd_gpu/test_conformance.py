"""The shared conformance suite on the in-tree AMD Instinct backend: class data only, no overridden tests."""


from ray_accel_ext.backends.amd_gpu.backend import AMDGPUBackend
from ray_accel_ext.conformance.base import (
    BaseAdapterTests,
    BaseDescriptionTests,
    BaseDetectionTests,
    BaseLiveRayTests,
    BaseRegistrationTests,
    BaseVisibilityTests,
)
from tests.support.paths import HOSTS


class AMD:
    backend_cls = AMDGPUBackend
    snapshots = str(HOSTS / "amd_gpu")


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
