"""Black-box run of ``BaseRegistrationTests`` against the backend named by ``--accel-backend``."""

from ray_accel_ext.conformance.base import BaseRegistrationTests


class TestRegistration(BaseRegistrationTests):
    """Settings come from --accel-* options or RAY_ACCEL_CONFORMANCE_* variables."""
