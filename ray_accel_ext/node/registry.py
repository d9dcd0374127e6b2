"""Backend registration through the ``ray_accel_ext.backends`` entry-point group.

Rules (see ``reference/model-codebases.md`` section 4.4):

* every backend, in-tree or a vendor's, comes in through the same group;
* a backend is validated when loaded: an :class:`AcceleratorBackend` subclass, ``name`` equal to
  the entry-point name, a supported ``api_version``, a well-formed ``label_prefix`` that is not
  Ray's or ours; the error names the distribution and version;
* two distributions offering the same name is an error, never first-wins: :func:`available_backends`
  raises; on the node-start path (:func:`scan_backends`) only that name is dropped, loudly, and the
  other backends still load;
* ``RAY_ACCEL_DISABLE=name,name`` switches backends off (like ``pytest -p no:name``); disabling a
  duplicated name resolves the conflict (nothing under that name loads, nothing is reported);
* whatever a backend raises while it is imported or built, ``BaseException`` included
  (``SystemExit``, ``KeyboardInterrupt``), becomes a :class:`BackendLoadError` naming it.

A backend is *in-tree* when it is this package's own (module under ``ray_accel_ext.``, registered
by the ``ray-accel-ext`` distribution); discovery runs the others in a worker process.

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
from typing import Any

from ..backend import SUPPORTED_API_VERSIONS, AcceleratorBackend, Capabilities, PciId
from ..errors import BackendLoadError
from ..host.entry_points import group_entry_points
from ..host.protocol import DISABLE_ENV
from ..labels import PROJECT_PREFIX, RAY_PREFIX, is_valid_prefix
from ..problems import BACKEND_LOAD, DECLARATION_INVALID, DISTRIBUTION_SKIPPED, ENTRY_POINT_REFUSED, PREFIX_RESERVED, ProblemCode, declare

__all__ = [
    "ENTRY_POINT_GROUP",
    "DISABLE_ENV",
    "BackendSpec",
    "BackendInfo",
    "available_backends",
    "scan_backends",
    "import_backend_class",
    "problem_message",
    "construct_error",
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


_OWN_DISTS = frozenset({"ray-accel-ext", "ray_accel_ext"})


@dataclass(frozen=True)
class BackendSpec:
    """Where a backend comes from: entry-point name, ``module:Class`` and distribution."""

    name: str
    value: str
    dist: str

    @property
    def in_tree(self) -> bool:
        """This package's own backend (its module and its distribution are ours)."""
        dist = self.dist.rpartition(" ")[0] or self.dist
        return self.value.startswith("ray_accel_ext.") and (dist.lower() in _OWN_DISTS or dist == "direct import")

    @property
    def where(self) -> str:
        return f"backend {self.name!r} ({self.value}, from {self.dist})"


