"""What one conformance run is about: the backend, its snapshots, its xfails, live Ray or not.

Every setting comes from a class attribute of the test class (subclass mode), else from the
command line (``--accel-*``, registered by :mod:`ray_accel_ext.conformance.plugin`), else from an
environment variable (which also works when pytest's plugin autoloading is off):

=====================  ===============================  ============================================
class attribute        option                           environment variable
=====================  ===============================  ============================================
``backend_cls``        ``--accel-backend NAME|mod:Cls``  ``RAY_ACCEL_CONFORMANCE_BACKEND``
``snapshots``          ``--accel-snapshots DIR[:DIR]``  ``RAY_ACCEL_CONFORMANCE_SNAPSHOTS``
``xfails``             ``--accel-xfails FILE``          ``RAY_ACCEL_CONFORMANCE_XFAILS``
``live_ray``           ``--accel-live-ray``             ``RAY_ACCEL_CONFORMANCE_LIVE_RAY=1``
=====================  ===============================  ============================================

With no backend at all the suite runs against the reference
:class:`~ray_accel_ext.testing.fake_backend.FakeBackend` and its shipped snapshots.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backend import AcceleratorBackend
from ..errors import BackendLoadError
from ..host import is_snapshot_dir
from ..host.snapshot import EXPECTED_FILE
from ..node.registry import BackendSpec, available_backends, load_backend
from ..testing.snapshots import snapshot_dirs

__all__ = ["ENV", "REPORT_ENV", "OPTIONS", "SuiteConfig", "Snapshot", "resolve", "parse_xfails", "REFERENCE_SNAPSHOTS"]

# Where a run writes its per-test results (JSON) for `ray-accel conformance`.
REPORT_ENV = "RAY_ACCEL_CONFORMANCE_REPORT"

ENV = {
    "backend": "RAY_ACCEL_CONFORMANCE_BACKEND",
    "snapshots": "RAY_ACCEL_CONFORMANCE_SNAPSHOTS",
    "xfails": "RAY_ACCEL_CONFORMANCE_XFAILS",
    "live_ray": "RAY_ACCEL_CONFORMANCE_LIVE_RAY",
}
OPTIONS = {"backend": "accel_backend", "snapshots": "accel_snapshots", "xfails": "accel_xfails", "live_ray": "accel_live_ray"}
REFERENCE_SNAPSHOTS = Path(__file__).parent / "data" / "hosts" / "fake_accel"
_XFAIL_ID_RE = re.compile(r"^(Base[A-Za-z]+Tests)::(test_\w+)(\[[^\]]*\])?$")


@dataclass(frozen=True)
class Snapshot:
    """One recorded host and what its golden file says about the backend under test."""

    path: Path
    id: str
    expected: dict[str, Any] | None  # the whole expected.json, None when the file is missing
    description: dict[str, Any] | None  # the backend's entry in expected["descriptions"]

    @property
    def has_devices(self) -> bool:
        return self.description is not None

    def __str__(self) -> str:
        return self.id


@dataclass(frozen=True)
class SuiteConfig:
    """The resolved settings of one test class."""

    backend_cls: type[AcceleratorBackend] | None
    origin: str  # how the backend was chosen, for messages
    entry_point: BackendSpec | None
    snapshots: tuple[Snapshot, ...]
    snapshot_sources: tuple[str, ...]
    xfails: dict[str, str] = field(default_factory=dict)
    xfails_file: Path | None = None
    xfail_errors: tuple[str, ...] = ()
    live_ray: bool = False
    load_error: str | None = None
    described: dict[Path, Any] = field(default_factory=dict, compare=False, repr=False)  # describe() results

    @property
    def name(self) -> str:
        return getattr(self.backend_cls, "name", "?")

    def xfail_reason(self, suite_id: str) -> str | None:
        """The xfails-file reason for ``Base...Tests::test_x[param]`` (or the unparametrized id)."""
        return self.xfails.get(suite_id) or self.xfails.get(suite_id.split("[", 1)[0])


def _option(config: Any, key: str) -> Any:
    if config is not None:
        try:
            value = config.getoption(OPTIONS[key])
        except (ValueError, AttributeError):
            value = None
        if value not in (None, False, ""):
            return value
    value = os.environ.get(ENV[key])
    if key == "live_ray":
        return (value or "").strip().lower() in ("1", "true", "yes", "on")
    return value or None


def _load_class(value: Any) -> tuple[type[AcceleratorBackend] | None, str, BackendSpec | None, str | None]:
    """(class, origin, entry point, load error) for a class, an entry-point name or ``mod:Class``."""
    if isinstance(value, type):
        spec = next((s for s in _specs() if s.value == f"{value.__module__}:{value.__qualname__}"), None)
        return value, f"class {value.__module__}.{value.__qualname__}", spec, None
    text = str(value)
    try:
        if ":" in text:
            module, _, attr = text.partition(":")
            try:
                declared = getattr(getattr(importlib.import_module(module), attr, None), "name", None)
            except Exception:  # noqa: BLE001 - load_backend reports import errors with context
                declared = None
            backend = load_backend(text, declared if isinstance(declared, str) else None)
            return type(backend), f"import string {text!r}", None, None
        spec = next((s for s in available_backends() if s.name == text), None)
        if spec is None:
            names = ", ".join(s.name for s in available_backends()) or "none"
            return None, f"entry point {text!r}", None, (
                f"no backend named {text!r} is installed under the 'ray_accel_ext.backends' entry point "
                f"(installed: {names}); pip install the distribution that provides it"
            )
        backend = load_backend(spec)
        return type(backend), f"entry point {text!r} ({spec.dist})", spec, None
    except BackendLoadError as exc:
        return None, f"backend {text!r}", None, str(exc)


def _specs() -> list[BackendSpec]:
    try:
        return available_backends()
    except BackendLoadError:
        return []


def _snapshot_paths(sources: list[str]) -> list[Path]:
    out: list[Path] = []
    for src in sources:
        p = Path(src).expanduser()
        out.extend([p] if is_snapshot_dir(p) else snapshot_dirs(p))
    seen: set[Path] = set()
    return [p for p in out if not (p.resolve() in seen or seen.add(p.resolve()))]


def _snapshot(path: Path, ids: dict[str, int], backend_name: str) -> Snapshot:
    expected = None
    exp_file = path / EXPECTED_FILE
    if exp_file.is_file():
        try:
            expected = json.loads(exp_file.read_text())
        except ValueError:
            expected = None
    desc = None
    if expected:
        desc = next((d for d in expected.get("descriptions", []) if d.get("backend") == backend_name), None)
    sid = path.name if ids[path.name] == 1 else f"{path.parent.name}/{path.name}"
    return Snapshot(path=path, id=sid, expected=expected, description=desc)


def _defining_dir(cls: type) -> Path:
    """Directory of the file that defines ``cls``: relative class attributes are relative to it."""
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    return Path(file).parent if file else Path.cwd()


def parse_xfails(text: str) -> tuple[dict[str, str], list[str]]:
    """``Base...Tests::test_x[param]  # reason https://link`` lines -> ({id: reason}, errors)."""
    out: dict[str, str] = {}
    errors: list[str] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        test_id, _, reason = (x.strip() for x in line.partition("#"))
        if not _XFAIL_ID_RE.match(test_id):
            errors.append(f"line {n}: {test_id!r} is not a suite test id like 'BaseDescriptionTests::test_matches_golden[snap]'")
            continue
        if not re.search(r"https?://\S+", reason):
            errors.append(f"line {n}: {test_id} needs '# <reason> <link to the bug>' after it (not applied)")
            continue
        out[test_id] = reason
    return out, errors


