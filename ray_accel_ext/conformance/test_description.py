"""Black-box run of ``BaseDescriptionTests`` against the backend named by ``--accel-backend``."""

from ray_accel_ext.conformance.base import BaseDescriptionTests


class TestDescription(BaseDescriptionTests):
    """Settings come from --accel-* options or RAY_ACCEL_CONFORMANCE_* variables."""
