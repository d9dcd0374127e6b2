"""The machinery under :mod:`ray_accel_ext.model`: frozen values that round-trip through plain
JSON types, and ``from_dict`` validation that names the field path of every error."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Union

from .errors import DescriptionError

__all__: list[str] = []


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value or {}))


class _Value:
    """Mixin: dict round trip with path-qualified validation errors."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _dump(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: Any, path: str = ""):
        return _load(cls, data, path)


def _without_defaults(value: Any, optional: tuple[str, ...]) -> dict[str, Any]:
    """``to_dict()`` leaving out the ``optional`` fields that hold their default (fields added
    after schema 1 was published, so documents without them stay byte-identical)."""
    out = {f.name: _dump(getattr(value, f.name)) for f in dataclasses.fields(value)}
    for f in dataclasses.fields(value):
        if f.name in optional and getattr(value, f.name) == f.default:
            del out[f.name]
    return out


def _dump(value: Any) -> Any:
    if isinstance(value, _Value):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _dump(v) for k, v in value.items()}
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _typename(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _load(tp: Any, data: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if data is None and type(None) in args:
            return None
        last: DescriptionError | None = None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _load(arg, data, path)
            except DescriptionError as exc:
                last = exc
        raise last or DescriptionError(f"unexpected {_typename(data)}", path)
    if isinstance(tp, type) and issubclass(tp, _Value):
        if not isinstance(data, Mapping):
            raise DescriptionError(f"expected object, got {_typename(data)}", path)
        hints = _hints(tp)
        names = {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise DescriptionError(f"unknown field(s) {unknown}", path)
        kwargs = {}
        for f in dataclasses.fields(tp):
            sub = f"{path}.{f.name}" if path else f.name
            if f.name not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise DescriptionError("required field missing", sub)
                continue
            kwargs[f.name] = _load(hints[f.name], data[f.name], sub)
        try:
            return tp(**kwargs)
        except DescriptionError as exc:
            if path and not exc.path.startswith(path):
                raise DescriptionError(exc.message.split(": ", 1)[-1], f"{path}.{exc.path}" if exc.path else path) from None
            raise
    if origin is tuple:
        if not isinstance(data, (list, tuple)):
            raise DescriptionError(f"expected list, got {_typename(data)}", path)
        (item, _ellipsis) = typing.get_args(tp)
        return tuple(_load(item, v, f"{path}[{i}]") for i, v in enumerate(data))
    if origin in (Mapping, dict, typing.Mapping) or tp is Mapping:
        if not isinstance(data, Mapping):
            raise DescriptionError(f"expected object, got {_typename(data)}", path)
        _k, vt = typing.get_args(tp)
        return {str(k): _load(vt, v, f"{path}[{k!r}]") for k, v in data.items()}
    if tp is bool:
        if not isinstance(data, bool):
            raise DescriptionError(f"expected bool, got {_typename(data)}", path)
        return data
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise DescriptionError(f"expected int, got {_typename(data)}", path)
        return data
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise DescriptionError(f"expected number, got {_typename(data)}", path)
        return float(data)
    if tp is str:
        if not isinstance(data, str):
            raise DescriptionError(f"expected str, got {_typename(data)}", path)
        return data
    raise DescriptionError(f"unsupported type {tp!r}", path)  # pragma: no cover - programming error
