"""Reading the built-in SKU files and the extra ones, into one :class:`Database`.

Precedence, lowest first: the built-in files, then the files vendor packages declare (entry-point
group ``ray_accel_ext.skus``, by entry-point name), then ``SYSTEM_DIR``, then the directories of
``RAY_ACCEL_SKU_DIR`` from last to first (so the first one listed wins: the operator has the last
word).

A vendor package declares a directory of its own package data, named as a dotted package path::

    [project.entry-points."ray_accel_ext.skus"]
    acme = "ray_accel_ext_acme.skus"      # every *.json in ray_accel_ext_acme/skus/

The directory is found without importing the package (no vendor code runs to read data), and its
files are validated like every other SKU file. Within a directory,
``*.json`` files are read in name order and a later file wins. An entry replaces any earlier
entry with the same ``(vendor_id, device_id, subsystem)``. A file that cannot be read or does
not follow the schema is skipped as a whole and reported; loading never raises.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..bounds import bounded_json
from ..host.entry_points import group_entry_points
from ..host.regular import read_regular
from ._schema import Entry, LeftOut, SkuFile, SkuFileError, validate

__all__ = [
    "BUILTIN_FAMILIES", "ENV_VAR", "MAX_FILES_PER_DIR", "MAX_FILE_BYTES", "SYSTEM_DIR", "Database", "check_file",
    "extra_dirs", "load",
]

ENV_VAR = "RAY_ACCEL_SKU_DIR"
ENTRY_POINT_GROUP = "ray_accel_ext.skus"
SYSTEM_DIR = Path("/etc/ray_accel_ext/skus.d")
BUILTIN_FAMILIES = ("nvidia", "amd", "tpu", "neuron", "gaudi")
MAX_FILE_BYTES = 1 << 20
MAX_FILES_PER_DIR = 256
MAX_JSON_DEPTH = 16  # a SKU file is an object of lists of flat objects


@dataclass(frozen=True, slots=True)
class Database:
    """Every entry after precedence, the left-out ids, pci.ids scope patterns and the problems."""

    entries: Mapping[tuple[str, str, str | None], Entry]
    left_out: tuple[LeftOut, ...]
    scope: Mapping[str, tuple]
    problems: tuple[str, ...]
    files: tuple[str, ...]


def extra_dirs(env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """The extra directories in precedence order (highest first): ``RAY_ACCEL_SKU_DIR``'s, then ``SYSTEM_DIR``."""
    env = os.environ if env is None else env
    listed = [Path(p) for p in env.get(ENV_VAR, "").split(os.pathsep) if p.strip()]
    return (*listed, SYSTEM_DIR)


