"""The package's modules and what each imports, read from the source (AST, nothing is imported):
the layout tests of ``tests/meta`` check these."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from .paths import REPO

PACKAGE = REPO / "ray_accel_ext"
ROOT = "ray_accel_ext"


def package_modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        if "data" in rel.parts:
            continue  # snapshot builders shipped as conformance data
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


@dataclass(frozen=True)
class ImportSite:
    """One import statement naming a package module: where it is and what it names."""

    line: int
    base: str  # the module imported from (``ray_accel_ext.host`` for ``from ..host import Host``)
    names: tuple[str, ...]  # the names imported from it (empty for ``import x``)
    module_level: bool  # False inside a function, class or ``if`` (``TYPE_CHECKING``) block

    def targets(self, modules: dict[str, Path] | None = None) -> set[str]:
        """The modules it loads: ``base``, or for ``from pkg import mod`` the submodule ``mod``
        (without ``modules``, both)."""
        subs = {f"{self.base}.{n}" for n in self.names}
        if modules is None:
            return {self.base} | subs
        named = {s for s in subs if s in modules}
        return named if named and len(named) == len(subs) else {self.base} | named

    def text(self) -> str:
        return f"from {self.base} import {', '.join(self.names)}" if self.names else f"import {self.base}"


def _base(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_sites(name: str, path: Path) -> list[ImportSite]:
    """Every import of a package module in ``name`` (at ``path``), lazy ones too."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top: set[int] = set()
    for node in tree.body:  # module level: run at import (a `try` body too, an `if` body not)
        top.update(id(st) for st in (node.body if isinstance(node, ast.Try) else [node]))
    sites = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT:
                    sites.append(ImportSite(node.lineno, alias.name, (), id(node) in top))
        elif isinstance(node, ast.ImportFrom):
            base = _base(node, package)
            if base.split(".")[0] == ROOT:
                sites.append(ImportSite(node.lineno, base, tuple(a.name for a in node.names), id(node) in top))
    return sorted(sites, key=lambda s: s.line)


def module_level_imports(name: str, path: Path) -> set[str]:
    """Package modules ``name`` imports at module level (``from . import x`` counts module x)."""
    return {t for s in import_sites(name, path) if s.module_level for t in s.targets()}
