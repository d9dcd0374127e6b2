"""Shared fixtures for ray_accel_ext's own tests, and the one rule for tests that need Ray: where
Ray is not installed they are skipped, never failed. A test needs Ray when it is marked ``ray``
(it starts Ray) or ``needs_ray``, or when it, one of its fixtures or a test helper they call
imports ``ray``; a module that imports Ray at the top calls ``pytest.importorskip("ray")`` first."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import textwrap
from pathlib import Path

import pytest

HOSTS = Path(__file__).parent / "data" / "hosts"
HAVE_RAY = importlib.util.find_spec("ray") is not None


@pytest.fixture(scope="session")
def hosts_dir() -> Path:
    """Root of the recorded host snapshots: tests/data/hosts/<backend>/<scenario>/."""
    return HOSTS


@pytest.fixture
def scratch_path():
    """Like ``tmp_path``, but in memory where the machine allows (``tests/support/scratch.py``: the
    damaged host copies) and removed when the test is done."""
    from ray_accel_ext.testing.corrupt import remove_copy
    from tests.support.scratch import scratch_dir

    path = scratch_dir("ra-scratch")
    yield path
    remove_copy(path)


def pytest_configure(config: pytest.Config) -> None:
    # The start hook spawns a device watcher per node (ray_accel_ext/node/watcher.py); tests that call
    # the hook in this process would leave one waiting for a raylet. Tests of the watcher turn it on.
    os.environ.setdefault("RAY_ACCEL_HEALTH_WATCH", "0")
    config.addinivalue_line("markers", "needs_ray: uses Ray without starting it (skipped where Ray is not installed)")


def _imports_ray(func, seen: set | None = None) -> bool:
    """Whether ``func``, or a test helper it names (a function of a ``tests`` module, followed
    through), imports ``ray``."""
    seen = set() if seen is None else seen
    if func in seen:
        return False
    seen.add(func)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return False
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ray" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "ray":
            return True
        if isinstance(node, ast.Name):
            names.add(node.id)
    scope = getattr(func, "__globals__", {})
    helpers = [scope.get(n) for n in sorted(names)]
    return any(inspect.isfunction(h) and h.__module__.split(".")[0] == "tests" and _imports_ray(h, seen)
               for h in helpers)


def _needs_ray(item: pytest.Item) -> bool:
    if item.get_closest_marker("ray") or item.get_closest_marker("needs_ray"):
        return True
    funcs = [getattr(item, "function", None)]
    fixtures = getattr(item, "_fixtureinfo", None)
    if fixtures is not None:
        funcs += [d.func for defs in fixtures.name2fixturedefs.values() for d in defs]
    return any(f is not None and _imports_ray(inspect.unwrap(f)) for f in funcs)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lane", choices=("ray", "rest"), default=None,
        help="ray: only the modules with a test marked ray (they start Ray); rest: every other module. "
             "for running the two side by side; a module stays whole, so its fixtures and "
             "artifacts/reliability/<module>.json are one process's.",
    )


def _select_lane(config: pytest.Config, items: list[pytest.Item]) -> None:
    lane = config.getoption("--lane")
    if lane is None:
        return
    ray_modules = {item.path for item in items if item.get_closest_marker("ray")}
    keep = [item for item in items if (item.path in ray_modules) == (lane == "ray")]
    if len(keep) != len(items):
        kept = set(map(id, keep))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _select_lane(config, items)
    if HAVE_RAY:
        return
    skip = pytest.mark.skip(reason="needs Ray, which is not installed")
    for item in items:
        if _needs_ray(item):
            item.add_marker(skip)
