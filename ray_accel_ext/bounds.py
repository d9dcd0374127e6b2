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
* a description's strings are at most :data:`MAX_TEXT` characters without control characters, and
  every value that becomes a Ray resource name is a valid label value
  (:func:`description_problems`); what breaks the rule is reported, so the node is degraded with
  the field named.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import fields, is_dataclass
from typing import Any

from .labels import is_valid_value

__all__ = [
    "MAX_TEXT",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "ascii_uint",
    "setting",
    "bounded_json",
    "description_problems",
]

log = logging.getLogger("ray_accel_ext")

MAX_TEXT = 1024
MAX_JSON_BYTES = 1 << 20
MAX_JSON_DEPTH = 32
_UINT_RE = re.compile(r"[0-9]{1,18}", re.ASCII)
_DECIMAL_RE = re.compile(r"[0-9]{1,6}(\.[0-9]{0,6})?|\.[0-9]{1,6}", re.ASCII)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
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
    text = raw.strip()
    value = float(text) if _DECIMAL_RE.fullmatch(text) else math.nan
    if math.isfinite(value) and 0 < value <= high:
        return value
    log.warning("ray_accel_ext: %s=%r refused (a decimal in (0, %g] is expected); using %g",
                name, raw[:40], high, default)
    return default


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


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string in a JSON-shaped value (mapping keys too), with its field path."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            key = str(k)
            sub = f"{path}.{key[:40]}" if path else key[:40]
            yield f"{sub} (key)", key
            yield from _strings(v, sub)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


_SCALARS = frozenset({int, float, bool, type(None)})


def _any_bad_text(value: Any) -> bool:
    """Whether any string in ``value`` (dataclasses, mappings with their keys, sequences) is too
    long or holds a control character: the fast pass, without field paths."""
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) in _SCALARS:  # most of a description: CPU lists, indices, sizes
            continue
        if isinstance(v, str):
            if len(v) > MAX_TEXT or _CONTROL_RE.search(v):
                return True
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, Mapping):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif is_dataclass(v) and not isinstance(v, type):
            stack.extend(getattr(v, f.name) for f in fields(v))
    return False


def _describe_text(text: str) -> str:
    if len(text) > MAX_TEXT:
        return f"{len(text)} characters (at most {MAX_TEXT})"
    bad = _CONTROL_RE.search(text)
    return f"control character {bad.group()!r}" if bad else "not a valid label value"


def description_problems(desc: Any) -> list[str]:
    """Why ``desc`` (a NodeDescription) carries text no node should publish; empty when clean.

    Checked: every string (at most :data:`MAX_TEXT` characters, no control characters; problems
    are free text and only capped), and the values the adapter turns into Ray resource names (the
    SKU's Ray accelerator type, ``accelerator_type:<T>``; a TPU slice name, ``<slice-name>``):
    these must be valid label values, else the resource is left out (``adapter``)."""
    out: list[str] = []
    if _any_bad_text([getattr(desc, f.name) for f in fields(desc) if f.name != "problems"]):
        # only now the field paths, from the published form
        data = desc.to_dict()
        for path, text in _strings({k: v for k, v in data.items() if k != "problems"}, ""):
            if len(text) > MAX_TEXT or _CONTROL_RE.search(text):
                out.append(f"{path}: {_describe_text(text)}; published only as a sanitised label value, if at all")
    acc = desc.sku.ray_accelerator_type
    if acc is not None and not is_valid_value(acc):
        out.append(f"sku.ray_accelerator_type {acc[:40]!r} ({_describe_text(acc)}) would be a Ray resource "
                   "name; accelerator_type resource left out")
    fabric = desc.fabric
    if fabric is not None and fabric.kind == "tpu-slice" and not is_valid_value(fabric.id):
        out.append(f"fabric.id {fabric.id[:40]!r} ({_describe_text(fabric.id)}) would be the slice's Ray resource "
                   "name; slice resource left out")
    return out
