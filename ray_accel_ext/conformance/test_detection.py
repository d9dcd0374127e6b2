"""Black-box run of ``BaseDetectionTests`` against the backend named by ``--accel-backend``."""

from ray_accel_ext.conformance.base import BaseDetectionTests


class TestDetection(BaseDetectionTests):
    """Settings come from --accel-* options or RAY_ACCEL_CONFORMANCE_* variables."""
