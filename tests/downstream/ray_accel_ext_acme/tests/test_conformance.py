"""ray_accel_ext's conformance suite on this backend: class data only, no overridden tests."""

from ray_accel_ext.conformance.base import (
    BaseAdapterTests,
    BaseDescriptionTests,
    BaseDetectionTests,
    BaseLiveRayTests,
    BaseRegistrationTests,
    BaseVisibilityTests,
)
from ray_accel_ext_acme import AcmeNPUBackend


class Acme:
    backend_cls = AcmeNPUBackend
    snapshots = "hosts"
    xfails = "../conformance-xfails.txt"


class TestRegistration(Acme, BaseRegistrationTests):
    pass


class TestDetection(Acme, BaseDetectionTests):
    pass


class TestDescription(Acme, BaseDescriptionTests):
    pass


class TestAdapter(Acme, BaseAdapterTests):
    pass


class TestVisibility(Acme, BaseVisibilityTests):
    pass


class TestLiveRay(Acme, BaseLiveRayTests):
    pass