def resolve(cls: type, config: Any = None) -> SuiteConfig:
    """Settings for test class ``cls`` under pytest ``config`` (None: environment only)."""
    raw = getattr(cls, "backend_cls", None) or _option(config, "backend")
    if raw is None:
        from ..testing.fake_backend import FakeBackend

        backend_cls, origin, spec, error = FakeBackend, "reference FakeBackend (no --accel-backend given)", None, None
        default_snaps = [str(REFERENCE_SNAPSHOTS)]
    else:
        backend_cls, origin, spec, error = _load_class(raw)
        default_snaps = []
        name = getattr(backend_cls, "name", None)
        local = Path("tests/data/hosts") / str(name)
        if name and local.is_dir():
            default_snaps = [str(local)]
    snaps_attr = getattr(cls, "snapshots", None)
    if snaps_attr is not None:
        base = _defining_dir(cls)
        items = [snaps_attr] if isinstance(snaps_attr, (str, os.PathLike)) else list(snaps_attr)
        sources = [str(p if Path(p).is_absolute() else base / p) for p in items]
    else:
        opt = _option(config, "snapshots")
        sources = [s for s in str(opt).split(os.pathsep) if s] if opt else default_snaps
    name = getattr(backend_cls, "name", "?")
    paths = _snapshot_paths(sources)
    counts: dict[str, int] = {}
    for p in paths:
        counts[p.name] = counts.get(p.name, 0) + 1
    snapshots = tuple(_snapshot(p, counts, name) for p in paths)

    xfails_src = getattr(cls, "xfails", None) or _option(config, "xfails")
    xfails: dict[str, str] = {}
    xfail_errors: list[str] = []
    xfails_file = None
    if xfails_src:
        xfails_file = Path(xfails_src)
        if not xfails_file.is_absolute() and getattr(cls, "xfails", None):
            xfails_file = _defining_dir(cls) / xfails_file
        try:
            xfails, xfail_errors = parse_xfails(xfails_file.read_text())
        except OSError as exc:
            xfail_errors = [f"cannot read {xfails_file}: {exc.strerror or exc}"]
    live = getattr(cls, "live_ray", None)
    return SuiteConfig(
        backend_cls=backend_cls,
        origin=origin,
        entry_point=spec,
        snapshots=snapshots,
        snapshot_sources=tuple(sources),
        xfails=xfails,
        xfails_file=xfails_file,
        xfail_errors=tuple(xfail_errors),
        live_ray=bool(live) if live is not None else bool(_option(config, "live_ray")),
        load_error=error,
    )
