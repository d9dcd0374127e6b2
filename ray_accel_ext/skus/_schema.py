"""The SKU file schema (``SCHEMA.md``): validation of one parsed file into frozen records.

Every error names the file and the JSON path of the field (``entries[3].memory_gib``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..labels import is_valid_value
from . import ray_names

__all__ = ["SCHEMA_VERSION", "Entry", "LeftOut", "SkuFile", "SkuFileError", "validate"]

SCHEMA_VERSION = 1
_GIB = 1 << 30
_ID = re.compile(r"^0x[0-9a-f]{4}$")
_SUBSYSTEM = re.compile(r"^(0x[0-9a-f]{4}|\*):0x[0-9a-f]{4}$")
_SLUG = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
_MAX_TEXT = 256
_FILE_KEYS = {"schema", "family", "vendor", "vendor_id", "about", "sources", "scope", "entries", "left_out"}
_REQUIRED_ENTRY = ("device_id", "sku", "product", "generation", "memory_gib", "ray_accelerator_type", "interconnect", "source")
_OPTIONAL_ENTRY = {
    "vendor_id", "subsystem", "nvml_name", "seen_subsystems", "nvlink_domain_gpus", "nvlinks",
    "xgmi_links", "neuronlinks",
    "cores_per_device", "devices_per_host", "machine_types", "notes",
}
_LEFT_OUT_KEYS = {"vendor_id", "device_id", "pci_ids_name", "reason"}
_NVIDIA, _AMD, _AWS = "0x10de", "0x1002", "0x1d0f"


class SkuFileError(ValueError):
    """A SKU file that does not follow the schema."""

    def __init__(self, origin: str, path: str, message: str) -> None:
        super().__init__(f"{origin}: {path}: {message}" if path else f"{origin}: {message}")
        self.origin, self.path, self.message = origin, path, message


@dataclass(frozen=True, slots=True)
class Entry:
    """One SKU record, keyed by ``(vendor_id, device_id, subsystem)``.

    ``subsystem`` is ``"0x10de:0x14a9"``, ``"*:0x004e"`` (any subsystem vendor) or None (the
    device id alone). ``memory_gib`` is the marketed per-device capacity in GiB (None: not
    confirmed). ``origin`` is the file the record came from (``builtin:nvidia.json`` or a path).
    """

    family: str
    vendor: str
    vendor_id: str
    device_id: str
    subsystem: str | None
    sku: str
    product: str
    nvml_name: str | None
    generation: str
    memory_gib: int | None
    ray_accelerator_type: str | None
    interconnect: str | None
    sources: tuple[str, ...]
    seen_subsystems: tuple[str, ...] = ()
    nvlink_domain_gpus: int | None = None
    nvlinks: int | None = None
    xgmi_links: int | None = None
    neuronlinks: int | None = None
    cores_per_device: int | None = None
    devices_per_host: int | None = None
    machine_types: tuple[tuple[str, int], ...] = ()
    notes: str | None = None
    origin: str = "builtin"

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.vendor_id, self.device_id, self.subsystem)

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory_gib is None else self.memory_gib * _GIB

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["sources"] = list(self.sources)
        out["seen_subsystems"] = list(self.seen_subsystems)
        out["machine_types"] = dict(self.machine_types)
        return out


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A pci.ids id in the database's scope that is deliberately not an entry, and why."""

    family: str
    vendor_id: str
    device_id: str
    reason: str
    pci_ids_name: str | None = None
    origin: str = "builtin"


@dataclass(frozen=True, slots=True)
class SkuFile:
    """One validated file."""

    origin: str
    family: str
    vendor: str
    entries: tuple[Entry, ...]
    left_out: tuple[LeftOut, ...] = ()
    scope: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)


