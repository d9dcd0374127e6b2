"""Black-box run of ``BaseAdapterTests`` against the backend named by ``--accel-backend``."""

from ray_accel_ext.conformance.base import BaseAdapterTests


class TestAdapter(BaseAdapterTests):
    """Settings come from --accel-* options or RAY_ACCEL_CONFORMANCE_* variables."""
