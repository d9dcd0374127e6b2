"""``ray-accel skus``: list the SKU database, check a pci.ids file against it, validate extra files.

Command logic only; the CLI adds :func:`add_arguments` to its ``skus`` sub-parser and calls
:func:`run`. Exit status: 0 fine, 1 when ``--check`` finds missing ids or ``--validate`` finds a
bad file, 2 when the pci.ids file cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from . import (
    SkuFileError,
    check_file,
    entries,
    left_out,
    load_problems,
    loaded_files,
    scope,
)
from .pciids import PciIdsError, load

__all__ = ["COLUMNS", "Missing", "add_arguments", "check", "format_table", "rows", "run", "to_json"]

COLUMNS = ("family", "vendor_id", "device_id", "subsystem", "sku", "generation", "memory_gib",
           "ray_accelerator_type", "interconnect", "product")


@dataclass(frozen=True, slots=True)
class Missing:
    """A pci.ids device in the database's scope that is neither an entry nor listed as left out."""

    vendor_id: str
    device_id: str
    name: str

    def __str__(self) -> str:
        return f"{self.vendor_id[2:]}:{self.device_id[2:]}  {self.name}"


def rows(family: str | None = None) -> list[dict[str, Any]]:
    """One dict per entry with :data:`COLUMNS`, plus the file it came from (``origin``)."""
    return [{**{c: getattr(e, c) for c in COLUMNS}, "origin": e.origin} for e in entries(family)]


def format_table(table: list[dict[str, Any]]) -> str:
    """Fixed-width text, one line per row; null shown as ``-``."""
    cols = (*COLUMNS, "origin")
    cells = [[("-" if r[c] is None else str(r[c])) for c in cols] for r in table]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def to_json(family: str | None = None) -> str:
    """Entries (every field), left-out ids, the files read and any problems, as JSON."""
    doc = {
        "entries": [e.to_dict() for e in entries(family)],
        "left_out": [
            {"family": lo.family, "vendor_id": lo.vendor_id, "device_id": lo.device_id,
             "pci_ids_name": lo.pci_ids_name, "reason": lo.reason, "origin": lo.origin}
            for lo in left_out(family)
        ],
        "files": list(loaded_files()),
        "problems": list(load_problems()),
    }
    return json.dumps(doc, indent=2)


def check(pci_ids_path: str) -> list[Missing]:
    """Every device of a covered vendor whose pci.ids name is in scope but the database lacks.

    Raises :class:`~ray_accel_ext.skus.pciids.PciIdsError` when the file cannot be read.
    """
    patterns = scope()
    parsed = load(pci_ids_path, vendors=list(patterns))
    skipped = {(lo.vendor_id, lo.device_id) for lo in left_out()}
    known = {(e.vendor_id, e.device_id) for e in entries()}
    missing = []
    for vendor_id, pats in sorted(patterns.items()):
        for dev in parsed.vendor_devices(vendor_id):
            key = (vendor_id, dev.device_id)
            if key in known or key in skipped:
                continue
            if any(p.search(dev.name) for p in pats):
                missing.append(Missing(vendor_id, dev.device_id, dev.name))
    return missing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``skus`` sub-command's options."""
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--family", help="only this family (nvidia, amd, tpu, neuron, gaudi, or an extra file's)")
    parser.add_argument("--check", metavar="PCI_IDS_FILE", help="print the in-scope ids of PCI_IDS_FILE the database lacks")
    parser.add_argument("--validate", metavar="FILE", nargs="+", help="validate extra SKU files and print their errors")


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run the sub-command for parsed ``args``; returns the exit status."""
    for problem in load_problems():
        print(problem, file=err)
    if args.validate:
        bad = 0
        for path in args.validate:
            try:
                n = len(check_file(path).entries)
                print(f"{path}: ok, {n} entries", file=out)
            except SkuFileError as exc:
                bad += 1
                print(str(exc), file=out)
        return 1 if bad else 0
    if args.check:
        try:
            missing = check(args.check)
        except PciIdsError as exc:
            print(f"ray-accel skus --check: {exc}", file=err)
            return 2
        if args.format == "json":
            print(json.dumps([{"vendor_id": m.vendor_id, "device_id": m.device_id, "name": m.name} for m in missing], indent=2), file=out)
        else:
            for m in missing:
                print(str(m), file=out)
            print(f"{len(missing)} in-scope id(s) missing from the SKU database", file=err)
        return 1 if missing else 0
    if args.family is not None:
        known = sorted({e.family for e in entries()})
        if args.family not in known:
            print(f"ray-accel skus: error: --family {args.family}: no such family (families: {', '.join(known)})", file=err)
            return 2
    print(to_json(args.family) if args.format == "json" else format_table(rows(args.family)), file=out)
    return 0