def check_file(path: str | os.PathLike[str]) -> SkuFile:
    """Read and validate one extra file; raises :class:`SkuFileError` naming the file and field."""
    p = Path(path)
    origin = str(p)
    try:
        # a FIFO, socket or device node is refused unopened: a plain open() of a FIFO blocks for ever
        data = read_regular(origin, MAX_FILE_BYTES)
    except OSError as exc:
        raise SkuFileError(origin, "", f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise SkuFileError(origin, "", f"larger than {MAX_FILE_BYTES} bytes")
    try:
        raw = bounded_json(data, what="JSON", max_bytes=MAX_FILE_BYTES, max_depth=MAX_JSON_DEPTH)
    except UnicodeDecodeError as exc:
        raise SkuFileError(origin, "", f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise SkuFileError(origin, "", f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:  # nested too deeply, NaN
        raise SkuFileError(origin, "", f"not usable JSON: {exc}") from None
    return validate(raw, origin)


def _builtin() -> list[SkuFile | str]:
    out: list[SkuFile | str] = []
    base = resources.files(__package__).joinpath("data")
    for family in BUILTIN_FAMILIES:
        origin = f"builtin:{family}.json"
        try:
            out.append(validate(json.loads(base.joinpath(f"{family}.json").read_text(encoding="utf-8")), origin))
        except (OSError, ValueError) as exc:  # SkuFileError and JSONDecodeError are ValueErrors
            out.append(f"skus: {exc if isinstance(exc, SkuFileError) else f'{origin}: {exc}'}; file ignored")
    return out


def _directory(directory: Path) -> list[SkuFile | str]:
    try:
        names = sorted(p for p in directory.iterdir() if p.suffix == ".json")
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [f"skus: {directory}: cannot list: {exc.strerror or exc}; directory ignored"]
    out: list[SkuFile | str] = []
    if len(names) > MAX_FILES_PER_DIR:
        out.append(f"skus: {directory}: {len(names)} files, only the first {MAX_FILES_PER_DIR} by name are read")
        names = names[:MAX_FILES_PER_DIR]
    for path in names:
        try:
            out.append(check_file(path))
        except SkuFileError as exc:
            out.append(f"skus: {exc}; file ignored")
    return out


def package_dirs() -> list[tuple[str, Path | str]]:
    """(``entry point (distribution)``, its directory, or why it has none) for every entry point of
    :data:`ENTRY_POINT_GROUP`, by entry-point name; nothing is imported."""
    from importlib.util import find_spec

    out: list[tuple[str, Path | str]] = []
    skipped: list[str] = []  # a distribution whose metadata cannot be read: only that one
    found = sorted(set(group_entry_points(ENTRY_POINT_GROUP, skipped)))
    out += [(line.removesuffix("; distribution skipped"), f"its {ENTRY_POINT_GROUP} entry points are not read")
            for line in skipped]
    for name, value, dist in found:
        where = f"entry point {name} = {value!r} ({dist or 'unknown distribution'})"
        top, *rest = value.strip().split(".")
        try:
            spec = find_spec(top) if top.isidentifier() and all(p.isidentifier() for p in rest) else None
        except (ImportError, ValueError) as exc:
            spec, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = "not a dotted package path" if not top.isidentifier() else f"package {top!r} not found"
        locations = list(getattr(spec, "submodule_search_locations", None) or [])
        if not locations:
            out.append((where, why))
            continue
        out.append((where, Path(locations[0]).joinpath(*rest)))
    return out


def _packages() -> list[SkuFile | str]:
    out: list[SkuFile | str] = []
    try:
        found = package_dirs()
    except Exception as exc:  # noqa: BLE001 - broken package metadata must not stop the node
        return [f"skus: reading the {ENTRY_POINT_GROUP} entry points failed: {exc}; vendor SKU files ignored"]
    for where, directory in found:
        if isinstance(directory, str):
            out.append(f"skus: {where}: {directory}; ignored")
        elif not directory.is_dir():
            out.append(f"skus: {where}: {directory} is not a directory; ignored")
        else:
            out.extend(_directory(directory))
    return out


def load(env: Mapping[str, str] | None = None) -> Database:
    """Build the database from the built-in files, the vendor packages' and the extra directories."""
    loaded = _builtin() + _packages()
    for directory in reversed(extra_dirs(env)):
        loaded.extend(_directory(directory))
    entries: dict[tuple[str, str, str | None], Entry] = {}
    left_out: dict[tuple[str, str], LeftOut] = {}
    scope: dict[str, list] = {}
    problems: list[str] = []
    files: list[str] = []
    for item in loaded:
        if isinstance(item, str):
            problems.append(item)
            continue
        files.append(item.origin)
        for entry in item.entries:
            entries[entry.key] = entry
        for lo in item.left_out:
            left_out[(lo.vendor_id, lo.device_id)] = lo
        for vendor_id, patterns in item.scope:
            scope.setdefault(vendor_id, []).extend(patterns)
    return Database(
        entries=entries,
        left_out=tuple(left_out.values()),
        scope={k: tuple(v) for k, v in scope.items()},
        problems=tuple(problems),
        files=tuple(files),
    )
