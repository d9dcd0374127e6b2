"""Derive many-node domains (TPU slices, GB200 NVLink domains) from one recorded host snapshot.

Placement tests and benchmarks need several nodes per domain and several domains; rather than
committing dozens of near-identical trees, these helpers copy one committed snapshot per node into
a temporary directory and change only what identifies the node and its domain:

* :func:`gb200_domain`: copies of the GB200 NVL72 tray with the NVML fabric ``clique_id`` (and so
  ``ray.io/gpu-domain`` / ``rayaccel.io/fabric-domain``) set per domain, and a hostname per tray;
  with ``platform=True`` also NVML platform info per GPU (``nvmlPlatformInfo_v2_t`` layout,
  https://docs.nvidia.com/deploy/nvml-api/structnvmlPlatformInfo__v2__t.html): chassis serial
  ``NVL72C<clique>`` (made up; real ones are 13-character serials), tray index (the tray's
  number, or ``tray_indices``), slot number tray index + 10 (made up), host id 0, module id 1-4;
* :func:`tpu_slice`: copies of the GKE v6e 4x4 worker with ``TPU_NAME``, ``TPU_WORKER_ID`` and
  ``TPU_WORKER_HOSTNAMES`` of one slice (what the KubeRay TPU webhook injects per pod), and the
  ``physical_host_topology`` host/sub-block per worker.

The copies carry no ``expected.json`` (they are inputs, not goldens).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.support.paths import HOSTS

__all__ = ["SNAPSHOTS", "GB200_TRAY", "V6E_4X4_WORKER", "gb200_domain", "tpu_slice", "add_in_batches"]

SNAPSHOTS = HOSTS
GB200_TRAY = SNAPSHOTS / "nvidia_gpu" / "gb200-nvl72-tray"
V6E_4X4_WORKER = SNAPSHOTS / "tpu" / "gke-v6e-4x4-worker0"


def _copy(src: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, symlinks=True)
    (dest / "expected.json").unlink(missing_ok=True)
    return dest


def _set_hostname(root: Path, name: str) -> None:
    path = root / "rootfs/proc/sys/kernel/hostname"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(name + "\n")


def gb200_domain(
    dest: str | os.PathLike[str],
    clique_id: int,
    trays: int,
    *,
    cluster_uuid: str | None = None,
    source: str | os.PathLike[str] = GB200_TRAY,
    platform: bool = False,
    tray_indices: list[int] | None = None,
) -> list[Path]:
    """``trays`` GB200 tray snapshots in NVLink domain ``<cluster_uuid>.<clique_id>`` under ``dest``
    (tray ``i`` is hostname ``nvl72-c<clique>-tray<i>``; its NVML tray index is ``tray_indices[i]``,
    default ``i``, when ``platform``)."""
    src = Path(source)
    out = []
    for tray in range(trays):
        node = _copy(src, Path(dest) / f"gb200-c{clique_id}-t{tray}")
        nvml_path = node / "libraries" / "nvml.json"
        nvml = json.loads(nvml_path.read_text())
        for dev in nvml["devices"]:
            fabric = dev.get("fabric") or {}
            fabric["clique_id"] = clique_id
            if cluster_uuid:
                fabric["cluster_uuid"] = cluster_uuid
            dev["fabric"] = fabric
            if platform:
                index = tray_indices[tray] if tray_indices else tray
                dev["platform"] = {"chassis_serial": f"NVL72C{clique_id}", "slot_number": index + 10,
                                   "tray_index": index, "host_id": 0, "peer_type": 1,
                                   "module_id": int(dev["index"]) + 1}
        nvml_path.write_text(json.dumps(nvml, indent=1, sort_keys=True) + "\n")
        _set_hostname(node, f"nvl72-c{clique_id}-tray{tray:02d}")
        out.append(node)
    return out


def tpu_slice(
    dest: str | os.PathLike[str],
    name: str,
    hosts: int = 4,
    *,
    source: str | os.PathLike[str] = V6E_4X4_WORKER,
    block: str = "b1",
) -> list[Path]:
    """The ``hosts`` worker snapshots of TPU slice ``name`` (same shape as ``source``) under ``dest``."""
    src = Path(source)
    hostnames = ",".join(f"{name}-w-{i}.{name}-svc" for i in range(hosts))
    out = []
    for worker in range(hosts):
        node = _copy(src, Path(dest) / f"{name}-w{worker}")
        env_path = node / "env.json"
        env = json.loads(env_path.read_text())
        env.update(TPU_NAME=name, TPU_WORKER_ID=str(worker), TPU_WORKER_HOSTNAMES=hostnames)
        env_path.write_text(json.dumps(env, indent=2, sort_keys=True) + "\n")
        meta_path = node / "metadata.json"
        if meta_path.is_file():
            meta = json.loads(meta_path.read_text())
            gce = meta.get("gce", {})
            topo_key = "instance/attributes/physical_host_topology"
            if topo_key in gce:
                topo = json.loads(gce[topo_key])
                topo.update(block=block, subBlock=f"{name}-sb{worker // 2}", host=f"{name}-h{worker}")
                gce[topo_key] = json.dumps(topo, separators=(",", ":"))
            meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        _set_hostname(node, f"{name}-w-{worker}")
        out.append(node)
    return out


def add_in_batches(cluster, specs, batch: int = 3) -> list:
    """``cluster.add_nodes(specs)`` a few at a time: on a small shared machine, many ``ray start``
    processes registering at once can exceed the GCS RPC deadline."""
    started = []
    specs = list(specs)
    for i in range(0, len(specs), batch):
        started += cluster.add_nodes(specs[i:i + batch])
    return started
