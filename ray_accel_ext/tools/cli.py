"""The ``ray-accel`` command.

Each subcommand lives in ``ray_accel_ext/tools/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``. Output meant for
people is a table; ``--format json`` prints exactly one JSON document for programs.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from .. import __version__
from ..errors import RayAccelError

# Subcommand modules under ray_accel_ext.tools.commands, in the order `--help` lists them.
COMMANDS = (
    "discover",
    "ray_args",
    "demo",
    "record",
    "doctor",
    "skus",
    "cluster",
    "dashboard",
    "health",
    "conformance",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ray-accel",
        description="Find this node's accelerators and how they are wired, and hand that to Ray.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log discovery details to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"ray_accel_ext.tools.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.ERROR,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except RayAccelError as exc:
        print(f"ray-accel: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
