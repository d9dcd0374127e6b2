"""The shared conformance suite on the in-tree NVIDIA backend: class data only, no overridden tests."""


from ray_accel_ext.backends.nvidia_gpu.backend import NvidiaGPUBackend
from ray_accel_ext.conformance.base import (
    BaseAdapterTests,
    BaseDescriptionTests,
    BaseDetectionTests,
    BaseLiveRayTests,
    BaseRegistrationTests,
    BaseVisibilityTests,
)
from tests.support.paths import HOSTS


class NVIDIA:
    backend_cls = NvidiaGPUBackend
    snapshots = str(HOSTS / "nvidia_gpu")


class TestRegistration(NVIDIA, BaseRegistrationTests):
    pass


class TestDetection(NVIDIA, BaseDetectionTests):
    pass


class TestDescription(NVIDIA, BaseDescriptionTests):
    pass


class TestAdapter(NVIDIA, BaseAdapterTests):
    pass


class TestVisibility(NVIDIA, BaseVisibilityTests):
    pass


class TestLiveRay(NVIDIA, BaseLiveRayTests):
    pass
