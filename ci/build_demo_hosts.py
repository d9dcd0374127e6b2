"""Pack the host snapshots the demo runs on into ray_accel_ext/demo_hosts.tar.gz.

A tarball, not package-data directories, because wheels turn symlinks into copies and the resolved
sysfs symlinks are what PCIe topology is computed from. The snapshots themselves live (and are
tested) under tests/data/hosts; tests/tools/test_demo.py fails when the tarball drifts from them.

    python ci/build_demo_hosts.py
"""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOSTS = REPO / "tests" / "data" / "hosts"
TARBALL = REPO / "ray_accel_ext" / "demo_hosts.tar.gz"

# Head first. Each entry: (name in the demo, snapshot under tests/data/hosts).
DEMO_NODES = (
    ("h100-dgx", "nvidia_gpu/h100-sxm-8gpu-dgx"),
    ("gb200-tray", "nvidia_gpu/gb200-nvl72-tray"),
    ("l4-pcie", "nvidia_gpu/l4-single-pcie"),
    ("tpu7x-gke", "tpu/gke-tpu7x-4chip-single-host"),
    ("trn2", "neuron/trn2-48xlarge"),
)


def build(tarball: Path = TARBALL) -> bytes:
    """The tarball bytes, deterministic (sorted entries, zero mtimes and owners)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        order = "".join(f"{name}\n" for name, _ in DEMO_NODES).encode()
        info = tarfile.TarInfo("ORDER")
        info.size = len(order)
        tar.addfile(info, io.BytesIO(order))
        for name, rel in DEMO_NODES:
            src = HOSTS / rel
            for path in sorted([src, *src.rglob("*")]):
                arc = f"{name}/{path.relative_to(src)}" if path != src else name
                info = tar.gettarinfo(str(path), arcname=arc)
                info.mtime = 0
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if info.isfile():
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
                else:
                    tar.addfile(info)
    import gzip

    return gzip.compress(buf.getvalue(), mtime=0)


if __name__ == "__main__":
    data = build()
    TARBALL.write_bytes(data)
    print(f"wrote {TARBALL.relative_to(REPO)} ({len(data)} bytes, {len(DEMO_NODES)} hosts)")
    sys.exit(0)
