"""Helpers shared by subcommands: the host options and table printing."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ...host import FsHost, host_from_env, open_host


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


def host_for(args: argparse.Namespace) -> FsHost:
    if getattr(args, "root", None):
        from ..cli import UsageError

        if not Path(args.root).is_dir():
            raise UsageError(f"--root {args.root}: not a directory")
        return open_host(args.root, budget_s=args.budget)
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
