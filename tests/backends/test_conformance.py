"""The shared conformance suite on the in-tree PCI GPU/accelerator backends: class data only, no
overridden tests. One class per family and area (``TestDescription_nvidia_gpu``), as a vendor's
test module would write them by hand."""

from ray_accel_ext.backends.amd_gpu.backend import AMDGPUBackend
from ray_accel_ext.backends.gaudi.backend import GaudiBackend
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

# family (its snapshots under tests/data/hosts/<family>) -> backend class
FAMILIES = {"amd_gpu": AMDGPUBackend, "gaudi": GaudiBackend, "nvidia_gpu": NvidiaGPUBackend}
AREAS = {
    "Registration": BaseRegistrationTests,
    "Detection": BaseDetectionTests,
    "Description": BaseDescriptionTests,
    "Adapter": BaseAdapterTests,
    "Visibility": BaseVisibilityTests,
    "LiveRay": BaseLiveRayTests,
}

for _family, _backend in FAMILIES.items():
    for _area, _base in AREAS.items():
        _name = f"Test{_area}_{_family}"
        globals()[_name] = type(_name, (_base,), {
            "backend_cls": _backend, "snapshots": str(HOSTS / _family), "__module__": __name__, "__qualname__": _name,
        })
