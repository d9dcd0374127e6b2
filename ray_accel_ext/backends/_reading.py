"""The envelope every recorded library reading shares (NVML, AMD SMI): ``{"format": N, "devices": [...]}``,
and reading one through the host with what went wrong as coded problems."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..errors import HostReadError
from ..host import Host
from ..model import Problem
from ..problems import FILE_UNREADABLE

__all__ = ["reading_devices", "library_reading", "never_raises", "any_readable"]

_T = TypeVar("_T")


def never_raises(probe: Callable[[], object]) -> bool:
    """``bool(probe())``, False when it raises anything: ``detect`` never raises (the contract)."""
    try:
        return bool(probe())
    except Exception:  # noqa: BLE001 - detect never raises
        return False


def any_readable(items: Iterable[_T], test: Callable[[_T], object]) -> bool:
    """Whether ``test`` holds for some item; an item whose files cannot be read or parsed is skipped."""
    for item in items:
        try:
            if test(item):
                return True
        except (HostReadError, ValueError):
            continue
    return False


def library_reading(host: Host, name: str, label: str, read_live: Callable[[], Any],
                    validate: Callable[[Any], list[str]], problems: list[Problem | str]) -> dict[str, Any] | None:
    """The host's reading of library ``name`` (``label`` in problem lines), validated; None when
    the library is absent or its reading unusable (then a problem says why)."""
    try:
        reading = host.library(name, read_live)
    except HostReadError as exc:
        problems.append(Problem.of(exc, f"{label}: {exc}"))
        return None
    except Exception as exc:  # noqa: BLE001 - a driver/binding failure must not take the node down
        problems.append(f"{label}: {type(exc).__name__}: {exc}")
        return None
    if reading is None:
        return None
    errors = validate(reading)
    if errors:
        problems.append(Problem(code=FILE_UNREADABLE, message=f"{label} reading malformed: " + "; ".join(errors[:5])))
        return None
    if reading.get("error"):
        problems.append(f"{label}: {reading['error']}")
    return reading


def reading_devices(reading: Any, format_version: int | tuple[int, ...]) -> tuple[list[str], list[Any] | None]:
    """(errors, devices) of a library reading: what is wrong with its envelope, and its device
    list (None when there is none to check further); ``format_version`` the one format (or the
    formats) this reader reads."""
    if not isinstance(reading, dict):
        return [f"expected an object, got {type(reading).__name__}"], None
    errors: list[str] = []
    accepted = format_version if isinstance(format_version, tuple) else (format_version,)
    if reading.get("format") not in accepted:
        shown = " or ".join(str(v) for v in accepted)
        errors.append(f"format: expected {shown}, got {reading.get('format')!r}")
    devices = reading.get("devices")
    if not isinstance(devices, list):
        return errors + [f"devices: expected a list, got {type(devices).__name__}"], None
    return errors, devices
