"""Make ``docs/dashboard.png``: the dashboard over a simulated cluster with TPU slices and a GB200
NVLink domain.

    .venv/bin/python -m tests.ops.dashboard_screenshot docs/dashboard.png

The cluster: a CPU head; TPU v6e 4x4 slice ``slice-a`` with all 4 hosts and ``slice-b`` with 2 of
its 4 (workers derived from the recorded GKE worker-0 snapshot by changing ``TPU_NAME``,
``TPU_WORKER_ID`` and the hostname, as the KubeRay TPU webhook would set them); two GB200 NVL72
trays of one NVLink domain (the recorded tray and a copy with another hostname); one v6e host
whose metadata server hangs, so it comes up degraded. Placement groups: one per slice-a (4
bundles) and one on the GB200 domain. Every node is a real ``ray start`` through the hook.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

HOSTS = Path(__file__).resolve().parent.parent / "data" / "hosts"


def _derive(src: Path, dst: Path, hostname: str, env: dict[str, str]) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    (dst / "rootfs/proc/sys/kernel/hostname").write_text(hostname + "\n")
    data = json.loads((dst / "env.json").read_text())
    data.update(env)
    (dst / "env.json").write_text(json.dumps(data, indent=2))
    return dst


def build_hosts(work: Path) -> list[tuple[Path, str]]:
    """(snapshot, node name) of every node but the head."""
    w0 = HOSTS / "tpu" / "gke-v6e-4x4-worker0"
    out: list[tuple[Path, str]] = []
    for slice_name, workers in (("slice-a", (0, 1, 2, 3)), ("slice-b", (0, 3))):
        hostnames = ",".join(f"{slice_name}-w-{i}.{slice_name}-svc" for i in range(4))
        for i in workers:
            host = f"gke-tpu-v6e-{slice_name[-1]}-{i}"
            snap = _derive(w0, work / host, host, {"TPU_NAME": slice_name, "TPU_WORKER_ID": str(i),
                                                    "TPU_WORKER_HOSTNAMES": hostnames})
            out.append((snap, host))
    tray = HOSTS / "nvidia_gpu" / "gb200-nvl72-tray"
    out.append((tray, "nvl72-tray05"))
    out.append((_derive(tray, work / "nvl72-tray06", "nvl72-r07-tray06", {}), "nvl72-tray06"))
    out.append((HOSTS / "tpu" / "gce-v6e-4-metadata-timeout", "v6e-md-timeout"))
    return out


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HOSTS.parent.parent))
    from ray_accel_ext.cluster.dashboard import DashboardServer
    from ray_accel_ext.cluster.inventory import InventoryCollector
    from ray_accel_ext.testing.cluster import SimulatedCluster
    from tests.ops.chromium import screenshot

    target = Path((argv or sys.argv[1:] or ["docs/dashboard.png"])[0])
    with tempfile.TemporaryDirectory(prefix="dash-hosts-") as tmp, SimulatedCluster() as cluster:
        cluster.add_node(None, name="head", num_cpus=1)
        hosts = build_hosts(Path(tmp))
        for i in range(0, len(hosts), 3):  # a few at a time: a busy 2-core machine times out on nine at once
            cluster.add_nodes([(snap, {"name": name}) for snap, name in hosts[i:i + 3]])
        cluster.connect()
        import ray
        from ray.util.placement_group import placement_group

        pgs = [
            placement_group([{"TPU": 4}] * 4, strategy="STRICT_SPREAD", name="jax-train-slice-a",
                            bundle_label_selector=[{"ray.io/tpu-slice-name": "slice-a"}] * 4),
            placement_group([{"GPU": 4}] * 2, strategy="STRICT_SPREAD", name="llm-serve-nvl72",
                            bundle_label_selector=[{"ray.io/accelerator-type": "GB200"}] * 2),
        ]
        ray.get([pg.ready() for pg in pgs], timeout=120)
        collector = InventoryCollector()
        with DashboardServer(lambda: collector.gather().to_dict(), refresh_s=5) as server:
            screenshot(server.url, target, width=1400, height=2300)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
