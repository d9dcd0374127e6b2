"""Shared fixtures for ray_accel_ext's own tests."""

from __future__ import annotations

from pathlib import Path

import pytest

HOSTS = Path(__file__).parent / "data" / "hosts"


@pytest.fixture(scope="session")
def hosts_dir() -> Path:
    """Root of the recorded host snapshots: tests/data/hosts/<backend>/<scenario>/."""
    return HOSTS
