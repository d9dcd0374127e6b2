"""For every TPU host snapshot: our ``ray.io/*`` labels and TPU resources equal what Ray 2.60's own
``TPUAcceleratorManager`` gives the same machine, except where ours is a documented fix.

Both sides read the same inputs: the snapshot's rootfs and env.json, and one loopback GCE
metadata fake serving its metadata.json. Ours runs through the CLI (``ray-accel ray-args``);
Ray's through ``ResourceAndLabelSpec.resolve()`` with its file access and hard-coded metadata URL
pointed at the snapshot (:mod:`tests.support.ray_tpu`; Ray's transport is redirected,
nothing of ours is patched). The fixes are listed in ``FIXES`` with the reason, and in
docs/tpu.md ("Where we differ from Ray's TPU manager").
"""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

from ray_accel_ext.testing.fake_metadata import MetadataServers
from ray_accel_ext.testing.snapshots import metadata_spec, snapshot_dirs
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS
from tests.support.ray_tpu import ray_tpu_node_spec

TPU_SNAPSHOTS = snapshot_dirs(HOSTS / "tpu")

# snapshot -> (why, {key: our value or None (we do not publish it)} for resources and labels).
FIXES: dict[str, tuple[str, dict[str, object], dict[str, object]]] = {
    "gke-tpu7x-4chip-single-host": (
        "Ray counts one TPU per VFIO group, 8 on a 4-chip TPU7x host (each chip is one PCI slot with two "
        "functions); we count chips. GKE sets neither TPU_NAME nor TPU_WORKER_ID on a single-host TPU7x "
        "pod, so Ray publishes no slice name, worker id or slice resources and ray.util.tpu cannot count "
        "the slice; we name a single-host slice after its host, worker 0.",
        {"TPU": 4, "gke-tpu7x-pool-0": 1, "TPU-v7x-8-head": 1},
        {"ray.io/tpu-slice-name": "gke-tpu7x-pool-0", "ray.io/tpu-worker-id": "0"},
    ),
    "gce-gvnic-nvme-no-tpu": (
        "Ray counts any VFIO group holding a 0x1ae0 function as a TPU, so a gVNIC bound to vfio-pci "
        "for DPDK becomes 'TPU: 1'; we count only TPU device ids.",
        {"TPU": None},
        {},
    ),
    "gce-v6e-4-metadata-timeout": (
        "With no metadata answer Ray has no pod type and so no accelerator type; we know the chips are "
        "v6e from their PCI device id and publish TPU-V6E (no slice labels: the slice is unknown).",
        {"accelerator_type:TPU-V6E": 1},
        {"ray.io/accelerator-type": "TPU-V6E"},
    ),
}


def _ours(snapshot, env, capsys, monkeypatch):
    for key in ("GCE_METADATA_HOST", "RAY_ACCEL_TPU_API_ENDPOINT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(["ray-args", "--root", str(snapshot), "--format", "json"]) == 0
    spec = json.loads(capsys.readouterr().out)
    return spec["resources"], {k: v for k, v in spec["labels"].items() if k.startswith("ray.io/")}


def _apply(fix: dict[str, object], ray_side: dict) -> dict:
    out = dict(ray_side)
    for key, value in fix.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


@pytest.mark.parametrize("snapshot", TPU_SNAPSHOTS, ids=lambda p: p.name)
def test_labels_and_resources_equal_rays_tpu_manager(snapshot, capsys, monkeypatch):
    spec = metadata_spec(snapshot)
    hangs = any(f.get("hang") for f in spec.get("gce_faults", {}).values())
    servers = MetadataServers(spec).start()
    try:
        base = f"http://{servers.gce.address}" if servers.gce else None
        ours_res, ours_labels = _ours(snapshot, servers.env(), capsys, monkeypatch)
        ours_calls = Counter(p for _, p in servers.gce.requests) if servers.gce else Counter()
        if servers.gce:
            servers.gce.requests.clear()
        if hangs:
            ray_side = _ray_against_hanging_server(snapshot, base, servers)
        else:
            ray_side = ray_tpu_node_spec(snapshot, base)
        ray_calls = Counter(p for _, p in servers.gce.requests) if servers.gce else Counter()
    finally:
        servers.stop()

    why, res_fix, label_fix = FIXES.get(snapshot.name, ("", {}, {}))
    expected_res = _apply(res_fix, ray_side["resources"])
    expected_labels = _apply(label_fix, ray_side["labels"])
    assert ours_res == expected_res, f"resources differ from Ray's TPU manager beyond the documented fix ({why or 'none'})"
    assert ours_labels == expected_labels, f"labels differ from Ray's TPU manager beyond the documented fix ({why or 'none'})"
    if snapshot.name in FIXES:
        # A fix must really be a difference, or it documents nothing.
        assert (ray_side["resources"], ray_side["labels"]) != (ours_res, ours_labels)

    # Fix everywhere: one metadata call per key (Ray repeats keys: accelerator-type 4x, ...).
    assert all(n == 1 for n in ours_calls.values()), ours_calls
    if not hangs and "instance/attributes/accelerator-type" in ray_calls:
        assert ray_calls["instance/attributes/accelerator-type"] > 1, ray_calls


def _ray_against_hanging_server(snapshot, base, servers):
    """Ray's manager calls requests.get without a timeout: it blocks as long as the server does.

    Our discovery of the same snapshot already ended within its budget (the CLI call above
    returned). Ray is given well past that budget and must still be blocked (the documented
    difference); then the server goes away, Ray's pending call fails, and Ray finishes with
    what it could read without metadata.
    """
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(ray_tpu_node_spec(snapshot, base)), daemon=True)
    thread.start()
    thread.join(5.0)  # our default budget is 3 s; give Ray more than that
    assert thread.is_alive(), "Ray's TPU manager was expected to block on a hanging metadata server"
    servers.stop()
    thread.join(60)
    assert not thread.is_alive()
    return result


def test_every_tpu_snapshot_is_compared():
    names = {p.name for p in TPU_SNAPSHOTS}
    assert len(names) >= 8 and set(FIXES) <= names