@dataclass(frozen=True)
class BackendInfo:
    """What discovery needs of a backend class besides its description: its declared data.

    A backend run in a worker process never exists as a class in the node-start process; its
    worker sends this instead.
    """

    name: str
    resource_name: str
    label_prefix: str
    visible_devices_env_var: str | None = None
    node_start_env_vars: tuple[str, ...] = ()
    problem_codes: tuple[ProblemCode, ...] = ()

    @classmethod
    def of(cls, backend: type[AcceleratorBackend] | AcceleratorBackend) -> "BackendInfo":
        return cls(
            name=backend.name,
            resource_name=backend.resource_name,
            label_prefix=backend.label_prefix,
            visible_devices_env_var=backend.visible_devices_env_var,
            node_start_env_vars=tuple(backend.node_start_env_vars),
            problem_codes=tuple(getattr(backend, "problem_codes", ()) or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form a worker process sends."""
        return {**self.__dict__, "problem_codes": [c.to_dict() for c in self.problem_codes]}

    def declare_codes(self) -> list[str]:
        """Declare the backend's own problem codes here (:func:`ray_accel_ext.problems.declare`);
        what is refused (a built-in code, a malformed one), one line each."""
        refused = []
        for entry in self.problem_codes:
            try:
                declare(entry.code, severity=entry.severity, summary=entry.summary, hint=entry.hint)
            except (ValueError, AttributeError, TypeError) as exc:
                refused.append(f"problem code {getattr(entry, 'code', entry)!r} not declared: {exc}"[:300])
        return refused


def _specs(skipped: list[str] | None = None, refused_out: list[str] | None = None
           ) -> tuple[list[BackendSpec], dict[str, list[BackendSpec]]]:
    """Installed backends by name, and the names two distributions register differently. A
    distribution whose metadata cannot be read is noted in ``skipped``; a third-party entry point
    under an in-tree backend's name is refused (noted in ``refused_out``): the in-tree backend
    keeps its name and its devices."""
    seen: dict[str, BackendSpec] = {}
    clashes: dict[str, list[BackendSpec]] = {}
    refused: list[BackendSpec] = []
    for name, value, dist in group_entry_points(ENTRY_POINT_GROUP, skipped):
        spec = BackendSpec(name, value, dist)
        prior = seen.setdefault(name, spec)
        if prior.value == spec.value or spec in clashes.get(name, ()) or spec in refused:
            continue
        if prior.in_tree != spec.in_tree:
            refused.append(spec if prior.in_tree else prior)
            seen[name] = prior if prior.in_tree else spec
            continue
        clashes.setdefault(name, [prior]).append(spec)
    if refused_out is not None:
        refused_out.extend(f"{s.where} is refused: {s.name!r} is the name of an in-tree backend, which keeps it"
                           for s in refused)
    return sorted(seen.values(), key=lambda s: s.name), clashes


def _clash_message(name: str, specs: list[BackendSpec]) -> str:
    offered = " and ".join(f"{s.dist} ({s.value})" for s in specs)
    return (f"backend {name!r} is provided by both {offered}; uninstall one or disable it with "
            f"{DISABLE_ENV}={name}")


def available_backends() -> list[BackendSpec]:
    """Every backend entry point installed; a name two distributions register differently raises."""
    refused: list[str] = []
    specs, clashes = _specs(refused_out=refused)
    for name, offers in sorted(clashes.items()):
        raise BackendLoadError(_clash_message(name, offers), backend=name)
    if refused:  # strict: the node-start path keeps the in-tree backend, the CLI and tests say it loudly
        raise BackendLoadError(refused[0])
    return specs


def scan_backends(env: Mapping[str, str] | None = None) -> tuple[list[BackendSpec], list[tuple[str, str, str]]]:
    """The enabled backends, and ``(name, problem code, message)`` for each name dropped because
    two distributions register it (a disabled name is neither loaded nor reported), and
    ``("registry", code, message)`` for each distribution skipped (its metadata cannot be read)
    and each third-party entry point refused (an in-tree backend's name)."""
    disabled = disabled_names(env)
    skipped: list[str] = []
    refused: list[str] = []
    specs, clashes = _specs(skipped, refused)
    problems = [(name, BACKEND_LOAD, _clash_message(name, offers)) for name, offers in sorted(clashes.items())
                if name not in disabled]
    problems += [("registry", DISTRIBUTION_SKIPPED, message) for message in skipped]
    problems += [("registry", ENTRY_POINT_REFUSED, message) for message in refused]
    return [s for s in specs if s.name not in disabled and s.name not in clashes], problems


def import_backend_class(spec: BackendSpec) -> type[AcceleratorBackend]:
    """Import and validate the class ``spec`` names; BackendLoadError (stage ``import``) for
    anything it raises, ``BaseException`` included."""
    module_name, _, attr = spec.value.partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split(".") if attr else []:
            obj = getattr(obj, part)
    except BaseException as exc:  # noqa: BLE001 - an import error of any kind in a vendor package
        raise BackendLoadError(f"{spec.where} cannot be imported: {_raised(exc)}", backend=spec.name,
                               stage="import") from exc
    validate_backend_class(obj, spec.name, spec.where)
    try:
        prefix = str(obj.label_prefix)
    except BaseException:  # noqa: BLE001 - a hostile class attribute; the parent checks the answer again
        prefix = ""
    if not spec.in_tree and prefix.endswith("." + PROJECT_PREFIX):
        raise BackendLoadError(f"{spec.where}: label_prefix {prefix!r} is reserved: *.{PROJECT_PREFIX} belongs to "
                               "the in-tree families", backend=spec.name, stage="validate", code=PREFIX_RESERVED)
    return obj


def _str(exc: BaseException) -> str:
    try:
        return str(exc)[:2000]
    except BaseException:  # noqa: BLE001 - a hostile __str__
        return "<unprintable>"


def _raised(exc: BaseException) -> str:
    text = _str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def problem_message(exc: BaseException) -> str:
    """The message a discovery problem carries for what a backend raised: the exception's text,
    and for a ``BaseException`` that is not an ``Exception`` (``SystemExit``, ``KeyboardInterrupt``)
    what it was, so the reason names it."""
    text = _str(exc)
    if isinstance(exc, Exception):
        return text or type(exc).__name__
    return f"raised {type(exc).__name__}, which is not an Exception{': ' + text if text else ''}; contained"


def load_backend(spec: BackendSpec | str, name: str | None = None) -> AcceleratorBackend:
    """Import, validate and instantiate one backend (``spec`` may be ``"pkg.mod:Class"``)."""
    if isinstance(spec, str):
        spec = BackendSpec(name or spec.rpartition(":")[2], spec, "direct import")
    cls = import_backend_class(spec)
    try:
        return cls()
    except BaseException as exc:  # noqa: BLE001 - SystemExit in a constructor must not end the process
        raise construct_error(spec, exc) from exc


def construct_error(spec: BackendSpec, exc: BaseException) -> BackendLoadError:
    """The error for a backend whose constructor raised ``exc`` (whatever it was)."""
    return BackendLoadError(f"{spec.where} cannot be constructed without arguments: {_raised(exc)}",
                            backend=spec.name, stage="construct")


def validate_backend_class(cls: object, expected_name: str | None = None, where: str | None = None) -> None:
    """Raise BackendLoadError naming the culprit unless ``cls`` is a well-formed backend class."""
    where = where or f"backend {getattr(cls, '__qualname__', cls)!r}"
    try:
        _validate(cls, expected_name, where)
    except BackendLoadError:
        raise
    except BaseException as exc:  # noqa: BLE001 - a hostile class (metaclass, properties) raised
        raise BackendLoadError(f"{where}: validating the class raised {_raised(exc)}") from exc


def _validate(cls: object, expected_name: str | None, where: str) -> None:
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
        raise BackendLoadError(f"{where}: resource_name {resource!r} is not a usable Ray resource name",
                               code=DECLARATION_INVALID)
    prefix = getattr(cls, "label_prefix", None)
    if not is_valid_prefix(prefix):
        raise BackendLoadError(f"{where}: label_prefix {prefix!r} is not a DNS subdomain such as 'acme.ai'",
                               code=DECLARATION_INVALID)
    if prefix in (RAY_PREFIX, PROJECT_PREFIX) or prefix.endswith("." + RAY_PREFIX):
        raise BackendLoadError(f"{where}: label_prefix {prefix!r} is reserved (Ray owns ray.io, the core schema owns "
                               "rayaccel.io)", code=PREFIX_RESERVED)
    version = getattr(cls, "api_version", None)
    if version not in SUPPORTED_API_VERSIONS:
        raise BackendLoadError(
            f"{where}: api_version {version!r} is not supported (this ray_accel_ext supports {sorted(SUPPORTED_API_VERSIONS)})"
        )
    if not isinstance(getattr(cls, "capabilities", None), Capabilities):
        raise BackendLoadError(f"{where}: capabilities must be a ray_accel_ext.backend.Capabilities instance")
    declared = getattr(cls, "problem_codes", ())
    if not isinstance(declared, tuple) or not all(isinstance(c, ProblemCode) for c in declared):
        raise BackendLoadError(f"{where}: problem_codes must be a tuple of ray_accel_ext.problems.ProblemCode")


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
    wanted = set(only) if only is not None else None
    backends: list[AcceleratorBackend] = []
    specs, clashes = scan_backends(env)
    disabled = disabled_names(env)
    for name, code, message in clashes:
        if name == "registry":  # a distribution skipped, an entry point refused: not a backend
            if on_error is not None:
                on_error(name, BackendLoadError(message, backend=name, code=code))
            continue
        if wanted is None or name in wanted:
            if on_error is None:
                raise BackendLoadError(message, backend=name)
            on_error(name, BackendLoadError(message, backend=name))
    for spec in specs:
        if wanted is not None and spec.name not in wanted:
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


def backend_classes(env: Mapping[str, str] | None = None, *, include_disabled: bool = False,
                    in_tree_only: bool = False) -> dict[str, type[AcceleratorBackend]]:
    """The class of every enabled (or, with ``include_disabled``, installed), loadable backend by
    name (``in_tree_only``: this package's own); one that fails to import is left out
    (``load_backends`` is what reports it)."""
    out: dict[str, type[AcceleratorBackend]] = {}
    specs, _ = scan_backends({} if include_disabled else env)
    disabled = disabled_names(env)
    for spec in specs:
        if not spec.in_tree and (in_tree_only or spec.name in disabled):
            continue  # a disabled vendor package is never imported (its import may hang or end the process)
        try:
            out[spec.name] = import_backend_class(spec)
        except BackendLoadError:  # reported by discovery on the node-start path
            continue
    return out


def families(env: Mapping[str, str] | None = None) -> list[FamilyInfo]:
    """Every family this node could have: installed backends (from their declarations, switched off
    by ``RAY_ACCEL_DISABLE`` or not: their devices are still theirs) and the
    :data:`KNOWN_FAMILIES` whose backend is not installed, sorted by backend name."""
    out: dict[str, FamilyInfo] = {}
    # A vendor's package is never imported here, in the calling process (doctor, the health
    # monitors): its import may hang or end the process. It is listed by name; its PCI ids and
    # driver files are known once it runs in discovery's worker.
    for spec in scan_backends({})[0]:
        if not spec.in_tree:
            out[spec.name] = FamilyInfo(backend=spec.name, family=spec.name, provided_by="its vendor's package",
                                        installed=True)
    for name, cls in backend_classes(env, include_disabled=True, in_tree_only=True).items():
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
