"""No function of the package is longer than about 80 lines (docs/architecture.md): a long one is
split into named steps. The few that may stay long are listed here with why."""

from __future__ import annotations

import ast

from tests.support.paths import REPO

PACKAGE = REPO / "ray_accel_ext"
MAX_LINES = 80

# "path relative to the package:function" -> why it may stay long for now (one line each).
ALLOWED: dict[str, str] = {}


def _lengths() -> dict[str, int]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{rel}:{node.name}"
                out[name] = max(out.get(name, 0), node.end_lineno - node.lineno + 1)
    return out


def test_no_function_is_long():
    long = {name: n for name, n in _lengths().items() if n > MAX_LINES and name not in ALLOWED}
    assert not long, f"functions over {MAX_LINES} lines (split them into named steps): {long}"


def test_every_allowed_long_function_is_still_there_and_long():
    lengths = _lengths()
    stale = {name: lengths.get(name) for name in ALLOWED if lengths.get(name, 0) <= MAX_LINES}
    assert not stale, f"drop these from ALLOWED (gone or short now): {stale}"
    assert all(reason.strip() and "\n" not in reason for reason in ALLOWED.values())
