"""``ray-accel doctor``: why is this node degraded, or why is an accelerator not seen?

Runs discovery and a few cheap probes (drivers, backends, metadata, Ray version) and prints each
finding in plain words with its fix. Exit status 0 when nothing is an error, 1 otherwise.
"""

from __future__ import annotations

import argparse
import textwrap

from ..doctor import diagnose
from ._common import add_format_option, add_root_option, host_for, print_json


def register(sub) -> None:
    p = sub.add_parser("doctor", help="explain why this node is degraded or an accelerator is missing", description=__doc__)
    add_root_option(p)
    add_format_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    diagnosis = diagnose(host_for(args, serve_metadata=True))
    if args.format == "json":
        print_json(diagnosis.to_dict())
        return 0 if diagnosis.healthy else 1
    inv = diagnosis.inventory
    families = ", ".join(
        f"{d.backend} ({len(d.devices)} x {d.sku.name}"
        + (f", {len(d.partitions)} MIG instances on {len({p.device for p in d.partitions})} GPUs" if d.partitions else "")
        + ")" for d in inv.descriptions) or "none"
    print(f"accelerators: {families}")
    print(f"discovery: {'degraded' if inv.degraded else 'ok'}; Ray: {diagnosis.ray_version or 'not installed'}")
    if not diagnosis.findings:
        print("no problems found")
    for f in diagnosis.findings:
        print()
        print(f"[{f.severity.upper()}] {f.cause}")
        print(textwrap.fill(f.message, width=100, initial_indent="  ", subsequent_indent="  "))
        print(textwrap.fill("fix: " + f.fix, width=100, initial_indent="  ", subsequent_indent="       "))
    return 0 if diagnosis.healthy else 1
