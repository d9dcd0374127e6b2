"""Checks on a backend's answer before it is published: text no node should publish.

A description's strings are at most :data:`~ray_accel_ext.bounds.MAX_TEXT` characters without
control characters, and every value that becomes a Ray resource name is a valid label value;
what breaks the rule is reported, so the node is degraded with the field named.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import fields, is_dataclass
from typing import Any

from ..bounds import CONTROL_RE, MAX_TEXT
from ..labels import is_valid_value
from ..model import Problem
from ..problems import DESCRIPTION_INVALID

__all__ = ["description_problems"]

_CONTROL_RE = CONTROL_RE


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


def description_problems(desc: Any) -> list[Problem]:
    """Why ``desc`` (a NodeDescription) carries text no node should publish; empty when clean.

    Checked: every string (at most :data:`MAX_TEXT` characters, no control characters; problems
    are free text and only capped), and the values the adapter turns into Ray resource names (the
    SKU's Ray accelerator type, ``accelerator_type:<T>``; a TPU slice name, ``<slice-name>``):
    these must be valid label values, else the resource is left out (``adapter``)."""
    out = [Problem(code=DESCRIPTION_INVALID, message=line, backend=desc.backend) for line in _text_problems(desc)]
    return out


def _text_problems(desc: Any) -> list[str]:
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
