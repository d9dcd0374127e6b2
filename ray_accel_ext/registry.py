"""Backend registration through the ``ray_accel_ext.backends`` entry-point group.

Rules (see ``reference/model-codebases.md`` section 4.4):

* every backend, in-tree or a vendor's, comes in through the same group;
* a backend is validated when loaded: an :class:`AcceleratorBackend` subclass, ``name`` equal to
  the entry-point name, a supported ``api_version``, a well-formed ``label_prefix`` that is not
  Ray's or ours; the error names the distribution and version;
* two distributions offering the same name is an error, never first-wins;
* ``RAY_ACCEL_DISABLE=name,name`` switches backends off (like ``pytest -p no:name``).

The registry also answers "which families exist and how are they recognised" (:func:`families`):
from each installed backend's declarations, plus :data:`KNOWN_FAMILIES` (what to install for a
family whose backend is missing), so ``doctor`` and the health monitors hold no vendor table.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata as importlib_metadata

from .backend import SUPPORTED_API_VERSIONS, AcceleratorBackend, Capabilities, PciId
from .errors import BackendLoadError
from .labels import PROJECT_PREFIX, RAY_PREFIX, is_valid_prefix

__all__ = [
    "ENTRY_POINT_GROUP",
    "DISABLE_ENV",
    "BackendSpec",
    "available_backends",
    "load_backend",
    "load_backends",
    "validate_backend_class",
    "disabled_names",
    "backend_classes",
    "families",
    "family_of_pci",
    "FamilyInfo",
    "KNOWN_FAMILIES",
]

ENTRY_POINT_GROUP = "ray_accel_ext.backends"
DISABLE_ENV = "RAY_ACCEL_DISABLE"
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_RESOURCE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")


@dataclass(frozen=True)
class FamilyInfo:
    """An accelerator family: its backend, how its devices are recognised, what provides it."""

    backend: str
    family: str
    provided_by: str
    pci_ids: tuple[PciId, ...] = ()
    driver_paths: tuple[str, ...] = ()
    driver_hint: str = ""
    installed: bool = False


# Families by backend name, with the package (or extra) that provides each. In-tree backends take
# their recognition data from their own declarations; a family whose backend ships as a separate
# package carries it here, so `doctor` can say what to install before the backend is there.
KNOWN_FAMILIES: Mapping[str, FamilyInfo] = {
    "nvidia_gpu": FamilyInfo("nvidia_gpu", "NVIDIA GPU", "ray-accel-ext[nvidia]"),
    "tpu": FamilyInfo("tpu", "Google TPU", "ray-accel-ext[gcp]"),
    "neuron": FamilyInfo("neuron", "AWS Neuron", "ray-accel-ext[aws]"),
    "amd_gpu": FamilyInfo("amd_gpu", "AMD Instinct GPU", "ray-accel-ext[amd]"),
    "gaudi": FamilyInfo("gaudi", "Intel Gaudi", "ray-accel-ext"),
}


@dataclass(frozen=True)
class BackendSpec:
    """Where a backend comes from: entry-point name, ``module:Class`` and distribution."""

    name: str
    value: str
    dist: str


def _group_entry_points():
    """The group's entry points, from every installed distribution that declares the group.

    Only distributions whose ``entry_points.txt`` names the group are parsed: about 1.5 ms instead
    of 3.2 ms for ``importlib.metadata.entry_points(group=...)`` among the ~100 distributions Ray
    brings, on the node-start path. A distribution seen twice on ``sys.path`` yields the same
    ``name = value`` twice, which ``available_backends`` merges.
    """
    header = f"[{ENTRY_POINT_GROUP}]"
    for dist in importlib_metadata.distributions():
        text = dist.read_text("entry_points.txt")
        if text and header in text:
            yield from dist.entry_points.select(group=ENTRY_POINT_GROUP)


def available_backends() -> list[BackendSpec]:
    """Every backend entry point installed, duplicates of one name from two distributions rejected."""
    seen: dict[str, BackendSpec] = {}
    for ep in _group_entry_points():
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "unknown distribution"
        spec = BackendSpec(ep.name, ep.value, dist)
        prior = seen.get(ep.name)
        if prior is not None and prior.value != spec.value:
            raise BackendLoadError(
                f"backend {ep.name!r} is provided by both {prior.dist} ({prior.value}) and {dist} ({ep.value}); "
                f"uninstall one or disable it with {DISABLE_ENV}",
                backend=ep.name,
            )
        seen.setdefault(ep.name, spec)
    return sorted(seen.values(), key=lambda s: s.name)


def load_backend(spec: BackendSpec | str, name: str | None = None) -> AcceleratorBackend:
    """Import, validate and instantiate one backend (``spec`` may be ``"pkg.mod:Class"``)."""
    if isinstance(spec, str):
        spec = BackendSpec(name or spec.rpartition(":")[2], spec, "direct import")
    module_name, _, attr = spec.value.partition(":")
    where = f"backend {spec.name!r} ({spec.value}, from {spec.dist})"
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split(".") if attr else []:
            obj = getattr(obj, part)
    except Exception as exc:  # an import error of any kind in a vendor package
        raise BackendLoadError(f"{where} cannot be imported: {type(exc).__name__}: {exc}", backend=spec.name) from exc
    validate_backend_class(obj, spec.name, where)
    try:
        return obj()
    except Exception as exc:
        raise BackendLoadError(f"{where} cannot be constructed without arguments: {exc}", backend=spec.name) from exc


def validate_backend_class(cls: object, expected_name: str | None = None, where: str | None = None) -> None:
    """Raise BackendLoadError naming the culprit unless ``cls`` is a well-formed backend class."""
    where = where or f"backend {getattr(cls, '__qualname__', cls)!r}"
    if not (isinstance(cls, type) and issubclass(cls, AcceleratorBackend)):
        raise BackendLoadError(f"{where} is not a subclass of ray_accel_ext.backend.AcceleratorBackend")
    if getattr(cls, "__abstractmethods__", None):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise BackendLoadError(f"{where} does not implement {missing}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise BackendLoadError(f"{where}: name {name!r} must be lower_snake_case (a-z, 0-9, _)")
    if expected_name is not None and name != expected_name:
        raise BackendLoadError(f"{where}: class name attribute {name!r} differs from its entry-point name {expected_name!r}")
    resource = getattr(cls, "resource_name", None)
    if not isinstance(resource, str) or not _RESOURCE_RE.match(resource) or resource in ("CPU", "memory", "object_store_memory"):
        raise BackendLoadError(f"{where}: resource_name {resource!r} is not a usable Ray resource name")
    prefix = getattr(cls, "label_prefix", None)
    if not is_valid_prefix(prefix):
        raise BackendLoadError(f"{where}: label_prefix {prefix!r} is not a DNS subdomain such as 'acme.ai'")
    if prefix in (RAY_PREFIX, PROJECT_PREFIX) or prefix.endswith("." + RAY_PREFIX):
        raise BackendLoadError(f"{where}: label_prefix {prefix!r} is reserved (Ray owns ray.io, the core schema owns rayaccel.io)")
    version = getattr(cls, "api_version", None)
    if version not in SUPPORTED_API_VERSIONS:
        raise BackendLoadError(
            f"{where}: api_version {version!r} is not supported (this ray_accel_ext supports {sorted(SUPPORTED_API_VERSIONS)})"
        )
    if not isinstance(getattr(cls, "capabilities", None), Capabilities):
        raise BackendLoadError(f"{where}: capabilities must be a ray_accel_ext.backend.Capabilities instance")


def disabled_names(env: Mapping[str, str] | None = None) -> set[str]:
    env = os.environ if env is None else env
    return {n.strip() for n in env.get(DISABLE_ENV, "").split(",") if n.strip()}


def load_backends(
    env: Mapping[str, str] | None = None,
    *,
    only: Iterable[str] | None = None,
    on_error=None,
) -> list[AcceleratorBackend]:
    """Load every enabled backend.

    A backend that fails to load is reported to ``on_error(name, exc)`` and skipped when
    ``on_error`` is given (the node-start path: the node still starts); otherwise the error is
    raised (the CLI and tests: fail loudly).
    """
    disabled = disabled_names(env)
    wanted = set(only) if only is not None else None
    backends: list[AcceleratorBackend] = []
    for spec in available_backends():
        if spec.name in disabled or (wanted is not None and spec.name not in wanted):
            continue
        try:
            backends.append(load_backend(spec))
        except BackendLoadError as exc:
            if on_error is None:
                raise
            on_error(spec.name, exc)
    if wanted is not None:
        missing = wanted - {b.name for b in backends} - disabled
        if missing and on_error is None:
            raise BackendLoadError(f"no backend installed under the name(s) {sorted(missing)}")
    return backends


def backend_classes(env: Mapping[str, str] | None = None, *, include_disabled: bool = False) -> dict[str, type[AcceleratorBackend]]:
    """The class of every enabled (or, with ``include_disabled``, installed), loadable backend by
    name; one that fails to import is left out (``load_backends`` is what reports it)."""
    disabled = set() if include_disabled else disabled_names(env)
    out: dict[str, type[AcceleratorBackend]] = {}
    try:
        specs = available_backends()
    except BackendLoadError:
        return out
    for spec in specs:
        if spec.name in disabled:
            continue
        module_name, _, attr = spec.value.partition(":")
        try:
            obj = importlib.import_module(module_name)
            for part in attr.split(".") if attr else []:
                obj = getattr(obj, part)
            validate_backend_class(obj, spec.name)
        except Exception:  # noqa: BLE001 - reported by load_backends on the discovery path
            continue
        out[spec.name] = obj
    return out


def families(env: Mapping[str, str] | None = None) -> list[FamilyInfo]:
    """Every family this node could have: installed backends (from their declarations, switched off
    by ``RAY_ACCEL_DISABLE`` or not: their devices are still theirs) and the
    :data:`KNOWN_FAMILIES` whose backend is not installed, sorted by backend name."""
    out: dict[str, FamilyInfo] = {}
    for name, cls in backend_classes(env, include_disabled=True).items():
        known = KNOWN_FAMILIES.get(name)
        out[name] = FamilyInfo(
            backend=name,
            family=cls.family or (known.family if known else name),
            provided_by=known.provided_by if known else "its vendor's package",
            pci_ids=tuple(cls.pci_ids) or (known.pci_ids if known else ()),
            driver_paths=tuple(cls.driver_paths) or (known.driver_paths if known else ()),
            driver_hint=cls.driver_hint or (known.driver_hint if known else ""),
            installed=True,
        )
    for name, known in KNOWN_FAMILIES.items():
        out.setdefault(name, known)
    return [out[k] for k in sorted(out)]


def family_of_pci(
    vendor: str | None, device: str | None, pci_class: str | None, known: Iterable[FamilyInfo]
) -> FamilyInfo | None:
    """The family whose declared PCI ids match a function, or None."""
    for fam in known:
        if any(m.matches(vendor, device, pci_class) for m in fam.pci_ids):
            return fam
    return None
