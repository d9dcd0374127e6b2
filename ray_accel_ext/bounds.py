"""Bounds on values from outside: numbers, settings, JSON, and the strings a description carries.

Everything discovery reads (sysfs, metadata, tool output, the environment) is outside text. The
rules, in one place:

* only ASCII digits are numbers (:func:`ascii_uint`): ``str.isdigit`` and ``int()`` accept
  ``"٣"`` and ``"²"``, Python's regular expressions match them with ``\\d``;
* a numeric setting (``RAY_ACCEL_BUDGET_S`` ...) is a plain decimal inside its range, else it is
  refused with a warning and its default used (:func:`setting`): ``nan``, ``inf``, ``-1`` and
  ``1e10`` are refused, never half-applied (``1e10`` s overflows ``Thread.join``);
* JSON is bounded in size and nesting before it is parsed (:func:`bounded_json`): a deeply nested
  answer is a clear ``ValueError``, never a ``RecursionError``;
* a description's strings are at most :data:`MAX_TEXT` characters without control characters
  (checked at node start by :mod:`ray_accel_ext.node.checks`).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_TEXT",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "CONTROL_RE",
    "ascii_uint",
    "setting_refused",
    "setting",
    "bounded_json",
]

log = logging.getLogger("ray_accel_ext")

MAX_TEXT = 1024
MAX_JSON_BYTES = 1 << 20
MAX_JSON_DEPTH = 32
_UINT_RE = re.compile(r"[0-9]{1,18}", re.ASCII)
_DECIMAL_RE = re.compile(r"[0-9]{1,6}(\.[0-9]{0,6})?|\.[0-9]{1,6}", re.ASCII)
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET_RE = re.compile(r"[\[\]{}]")


def ascii_uint(text: str, *, what: str = "value") -> int:
    """A non-negative integer of ASCII digits (surrounding ASCII blanks allowed); ValueError
    naming ``what`` otherwise."""
    stripped = text.strip(" \t\r\n")
    if not _UINT_RE.fullmatch(stripped):
        raise ValueError(f"{what} {text[:40]!r} is not a number of ASCII digits")
    return int(stripped)


def setting(env: Mapping[str, str], name: str, default: float, *, high: float) -> float:
    """The number of seconds (or units) ``env[name]`` gives, in ``(0, high]``; ``default`` with a
    warning when it is not a plain ASCII decimal in that range, ``default`` silently when unset."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = _decimal(raw.strip(), high)
    if value is not None:
        return value
    log.warning("ray_accel_ext: %s=%r refused (a decimal in (0, %g] is expected); using %g",
                name, raw[:40], high, default)
    return default


def _decimal(text: str, high: float) -> float | None:
    value = float(text) if _DECIMAL_RE.fullmatch(text) else math.nan
    return value if math.isfinite(value) and 0 < value <= high else None


def setting_refused(env: Mapping[str, str], name: str, *, high: float) -> bool:
    """Whether :func:`setting` would refuse ``env[name]`` (set, but not a decimal in ``(0, high]``)."""
    raw = env.get(name, "").strip()
    return bool(raw) and _decimal(raw, high) is None


def bounded_json(text: str | bytes, *, what: str = "JSON", max_bytes: int = MAX_JSON_BYTES,
                 max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)`` once ``text`` is known to be at most ``max_bytes`` long and nested at
    most ``max_depth`` levels; ValueError naming ``what`` otherwise (also for NaN/Infinity)."""
    if isinstance(text, bytes):
        if len(text) > max_bytes:
            raise ValueError(f"{what}: larger than {max_bytes} bytes")
        text = text.decode("utf-8")
    elif len(text) > max_bytes:
        raise ValueError(f"{what}: larger than {max_bytes} characters")
    if text.count("[") + text.count("{") > max_depth:
        depth = deepest = 0
        for bracket in _BRACKET_RE.findall(_STRING_RE.sub('""', text)):
            depth += 1 if bracket in "[{" else -1
            if depth > deepest:
                deepest = depth
                if deepest > max_depth:
                    raise ValueError(f"{what}: nested deeper than {max_depth} levels")

    def constant(name: str) -> Any:
        raise ValueError(f"{what}: {name} is not a JSON number")

    try:
        return json.loads(text, parse_constant=constant)
    except RecursionError:  # cannot happen after the scan; kept so no caller ever sees one
        raise ValueError(f"{what}: nested too deeply") from None
