"""Host snapshots: recorded machines that discovery runs against without the hardware.

A snapshot directory holds::

    rootfs/                only the files discovery reads (sys/, proc/, dev/), real relative symlinks
    env.json               the environment the node saw (GKE TPU variables, ...)
    metadata.json          cloud metadata answers, served by loopback fakes (see fake_metadata)
    libraries/<name>.json  recorded library readings (NVML)
    commands/<tool>.json   recorded tool output ({"argv": [...], "stdout": "...", "returncode": 0})
    expected.json          golden: {"descriptions": [...], "problems": [...], "ray": {...}}
    README.md              the machine it stands for

Use :func:`run_snapshot` to discover one (metadata servers started and stopped around it), and
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

from ..adapter import RayNodeSpec, to_ray_node
from ..discovery import discover
from ..host import FsHost, is_snapshot_dir, open_host
from ..model import NodeInventory
from .fake_metadata import MetadataServers

__all__ = ["snapshot_dirs", "serve_snapshot", "run_snapshot", "golden_of", "load_expected", "write_expected"]


def snapshot_dirs(base: str | os.PathLike[str]) -> list[Path]:
    """Every snapshot directory under ``base`` (those holding ``rootfs/``), sorted."""
    base = Path(base)
    return sorted(p.parent for p in base.rglob("rootfs") if p.is_dir() and is_snapshot_dir(p.parent))


def metadata_spec(snapshot: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(snapshot) / "metadata.json"
    return json.loads(path.read_text()) if path.is_file() else {}


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
        env["RAY_ACCEL_ROOT"] = str(Path(snapshot).resolve())
        yield env


def run_snapshot(
    snapshot: str | os.PathLike[str], *, budget_s: float | None = None, environ: Mapping[str, str] | None = None
) -> tuple[NodeInventory, RayNodeSpec]:
    """Discover a snapshot with its metadata served; the inventory and Ray spec."""
    with serve_snapshot(snapshot, environ) as env:
        host: FsHost = open_host(env["RAY_ACCEL_ROOT"], environ=env, budget_s=budget_s)
        inventory = discover(host)
    return inventory, to_ray_node(inventory)


def golden_of(inventory: NodeInventory, spec: RayNodeSpec) -> dict[str, Any]:
    """The comparable, time-free part of a discovery result."""
    return {
        "descriptions": [d.to_dict() for d in inventory.descriptions],
        "problems": [{"backend": p.backend, "stage": p.stage, "error": p.error} for p in inventory.problems],
        "ray": spec.to_dict(),
    }


def load_expected(snapshot: str | os.PathLike[str]) -> dict[str, Any]:
    return json.loads((Path(snapshot) / "expected.json").read_text())


def write_expected(snapshot: str | os.PathLike[str]) -> dict[str, Any]:
    inventory, spec = run_snapshot(snapshot)
    golden = golden_of(inventory, spec)
    (Path(snapshot) / "expected.json").write_text(json.dumps(golden, indent=2, sort_keys=True) + "\n")
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
