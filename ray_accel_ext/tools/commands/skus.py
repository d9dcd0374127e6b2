"""``ray-accel skus``: the SKU database (table, or ``--format json``); ``--check PCI_IDS_FILE``
prints every in-scope id of a pci.ids file the database lacks; ``--validate FILE...`` checks extra
SKU files before they are deployed (``ray_accel_ext/skus/SCHEMA.md``)."""

from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    from ...skus import report

    p = sub.add_parser("skus", help="list the SKU database, check a pci.ids file against it, validate extra SKU files",
                       description=__doc__)
    report.add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ...skus import report

    return report.run(args, sys.stdout, sys.stderr)
