"""The Ray versions this package is tested with, in one place.

Public Ray inputs (``ray start`` flags, ``RAY_START_HOOK``, ``ray.init(resources=, labels=)``,
label selectors) are used on any Ray; features that touch a Ray internal or an alpha API call
:func:`require_tested_ray` first and refuse, saying why, outside the tested range.
"""

from __future__ import annotations

import re

from .errors import RayVersionError

__all__ = ["TESTED_RAY_VERSIONS", "ray_version", "is_tested_ray", "require_tested_ray"]

# (major, minor) pairs CI runs against. Widen only together with a CI run on the new release.
TESTED_RAY_VERSIONS: tuple[tuple[int, int], ...] = ((2, 60),)


def ray_version() -> str | None:
    """The installed Ray version, or None when Ray is not importable."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("ray")
    except PackageNotFoundError:
        return None


def _major_minor(text: str) -> tuple[int, int] | None:
    m = re.match(r"^(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def is_tested_ray(version: str | None = None) -> bool:
    version = version if version is not None else ray_version()
    return version is not None and _major_minor(version) in TESTED_RAY_VERSIONS


def tested_range_text() -> str:
    return ", ".join(f"{a}.{b}.x" for a, b in TESTED_RAY_VERSIONS)


def require_tested_ray(feature: str, version: str | None = None) -> None:
    """Raise RayVersionError unless the installed Ray is in the tested range."""
    version = version if version is not None else ray_version()
    if not is_tested_ray(version):
        raise RayVersionError(
            f"{feature} uses Ray internals and is tested only with Ray {tested_range_text()}; "
            f"installed: {version or 'none'}",
            feature=feature,
            installed=version,
        )
