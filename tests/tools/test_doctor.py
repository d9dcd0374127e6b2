"""``ray-accel doctor`` names the cause of each kind of damage, with a fix.

Each test builds a damaged copy of a recorded snapshot in a temp dir (a missing driver file or
library reading, a corrupt sysfs file, a missing tool, metadata that hangs / answers 429 / resets
/ refuses the IMDSv2 token) or a damaged Python environment (a broken vendor backend, a Ray
outside the tested range: real ``*.dist-info`` metadata on ``sys.path``), runs the CLI on it and
checks the finding.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ray_accel_ext.testing.snapshots import serve_snapshot
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS

H100 = HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
NO_ACCEL = HOSTS / "nvidia_gpu" / "no-accelerators"
TRN2 = HOSTS / "neuron" / "trn2-48xlarge"
INF2 = HOSTS / "neuron" / "inf2-xlarge"
V5E = HOSTS / "tpu" / "gce-v5litepod-8-single-host"


def _need(*snapshots: Path) -> None:
    missing = [s.name for s in snapshots if not s.is_dir()]
    assert not missing, f"snapshot(s) missing: {missing}"


def _copy(snapshot: Path, tmp_path: Path) -> Path:
    _need(snapshot)
    dst = tmp_path / snapshot.name
    shutil.copytree(snapshot, dst, symlinks=True)
    return dst


def _doctor(snapshot: Path, monkeypatch, capsys, **env: str) -> tuple[int, dict]:
    # generous limits: the machine may be busy, and only the fault tests want a timeout
    monkeypatch.setenv("RAY_ACCEL_BUDGET_S", "6")
    monkeypatch.setenv("RAY_ACCEL_METADATA_TIMEOUT_S", "2")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with serve_snapshot(snapshot) as served:
        for key in ("GCE_METADATA_HOST", "AWS_EC2_METADATA_SERVICE_ENDPOINT"):
            if key in served:
                monkeypatch.setenv(key, served[key])
            else:
                monkeypatch.delenv(key, raising=False)
        rc = main(["doctor", "--root", str(snapshot), "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)


def _by_cause(report: dict) -> dict[str, dict]:
    return {f["cause"]: f for f in report["findings"]}


def _set_metadata_fault(snapshot: Path, kind: str, fault: dict) -> None:
    path = snapshot / "metadata.json"
    spec = json.loads(path.read_text())
    spec[f"{kind}_faults"] = {"*": fault}
    path.write_text(json.dumps(spec))


def test_healthy_snapshot_has_no_errors(monkeypatch, capsys):
    _need(H100)
    rc, report = _doctor(H100, monkeypatch, capsys)
    assert rc == 0 and report["healthy"] and report["devices"] == 8
    assert [f for f in report["findings"] if f["severity"] == "error"] == []


def test_no_accelerators_at_all(monkeypatch, capsys):
    _need(NO_ACCEL)
    rc, report = _doctor(NO_ACCEL, monkeypatch, capsys)
    assert rc == 0
    assert "no PCI function of a known accelerator" in _by_cause(report)["no-accelerators"]["message"]


def test_missing_nvidia_driver(tmp_path, monkeypatch, capsys):
    snap = _copy(H100, tmp_path)
    (snap / "libraries" / "nvml.json").unlink()  # no driver: NVML cannot be read either
    rc, report = _doctor(snap, monkeypatch, capsys)
    found = _by_cause(report)
    assert rc == 1
    assert "/proc/driver/nvidia/version is missing" in found["driver-missing"]["message"]
    assert "modprobe nvidia" in found["driver-missing"]["message"]
    assert found["driver-missing"]["backend"] == "nvidia_gpu"


def test_driver_loaded_but_nvml_library_missing(tmp_path, monkeypatch, capsys):
    snap = _copy(H100, tmp_path)
    (snap / "libraries" / "nvml.json").unlink()
    version = snap / "rootfs/proc/driver/nvidia/version"
    version.parent.mkdir(parents=True)
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n")
    rc, report = _doctor(snap, monkeypatch, capsys)
    found = _by_cause(report)
    assert "driver-missing" not in found
    assert "nvidia-ml-py" in found["library-missing"]["message"] and found["library-missing"]["severity"] == "warning"


def test_unreadable_sysfs_file(tmp_path, monkeypatch, capsys):
    snap = _copy(H100, tmp_path)
    gpu = sorted((snap / "rootfs/sys/bus/pci/devices").iterdir())
    victim = next(p for p in gpu if (p / "vendor").read_text().strip() == "0x10de")
    (victim / "vendor").resolve().write_bytes(b"\x00\xff\x00garbage")
    rc, report = _doctor(snap, monkeypatch, capsys)
    found = _by_cause(report)
    assert rc == 1
    assert f"/sys/bus/pci/devices/{victim.name}/vendor" in found["file-unreadable"]["message"]
    assert "binary content" in found["file-unreadable"]["message"]


def test_missing_tool(tmp_path, monkeypatch, capsys):
    snap = _copy(TRN2, tmp_path)
    (snap / "commands" / "neuron-ls.json").write_text(json.dumps({"missing": True}))
    rc, report = _doctor(snap, monkeypatch, capsys)
    found = _by_cause(report)
    assert rc == 1 and found["tool-missing"]["backend"] == "neuron"
    assert "neuron-ls" in found["tool-missing"]["message"]


@pytest.mark.parametrize(
    ("fault", "cause"),
    [({"hang": True}, "metadata-timeout"), ({"status": 429, "retry_after": "0"}, "metadata-rate-limited"),
     ({"reset": True}, "metadata-unreachable")],
    ids=["timeout", "429", "unreachable"],
)
def test_gce_metadata_faults(fault, cause, tmp_path, monkeypatch, capsys):
    snap = _copy(V5E, tmp_path)
    _set_metadata_fault(snap, "gce", fault)
    rc, report = _doctor(snap, monkeypatch, capsys, RAY_ACCEL_METADATA_TIMEOUT_S="0.3")
    found = _by_cause(report)
    assert cause in found, report["findings"]
    assert rc == (1 if any(f["severity"] == "error" for f in report["findings"]) else 0)
    assert found[cause]["backend"] == "tpu" and "metadata" in found[cause]["message"]


def test_imds_token_refused(tmp_path, monkeypatch, capsys):
    snap = _copy(INF2, tmp_path)
    spec = json.loads((snap / "metadata.json").read_text())
    spec["ec2_faults"] = {"api/token": {"status": 403}}
    (snap / "metadata.json").write_text(json.dumps(spec))
    rc, report = _doctor(snap, monkeypatch, capsys)
    found = _by_cause(report)
    assert rc == 1
    assert "hop-limit" in found["metadata-token-refused"]["fix"]


def _dist_info(where: Path, name: str, version: str, entry_points: str = "") -> None:
    info = where / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points:
        (info / "entry_points.txt").write_text(entry_points)


@pytest.mark.parametrize("version, message", [
    ("2.54.0", "Ray 2.54.0 is older than the oldest supported release (2.55)"),
    ("2.61.0", "Ray 2.61.0 is outside the range this package is tested with (2.55 to 2.60)"),
])
def test_ray_version_outside_tested_range(tmp_path, monkeypatch, capsys, version, message):
    _need(H100)
    _dist_info(tmp_path / "site", "ray", version)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    rc, report = _doctor(H100, monkeypatch, capsys)
    found = _by_cause(report)
    assert report["ray_version"] == version
    assert message in found["ray-version"]["message"]
    assert "2.55 to 2.60" in found["ray-version"]["fix"]


def test_a_supported_ray_without_a_feature_says_what_is_off(tmp_path, monkeypatch, capsys):
    """The installed Ray is probed, not its version read: a placement_group() without topology_strategy=
    (as in Ray 2.56.1) is what makes the feature off."""
    _need(H100)
    pytest.importorskip("ray")
    import sys

    import ray.util.placement_group  # noqa: F401 - the module, reached through sys.modules below

    def placement_group(bundles, strategy="PACK", name="", lifetime=None, bundle_label_selector=None):
        raise AssertionError("never called")

    monkeypatch.setattr(sys.modules["ray.util.placement_group"], "placement_group", placement_group)
    rc, report = _doctor(H100, monkeypatch, capsys)
    found = _by_cause(report)
    assert "ray-version" not in found
    assert found["ray-feature"]["severity"] == "info"
    assert "lacks topology_strategy (Ray 2.57 and newer)" in found["ray-feature"]["message"]
    assert "bundle_label_selector only" in found["ray-feature"]["message"]


def test_backend_that_fails_to_load(tmp_path, monkeypatch, capsys):
    _need(H100)
    _dist_info(tmp_path / "site", "acme_broken", "1.0",
               "[ray_accel_ext.backends]\nzeta_npu = ray_accel_ext_zeta_missing:ZetaBackend\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    rc, report = _doctor(H100, monkeypatch, capsys)
    found = _by_cause(report)
    assert rc == 1
    assert found["backend-load"]["backend"] == "zeta_npu"
    assert "acme_broken 1.0" in found["backend-load"]["message"] and "RAY_ACCEL_DISABLE" in found["backend-load"]["fix"]
    assert report["devices"] == 8  # the other backends still found the GPUs


def test_backend_switched_off(monkeypatch, capsys):
    _need(H100)
    rc, report = _doctor(H100, monkeypatch, capsys, RAY_ACCEL_DISABLE="nvidia_gpu")
    found = _by_cause(report)
    assert "switched off by RAY_ACCEL_DISABLE" in found["backend-disabled"]["message"]
    assert report["devices"] == 0


def test_table_output_explains_with_fix(tmp_path, monkeypatch, capsys):
    snap = _copy(H100, tmp_path)
    (snap / "libraries" / "nvml.json").unlink()
    monkeypatch.setenv("RAY_ACCEL_BUDGET_S", "6")  # roomy, as in _doctor: the machine may be busy
    assert main(["doctor", "--root", str(snap)]) == 1
    out = capsys.readouterr().out
    assert "[ERROR] driver-missing" in out and "fix: install and load the kernel driver" in out


UNKNOWN = HOSTS / "nvidia_gpu" / "unknown-device-id"


def test_unknown_device_id_is_explained_not_blamed_on_the_driver(monkeypatch, capsys):
    """A GPU the SKU database lacks is counted; doctor says how to describe it and does not go
    looking for a missing driver (NVML answered)."""
    _need(UNKNOWN)
    rc, report = _doctor(UNKNOWN, monkeypatch, capsys)
    found = _by_cause(report)
    assert rc == 0 and report["devices"] == 1
    assert found["sku-unknown"]["severity"] == "warning" and found["sku-unknown"]["backend"] == "nvidia_gpu"
    assert "10de:2b85" in found["sku-unknown"]["message"]
    assert "RAY_ACCEL_SKU_DIR" in found["sku-unknown"]["fix"] and "ray-accel skus --validate" in found["sku-unknown"]["fix"]
    assert "driver-missing" not in found


@pytest.fixture
def sku_dir(tmp_path, monkeypatch):
    from ray_accel_ext import skus

    directory = tmp_path / "skus.d"
    directory.mkdir()
    monkeypatch.setenv("RAY_ACCEL_SKU_DIR", str(directory))
    yield directory
    monkeypatch.delenv("RAY_ACCEL_SKU_DIR")
    skus.reload()


def test_bad_extra_sku_file_is_named_and_the_node_keeps_its_skus(sku_dir, monkeypatch, capsys):
    from ray_accel_ext import skus

    (sku_dir / "site.json").write_text('{"schema": 1, "family": "nvidia", "vendor": "nvidia", "entries": [{"device_id": 1}]}')
    skus.reload()
    rc, report = _doctor(H100, monkeypatch, capsys)
    found = _by_cause(report)
    assert rc == 0 and report["devices"] == 8
    assert "site.json: entries[0]" in found["sku-file"]["message"] and "--validate" in found["sku-file"]["fix"]


def test_unknown_tpu_chips_are_explained_and_counted(monkeypatch, capsys):
    snap = HOSTS / "tpu" / "gce-tpu-unknown-id"
    rc, report = _doctor(snap, monkeypatch, capsys)
    found = _by_cause(report)
    assert found["sku-unknown"]["backend"] == "tpu" and "1ae0:0080" in found["sku-unknown"]["message"]
    assert report["devices"] == 4 and "no-accelerators" not in found


def test_tpu_generation_without_a_layout_is_not_called_unknown(sku_dir, monkeypatch, capsys):
    """An extra SKU file names the chip, but with a generation this release cannot lay out: the
    chips are counted under the file's SKU, and doctor says to upgrade or fix the file, not to
    add an entry that is already there."""
    from ray_accel_ext import skus

    (sku_dir / "site.json").write_text(json.dumps({
        "schema": 1, "family": "tpu", "vendor": "google", "vendor_id": "0x1ae0", "sources": {"site": "our notes"},
        "entries": [{"device_id": "0x0080", "sku": "tpu-v9", "product": "TPU v9", "generation": "v9",
                     "memory_gib": 64, "ray_accelerator_type": None, "interconnect": "ici", "source": ["site"]}],
    }))
    skus.reload()
    _, report = _doctor(HOSTS / "tpu" / "gce-tpu-unknown-id", monkeypatch, capsys)
    found = _by_cause(report)
    assert report["devices"] == 4 and "sku-unknown" not in found
    finding = found["generation-unsupported"]
    assert finding["backend"] == "tpu" and finding["severity"] == "warning"
    assert "tpu-v9" in finding["message"] and "'v9'" in finding["message"] and "site.json" in finding["message"]
    assert "upgrade ray-accel-ext" in finding["fix"] and "no-accelerators" not in found and "driver-missing" not in found
    assert main(["discover", "--root", str(HOSTS / "tpu" / "gce-tpu-unknown-id"), "--format", "json"]) == 0
    (desc,) = [d for d in json.loads(capsys.readouterr().out)["descriptions"] if d["backend"] == "tpu"]
    assert (desc["sku"]["name"], desc["sku"]["generation"], desc["resource_quantity"]) == ("tpu-v9", "v9", 4)
    assert {d["memory_bytes"] for d in desc["devices"]} == {64 << 30}


@pytest.mark.needs_ray  # without Ray the doctor rightly reports it missing: a finding
def test_extra_sku_file_describes_the_unknown_device(sku_dir, monkeypatch, capsys):
    from ray_accel_ext import skus

    (sku_dir / "site.json").write_text(json.dumps({
        "schema": 1, "family": "nvidia", "vendor": "nvidia", "vendor_id": "0x10de",
        "sources": {"site": "our own inventory"},
        "entries": [{"device_id": "0x2b85", "sku": "rtx-5090-32gb", "product": "NVIDIA GeForce RTX 5090",
                     "nvml_name": "NVIDIA GeForce RTX 5090", "generation": "blackwell", "memory_gib": 32,
                     "ray_accelerator_type": "GeForce-RTX-5090", "interconnect": "none", "source": ["site"]}],
    }))
    skus.reload()
    rc, report = _doctor(UNKNOWN, monkeypatch, capsys)
    assert rc == 0 and report["findings"] == [] and not report["degraded"]
