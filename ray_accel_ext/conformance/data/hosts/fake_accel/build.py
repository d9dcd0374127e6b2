"""Build the FakeBackend's snapshots (then: python -m ray_accel_ext.conformance.data.hosts.fake_accel.build).

Writes ``fake-4dev-hive/`` (4 devices on 2 NUMA nodes, fully linked, in hive ``hive-7``) and
``empty/`` (a CPU-only host) next to this file, including their golden ``expected.json``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ray_accel_ext.host import open_host
from ray_accel_ext.node.adapter import to_ray_node
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.testing.fake_backend import FakeBackend
from ray_accel_ext.testing.snapshots import golden_of

HERE = Path(__file__).parent


def _write(root: Path, rel: str, text: str) -> None:
    path = root / "rootfs" / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def build() -> None:
    snap = HERE / "fake-4dev-hive"
    shutil.rmtree(snap, ignore_errors=True)
    _write(snap, "/sys/class/fake_accel/hive", "hive-7\n")
    for i in range(4):
        base = f"/sys/class/fake_accel/accel{i}"
        _write(snap, f"{base}/uuid", f"FAKE-{i:04d}-a1b2\n")
        _write(snap, f"{base}/numa_node", f"{i // 2}\n")
        _write(snap, f"{base}/local_cpulist", "0-7\n" if i < 2 else "8-15\n")
        _write(snap, f"{base}/memory_mib", "16384\n")
        _write(snap, f"{base}/links", " ".join(str(j) for j in range(4) if j != i) + "\n")
    (snap / "env.json").write_text("{}\n")
    (snap / "README.md").write_text(
        "# fake-4dev-hive\n\nSynthetic host for the reference FakeBackend: 4 `fake_accel` devices on "
        "2 NUMA nodes (0-1 on node 0, 2-3 on node 1), every pair linked, fabric domain `hive-7`.\n"
        "Built by `build.py`; no real machine.\n"
    )
    empty = HERE / "empty"
    shutil.rmtree(empty, ignore_errors=True)
    _write(empty, "/sys/devices/system/node/online", "0\n")
    _write(empty, "/sys/devices/system/node/node0/cpulist", "0-3\n")
    (empty / "env.json").write_text("{}\n")
    (empty / "README.md").write_text(
        "# empty\n\nA CPU-only host (one NUMA node, 4 CPUs) with no `fake_accel` devices: detection "
        "must say False. Built by `build.py`.\n"
    )
    for s in (snap, empty):
        inventory = discover(open_host(s, environ={}), backends=[FakeBackend()])
        golden = golden_of(inventory, to_ray_node(inventory))
        (s / "expected.json").write_text(json.dumps(golden, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    build()
