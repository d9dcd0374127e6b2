"""``ray-accel record OUTDIR``: capture what discovery reads on this host as a host snapshot.

The snapshot (``rootfs/``, ``env.json``, ``metadata.json``, ``libraries/``, ``commands/``,
``expected.json``, ``README.md``) reproduces this host's discovery anywhere: attach it to a bug
report, or add it under ``tests/data/hosts/<backend>/<scenario>/`` as a fixture. Secrets
(tokens, credentials) are never written; see :mod:`ray_accel_ext.tools.record`.
"""

from __future__ import annotations

import argparse
import sys

from ..record import record
from ._common import add_root_option, host_for


def register(sub) -> None:
    p = sub.add_parser("record", help="capture this host's discovery inputs as a snapshot directory", description=__doc__)
    p.add_argument("outdir", metavar="OUTDIR", help="directory to create (must not exist or be empty)")
    add_root_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        summary = record(host_for(args), args.outdir, command=["ray-accel", "record", *sys.argv[2:]])
    except FileExistsError as exc:
        print(f"ray-accel: error: {exc}", file=sys.stderr)
        return 2
    golden = summary["golden"]
    found = ", ".join(f"{d['backend']} x{len(d['devices'])}" for d in golden["descriptions"]) or "no accelerators"
    print(f"recorded {summary['files']} files, {summary['links']} symlinks, {len(summary['env'])} variables, "
          f"{len(summary['commands'])} commands, {len(summary['libraries'])} libraries into {args.outdir}")
    print(f"discovery found: {found}{' (degraded)' if summary['degraded'] else ''}")
    if summary["secrets_dropped"]:
        print(f"left out as secrets: {', '.join(summary['secrets_dropped'])}")
    if summary["unreadable"]:
        print(f"could not copy: {', '.join(summary['unreadable'])}")
    return 0
