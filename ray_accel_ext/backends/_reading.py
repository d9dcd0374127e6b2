"""The envelope every recorded library reading shares (NVML, AMD SMI): ``{"format": N, "devices": [...]}``."""

from __future__ import annotations

from typing import Any

__all__ = ["reading_devices"]


def reading_devices(reading: Any, format_version: int) -> tuple[list[str], list[Any] | None]:
    """(errors, devices) of a library reading: what is wrong with its envelope, and its device
    list (None when there is none to check further)."""
    if not isinstance(reading, dict):
        return [f"expected an object, got {type(reading).__name__}"], None
    errors: list[str] = []
    if reading.get("format") != format_version:
        errors.append(f"format: expected {format_version}, got {reading.get('format')!r}")
    devices = reading.get("devices")
    if not isinstance(devices, list):
        return errors + [f"devices: expected a list, got {type(devices).__name__}"], None
    return errors, devices
