"""The layout rules of docs/architecture.md, checked on the source: module size, no import cycle,
no shipped module importing the test kit, and what vendors import as a visible diff."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

from tests.support.imports import import_sites, module_level_imports, package_modules
from tests.support.paths import TESTS

PUBLIC_API = TESTS / "meta" / "public_api.json"
# What vendors import (docs/vendors.md): the facade, the contract, the values, the host seam, the
# errors and the hardware helpers.
PUBLIC_MODULES = (
    "ray_accel_ext",
    "ray_accel_ext.backend",
    "ray_accel_ext.model",
    "ray_accel_ext.errors",
    "ray_accel_ext.problems",
    "ray_accel_ext.labels",
    "ray_accel_ext.host",
    "ray_accel_ext.hw.pci",
    "ray_accel_ext.hw.nics",
    "ray_accel_ext.hw.cloud",
    "ray_accel_ext.hw.aws_topology",
)
MAX_LINES = 420  # "about 400"
# The demo command runs on the simulated cluster it is built on (the kit is its engine).
MAY_IMPORT_TESTING = {"ray_accel_ext.tools.commands.demo"}


def _modules() -> dict[str, Path]:
    return package_modules()


def _imports(name: str, path: Path) -> set[str]:
    """Package modules ``name`` imports at module level (the cycle check; function-level imports
    are lazy and cannot form an import-time cycle)."""
    return module_level_imports(name, path)


def test_no_module_is_long():
    long = {n: len(p.read_text().splitlines()) for n, p in _modules().items()}
    long = {n: k for n, k in long.items() if k > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by job): {long}"


def test_no_import_cycle():
    mods = _modules()
    graph = {n: {m for m in _imports(n, p) if m in mods and m != n} for n, p in mods.items()}
    # A package's __init__ re-exporting its own submodules is the facade pattern, not a cycle.
    for n in graph:
        graph[n] = {m for m in graph[n] if not n.startswith(m + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycles.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_shipped_modules_do_not_import_the_test_kit():
    offenders = {}
    for name, path in _modules().items():
        if name.startswith(("ray_accel_ext.testing", "ray_accel_ext.conformance")) or name in MAY_IMPORT_TESTING:
            continue
        for site in import_sites(name, path):
            if site.base.startswith("ray_accel_ext.testing"):
                offenders[name] = site.base
    assert not offenders, f"shipped modules import ray_accel_ext.testing: {offenders}"


def _public_api() -> dict[str, list[str]]:
    out = {}
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        assert hasattr(module, "__all__"), f"{name} has no __all__: vendors cannot tell what is public"
        for item in module.__all__:
            assert hasattr(module, item), f"{name}.__all__ names {item!r}, which the module does not define"
        out[name] = sorted(module.__all__)
    return out


def test_public_api_is_a_visible_diff():
    """A change to what vendors import shows up as a diff of tests/meta/public_api.json
    (``RAY_ACCEL_UPDATE_API=1`` rewrites it after a reviewed change)."""
    api = _public_api()
    if os.environ.get("RAY_ACCEL_UPDATE_API") == "1":
        PUBLIC_API.write_text(json.dumps(api, indent=2, sort_keys=True) + "\n")
    recorded = json.loads(PUBLIC_API.read_text())
    assert api == recorded, (
        "the public API changed; if on purpose, rewrite tests/meta/public_api.json with RAY_ACCEL_UPDATE_API=1 and "
        "say so in docs/vendors.md:\n" + json.dumps({k: sorted(set(api.get(k, [])) ^ set(recorded.get(k, []))) for k in set(api) | set(recorded)})
    )
