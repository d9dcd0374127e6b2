"""The ``ray-accel`` command.

Each subcommand lives in ``ray_accel_ext/tools/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``. Output meant for
people is a table; ``--format json`` prints exactly one JSON document for programs.

Exit status: 0 done, 1 a runtime failure (no Ray, no cluster, a busy port, a failed check), 2 a
usage error (bad arguments), 130 interrupted. Errors are one line on stderr, ``ray-accel: error:
...``; ``-v`` adds the traceback of an unexpected one. Help text is the subcommands' docstrings
as plain text (their reStructuredText roles and literals unwrapped).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys
import textwrap
import traceback

from .. import __version__
from ..errors import RayAccelError

__all__ = ["main", "build_parser", "UsageError", "plain_text"]


class UsageError(RayAccelError):
    """A bad argument found after parsing (exit status 2, like argparse's own errors)."""

    layer = "usage"

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


_ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|exc|obj|const|ref|doc):`(~?)([^`<]+?)(?:\s*<[^>]*>)?`")


def plain_text(doc: str | None) -> str | None:
    """A docstring as help text: ``:func:`~a.b``` -> ``b``, double-backquoted literals unquoted."""
    if not doc:
        return doc
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), textwrap.dedent(doc))
    text = re.sub(r"``(.+?)``", r"\1", text, flags=re.S)
    text = re.sub(r"\*\*(.+?)\*\*", r"\1", text)
    return re.sub(r"(\S)::$", r"\1:", text.strip(), flags=re.M)


def _global_options(parser: argparse.ArgumentParser, *, default) -> None:
    parser.add_argument("-v", "--verbose", action="store_true", default=default, help="log discovery details to stderr")


def _command_in(argv: list[str]) -> str | None:
    """The subcommand module ``argv`` names (``ray-args`` -> ``ray_args``), when its first word
    that is no option is one; None for ``--help``, ``--version`` or a mistyped command."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            name = word.replace("-", "_")
            return name if name in COMMANDS else None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``ray-accel`` parser; ``only`` (a name of :data:`COMMANDS`) registers that subcommand
    alone, so that running it imports none of the others (``ray-args`` on the node-start path
    imports no dashboard, cluster, doctor or conformance module)."""
    parser = argparse.ArgumentParser(
        prog="ray-accel",
        description="Find this node's accelerators and how they are wired, and hand that to Ray.",
        epilog="Exit status: 0 done, 1 failed, 2 usage error. `ray-accel COMMAND --help` for each command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _global_options(parser, default=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in (only,) if only else COMMANDS:
        importlib.import_module(f"ray_accel_ext.tools.commands.{name}").register(sub)
    for command in sub.choices.values():
        command.description = plain_text(command.description)
        command.formatter_class = argparse.RawDescriptionHelpFormatter
        # also after the subcommand; SUPPRESS keeps a value given before it
        _global_options(command, default=argparse.SUPPRESS)
    for action in sub._choices_actions:  # the one-line summaries in `ray-accel --help`
        action.help = plain_text(action.help)
    return parser


def _missing_ray(exc: ImportError) -> bool:
    name = exc.name or ""
    return name == "ray" or name.startswith("ray.")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=_command_in(argv))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.ERROR,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except RayAccelError as exc:
        if exc.layer == "usage":  # UsageError, and any error that says the invocation is wrong
            print(f"ray-accel {args.command}: error: {exc}", file=sys.stderr)
            return 2
        print(f"ray-accel: error: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:
        if not _missing_ray(exc):
            return _unexpected(exc, args.verbose)
        print(f"ray-accel {args.command}: error: needs Ray, which is not installed in this Python "
              f"({sys.executable}): pip install 'ray-accel-ext[ray]'", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `ray-accel ... | head`
        return 0
    except Exception as exc:  # noqa: BLE001 - a bug: one line, the traceback with -v
        return _unexpected(exc, args.verbose)
    return 0


def _unexpected(exc: BaseException, verbose: bool) -> int:
    if verbose:
        traceback.print_exception(exc, file=sys.stderr)
    where = "" if verbose else " (run with -v for the traceback)"
    print(f"ray-accel: error: unexpected {type(exc).__name__}: {exc}{where}; please report it", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
