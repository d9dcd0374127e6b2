"""Black-box run of ``BaseVisibilityTests`` against the backend named by ``--accel-backend``."""

from ray_accel_ext.conformance.base import BaseVisibilityTests


class TestVisibility(BaseVisibilityTests):
    """Settings come from --accel-* options or RAY_ACCEL_CONFORMANCE_* variables."""
