"""Skip markers for optional packages, decided without importing them: ``pytest.importorskip`` at a
module's top imports torch, Ray Train, Serve or Data in every pytest process that collects the
module, including the processes of the lane that then deselects it (seconds of CPU each)."""

from __future__ import annotations

import importlib.util

import pytest


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a dotted name whose parent package is missing
        return False


def installed(*names: str) -> pytest.MarkDecorator:
    """A ``skipif`` marker for a test or module that needs every package of ``names``."""
    missing = [name for name in names if not _installed(name)]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}, which is not installed")
