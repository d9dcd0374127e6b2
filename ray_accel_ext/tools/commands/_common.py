"""Helpers shared by subcommands: the host options and table printing."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...host import FsHost, host_from_env, is_snapshot_dir, open_host
from ...host.snapshot import ROOTFS


def add_root_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        metavar="DIR",
        help="read the host from DIR (a root with sys/, proc/, dev/, or a host snapshot) "
        "instead of this machine; default: $RAY_ACCEL_ROOT, else /",
    )
    parser.add_argument("--budget", type=positive_seconds, metavar="SECONDS", help="discovery time budget (default 3)")


def add_format_option(parser: argparse.ArgumentParser, choices: Sequence[str] = ("table", "json")) -> None:
    parser.add_argument("--format", choices=list(choices), default=choices[0], help=f"output format (default {choices[0]})")


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is outside 0-65535")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text}")
    return value


def check_root(root: str) -> str:
    """The host root ``--root`` names, or a :class:`UsageError` saying what is wrong with it.

    A snapshot's ``rootfs/`` stands for its snapshot (the recorded libraries and commands sit
    beside it); a folder of snapshots, or one that is neither a snapshot nor holds ``sys/``,
    ``proc/`` or ``dev/``, is refused instead of reported as a host without accelerators."""
    from ..cli import UsageError

    path = Path(root)
    if not path.is_dir():
        raise UsageError(f"--root {root}: not a directory")
    if is_snapshot_dir(path) or str(root) == "/":
        return root
    if path.name == ROOTFS and is_snapshot_dir(path.parent):
        warn(f"--root {root} is a snapshot's rootfs/: reading the snapshot {path.parent} (its recorded libraries "
             "and commands sit beside rootfs/)")
        return str(path.parent)
    inside = sorted(p.name for p in path.iterdir() if is_snapshot_dir(p)) if os.access(path, os.R_OK | os.X_OK) else []
    if inside:
        raise UsageError(f"--root {root}: a folder of {len(inside)} host snapshots, not one host: name one, "
                         f"e.g. --root {path / inside[0]}")
    if not any((path / d).is_dir() for d in ("sys", "proc", "dev")):
        raise UsageError(f"--root {root}: neither a host snapshot (no rootfs/) nor a root directory (no sys/, proc/ "
                         "or dev/)")
    return root


def warn_settings(environ: Mapping[str, str] = os.environ) -> None:
    """Warn on stderr about settings discovery would silently ignore or replace."""
    from ...node.registry import DISABLE_ENV, disabled_names, scan_backends

    if not environ.get(DISABLE_ENV):
        return _warn_budget(environ)
    # The lenient scan discovery itself makes: a clash or a refused name is discovery's to report.
    specs, _ = scan_backends({})
    names = {spec.name for spec in specs}
    unknown = sorted(disabled_names(environ) - names)
    if unknown:
        warn(f"{DISABLE_ENV} names no backend: {', '.join(unknown)} (backends: {', '.join(sorted(names))})")
    _warn_budget(environ)


def _warn_budget(environ: Mapping[str, str]) -> None:
    from ...bounds import setting_refused
    from ...host.protocol import BUDGET_ENV, DEFAULT_BUDGET_S, MAX_BUDGET_S

    if setting_refused(environ, BUDGET_ENV, high=MAX_BUDGET_S):
        warn(f"{BUDGET_ENV}={environ[BUDGET_ENV]!r} is not a number of seconds in (0, {MAX_BUDGET_S:g}]: "
             f"using {DEFAULT_BUDGET_S:g}")


def warn(message: str) -> None:
    print(f"ray-accel: warning: {message}", file=sys.stderr)


def host_for(args: argparse.Namespace, *, serve_metadata: bool = False) -> FsHost:
    """The host ``--root`` names (else ``$RAY_ACCEL_ROOT``, else this machine); with ``serve_metadata``
    a snapshot's recorded cloud metadata is served on loopback for the rest of the command, as
    ``ray-accel demo`` serves it to its nodes."""
    warn_settings()
    if getattr(args, "root", None):
        root = check_root(args.root)
        environ: Mapping[str, str] = os.environ
        if serve_metadata:
            from .demo import served_metadata

            environ = {**os.environ, **served_metadata(root)}
        return open_host(root, environ=environ, budget_s=args.budget)
    return host_from_env(budget_s=getattr(args, "budget", None))


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def clip(text: str, width: int) -> str:
    """Prose cut to ``width`` characters, the cut marked with an ellipsis (ids are never cut)."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> str:
    """A plain text table with aligned columns."""
    body = [["" if c is None else str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in body]
    return "\n".join(out)
