"""The shared conformance suite on the in-tree Intel Gaudi backend: class data only, no overridden tests."""


from ray_accel_ext.backends.gaudi.backend import GaudiBackend
from ray_accel_ext.conformance.base import (
    BaseAdapterTests,
    BaseDescriptionTests,
    BaseDetectionTests,
    BaseLiveRayTests,
    BaseRegistrationTests,
    BaseVisibilityTests,
)
from tests.support.paths import HOSTS


class GAUDI:
    backend_cls = GaudiBackend
    snapshots = str(HOSTS / "gaudi")


class TestRegistration(GAUDI, BaseRegistrationTests):
    pass


class TestDetection(GAUDI, BaseDetectionTests):
    pass


class TestDescription(GAUDI, BaseDescriptionTests):
    pass


class TestAdapter(GAUDI, BaseAdapterTests):
    pass


class TestVisibility(GAUDI, BaseVisibilityTests):
    pass


class TestLiveRay(GAUDI, BaseLiveRayTests):
    pass