class _V:
    """Small checkers that raise SkuFileError with the field path."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, path: str, message: str) -> None:
        raise SkuFileError(self.origin, path, message)

    def text(self, raw: Any, path: str, *, nullable: bool = False) -> str | None:
        if raw is None and nullable:
            return None
        if not isinstance(raw, str) or not raw.strip() or len(raw) > _MAX_TEXT:
            self.fail(path, f"expected a non-empty string of at most {_MAX_TEXT} characters{' or null' if nullable else ''}, got {raw!r}")
        return raw

    def pattern(self, raw: Any, path: str, regex: re.Pattern[str], what: str, *, nullable: bool = False) -> str | None:
        if raw is None and nullable:
            return None
        if not isinstance(raw, str) or not regex.match(raw):
            self.fail(path, f"expected {what}{' or null' if nullable else ''}, got {raw!r}")
        return raw

    def count(self, raw: Any, path: str, *, nullable: bool = True, top: int = 1 << 20) -> int | None:
        if raw is None and nullable:
            return None
        if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= top:
            self.fail(path, f"expected an integer from 1 to {top}{' or null' if nullable else ''}, got {raw!r}")
        return raw


def validate(raw: Any, origin: str) -> SkuFile:
    """Check one parsed JSON document against the schema; raises :class:`SkuFileError`."""
    v = _V(origin)
    if not isinstance(raw, dict):
        v.fail("", f"expected a JSON object at the top, got {type(raw).__name__}")
    for key in raw:
        if key not in _FILE_KEYS:
            v.fail(key, f"unknown field (known: {', '.join(sorted(_FILE_KEYS))})")
    if raw.get("schema") != SCHEMA_VERSION:
        v.fail("schema", f"expected {SCHEMA_VERSION}, got {raw.get('schema')!r}")
    family = v.pattern(raw.get("family"), "family", _SLUG, "a lower-case family name such as 'nvidia'")
    vendor = v.pattern(raw.get("vendor"), "vendor", _SLUG, "a lower-case vendor name such as 'nvidia'")
    default_vendor_id = v.pattern(raw.get("vendor_id"), "vendor_id", _ID, "a PCI id such as '0x10de'", nullable=True)
    about = raw.get("about")
    if about is not None and not (isinstance(about, str) and len(about) <= 8192):
        v.fail("about", "expected a string of at most 8192 characters")
    sources = raw.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(k, str) and isinstance(s, str) and s for k, s in sources.items()):
        v.fail("sources", "expected an object of citation keys to non-empty strings")
    scope = _scope(v, raw.get("scope", {}))
    entries_raw = raw.get("entries")
    if not isinstance(entries_raw, list):
        v.fail("entries", f"expected a list, got {type(entries_raw).__name__}")
    entries: list[Entry] = []
    seen: dict[tuple[str, str, str | None], int] = {}
    for i, item in enumerate(entries_raw):
        entry = _entry(v, item, f"entries[{i}]", family, vendor, default_vendor_id, sources)
        if entry.key in seen:
            v.fail(f"entries[{i}]", f"duplicate of entries[{seen[entry.key]}] (same vendor_id, device_id, subsystem)")
        seen[entry.key] = i
        entries.append(entry)
    left = raw.get("left_out", [])
    if not isinstance(left, list):
        v.fail("left_out", "expected a list")
    left_out = tuple(_left_out(v, item, f"left_out[{i}]", family, default_vendor_id) for i, item in enumerate(left))
    return SkuFile(origin, family, vendor, tuple(entries), left_out, scope, dict(sources))


def _scope(v: _V, raw: Any) -> tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]:
    if not isinstance(raw, dict):
        v.fail("scope", "expected an object of PCI vendor ids to lists of regular expressions")
    out = []
    for vendor_id, patterns in raw.items():
        v.pattern(vendor_id, f"scope.{vendor_id}", _ID, "a PCI vendor id key such as '0x10de'")
        if not isinstance(patterns, list):
            v.fail(f"scope.{vendor_id}", "expected a list of regular expressions")
        compiled = []
        for j, pat in enumerate(patterns):
            v.text(pat, f"scope.{vendor_id}[{j}]")
            try:
                compiled.append(re.compile(pat))
            except re.error as exc:
                v.fail(f"scope.{vendor_id}[{j}]", f"not a regular expression: {exc}")
        out.append((vendor_id, tuple(compiled)))
    return tuple(out)


def _entry(v: _V, item: Any, path: str, family: str, vendor: str, default_vid: str | None, sources: dict) -> Entry:
    if not isinstance(item, dict):
        v.fail(path, f"expected an object, got {type(item).__name__}")
    for key in item:
        if key not in _OPTIONAL_ENTRY and key not in _REQUIRED_ENTRY:
            v.fail(f"{path}.{key}", "unknown field")
    for key in _REQUIRED_ENTRY:
        if key not in item:
            v.fail(f"{path}.{key}", "missing (required; use null where a value is not known)")
    vid = v.pattern(item.get("vendor_id", default_vid), f"{path}.vendor_id", _ID, "a PCI vendor id such as '0x10de' (here or file-wide)")
    did = v.pattern(item["device_id"], f"{path}.device_id", _ID, "a lower-case PCI device id such as '0x2330'")
    subsystem = v.pattern(item.get("subsystem"), f"{path}.subsystem", _SUBSYSTEM, "'0xVVVV:0xDDDD' or '*:0xDDDD'", nullable=True)
    memory = item["memory_gib"]
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or not 1 <= memory <= 65536):
        v.fail(f"{path}.memory_gib", f"expected whole GiB from 1 to 65536 or null, got {memory!r}")
    ray_type = item["ray_accelerator_type"]
    if ray_type is not None and not (isinstance(ray_type, str) and ray_type and is_valid_value(ray_type)):
        v.fail(f"{path}.ray_accelerator_type", f"expected a Ray label value ([A-Za-z0-9_.-], at most 63) or null, got {ray_type!r}")
    nvml = v.text(item.get("nvml_name"), f"{path}.nvml_name", nullable=True)
    _check_ray_type(v, path, vid, did, nvml or item["product"], ray_type)
    src = item["source"]
    if not isinstance(src, list) or not src:
        v.fail(f"{path}.source", "expected a non-empty list of citations (keys of 'sources', URLs or text)")
    cited = tuple(sources.get(s, s) for s in (v.text(s, f"{path}.source[{j}]") for j, s in enumerate(src)))
    seen = item.get("seen_subsystems", [])
    if not isinstance(seen, list):
        v.fail(f"{path}.seen_subsystems", "expected a list")
    machine = item.get("machine_types", {})
    if not isinstance(machine, dict):
        v.fail(f"{path}.machine_types", "expected an object of machine or instance types to devices per host")
    return Entry(
        family=family,
        vendor=vendor,
        vendor_id=vid,
        device_id=did,
        subsystem=subsystem,
        sku=v.pattern(item["sku"], f"{path}.sku", _SLUG, "a lower-case label value such as 'h100-sxm5-80gb'"),
        product=v.text(item["product"], f"{path}.product"),
        nvml_name=nvml,
        generation=v.pattern(item["generation"], f"{path}.generation", _SLUG, "a lower-case generation such as 'hopper'"),
        memory_gib=memory,
        ray_accelerator_type=ray_type,
        interconnect=v.pattern(item["interconnect"], f"{path}.interconnect", _SLUG,
                               "a lower-case link name such as 'nvlink4'", nullable=True),
        sources=cited,
        seen_subsystems=tuple(v.pattern(s, f"{path}.seen_subsystems[{j}]", _SUBSYSTEM, "'0xVVVV:0xDDDD'") for j, s in enumerate(seen)),
        nvlink_domain_gpus=v.count(item.get("nvlink_domain_gpus"), f"{path}.nvlink_domain_gpus"),
        nvlinks=v.count(item.get("nvlinks"), f"{path}.nvlinks"),
        xgmi_links=v.count(item.get("xgmi_links"), f"{path}.xgmi_links"),
        neuronlinks=v.count(item.get("neuronlinks"), f"{path}.neuronlinks"),
        cores_per_device=v.count(item.get("cores_per_device"), f"{path}.cores_per_device"),
        devices_per_host=v.count(item.get("devices_per_host"), f"{path}.devices_per_host"),
        machine_types=tuple(
            (v.text(k, f"{path}.machine_types"), v.count(n, f"{path}.machine_types.{k}", nullable=False))
            for k, n in sorted(machine.items())
        ),
        notes=v.text(item.get("notes"), f"{path}.notes", nullable=True),
        origin=v.origin,
    )


def _check_ray_type(v: _V, path: str, vendor_id: str, device_id: str, name: str, ray_type: str | None) -> None:
    """Where Ray derives the type from data we hold, the entry must say exactly that."""
    if vendor_id == _NVIDIA:
        expected, why = ray_names.nvidia_accelerator_type(name), f"the NVML name {name!r}"
    elif vendor_id == _AMD:
        expected, why = ray_names.amd_accelerator_type(device_id), f"device id {device_id} (amd_product_dict)"
    elif vendor_id == _AWS:
        expected, why = ray_names.AWS_NEURON_CORE, "any Neuron device"
    else:
        return
    if ray_type != expected:
        v.fail(f"{path}.ray_accelerator_type", f"Ray 2.60 derives {expected!r} from {why}, not {ray_type!r}")


def _left_out(v: _V, item: Any, path: str, family: str, default_vid: str | None) -> LeftOut:
    if not isinstance(item, dict):
        v.fail(path, f"expected an object, got {type(item).__name__}")
    for key in item:
        if key not in _LEFT_OUT_KEYS:
            v.fail(f"{path}.{key}", "unknown field")
    return LeftOut(
        family=family,
        vendor_id=v.pattern(item.get("vendor_id", default_vid), f"{path}.vendor_id", _ID, "a PCI vendor id"),
        device_id=v.pattern(item.get("device_id"), f"{path}.device_id", _ID, "a lower-case PCI device id"),
        reason=v.text(item.get("reason"), f"{path}.reason"),
        pci_ids_name=v.text(item.get("pci_ids_name"), f"{path}.pci_ids_name", nullable=True),
        origin=v.origin,
    )
