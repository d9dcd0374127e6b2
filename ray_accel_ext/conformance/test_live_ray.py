"""Black-box run of ``BaseLiveRayTests`` against the backend named by ``--accel-backend``."""

from ray_accel_ext.conformance.base import BaseLiveRayTests


class TestLiveRay(BaseLiveRayTests):
    """Settings come from --accel-* options or RAY_ACCEL_CONFORMANCE_* variables."""
