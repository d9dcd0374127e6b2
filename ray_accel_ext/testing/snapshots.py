"""Host snapshots: recorded machines that discovery runs against without the hardware.

The format is :mod:`ray_accel_ext.host.snapshot`'s. Use :func:`run_snapshot` to discover one
(metadata servers started and stopped around it), and
``python -m ray_accel_ext.testing.snapshots --update DIR...`` to rewrite goldens after a reviewed
change.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..host import ROOT_ENV, FsHost, open_host
from ..host.snapshot import (
    EXPECTED_FILE,
    expected_of,
    is_snapshot_dir,
    load_expected,
    metadata_spec,
    snapshot_dirs,
    write_json,
)
from ..model import NodeInventory
from ..node.adapter import RayNodeSpec, to_ray_node
from ..node.discovery import discover
from .fake_metadata import MetadataServers

__all__ = ["snapshot_dirs", "metadata_spec", "serve_snapshot", "run_snapshot", "golden_of", "load_expected", "write_expected"]


@contextlib.contextmanager
def serve_snapshot(snapshot: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Iterator[dict[str, str]]:
    """Start the snapshot's metadata fakes; yield the environment a node on it runs with.

    The environment is ``environ`` (default: this process's) plus ``RAY_ACCEL_ROOT`` and the
    metadata endpoint overrides.
    """
    env = dict(os.environ if environ is None else environ)
    spec = metadata_spec(snapshot)
    with MetadataServers(spec) as servers:
        env.update(servers.env())
        env[ROOT_ENV] = str(Path(snapshot).resolve())
        yield env


def run_snapshot(
    snapshot: str | os.PathLike[str], *, budget_s: float | None = None, environ: Mapping[str, str] | None = None
) -> tuple[NodeInventory, RayNodeSpec]:
    """Discover a snapshot with its metadata served; the inventory and Ray spec."""
    with serve_snapshot(snapshot, environ) as env:
        host: FsHost = open_host(env[ROOT_ENV], environ=env, budget_s=budget_s)
        inventory = discover(host)
    return inventory, to_ray_node(inventory)


def golden_of(inventory: NodeInventory, spec: RayNodeSpec) -> dict[str, Any]:
    """The golden ``expected.json`` of a discovery result (see :func:`ray_accel_ext.host.snapshot.expected_of`)."""
    return expected_of(inventory, spec)


def write_expected(snapshot: str | os.PathLike[str]) -> dict[str, Any]:
    inventory, spec = run_snapshot(snapshot)
    golden = golden_of(inventory, spec)
    write_json(Path(snapshot) / EXPECTED_FILE, golden)
    return golden


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Show or rewrite the golden expected.json of host snapshots.")
    parser.add_argument("snapshots", nargs="+", help="snapshot directories (or folders holding them)")
    parser.add_argument("--update", action="store_true", help="rewrite expected.json")
    args = parser.parse_args(argv)
    dirs: list[Path] = []
    for s in args.snapshots:
        dirs.extend([Path(s)] if is_snapshot_dir(s) else snapshot_dirs(s))
    for d in dirs:
        if args.update:
            golden = write_expected(d)
            print(f"updated {d}/expected.json ({len(golden['descriptions'])} families, {len(golden['problems'])} problems)")
        else:
            inventory, spec = run_snapshot(d)
            print(json.dumps({"snapshot": str(d), **golden_of(inventory, spec)}, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
