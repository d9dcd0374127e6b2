"""``ray-accel record``: a recording of a host gives the same description as the host itself.

For every snapshot under tests/data/hosts at test time: record it through the CLI (``--root``,
with its metadata fakes served), then discover the recording (with the recording's own
metadata.json served) and compare with discovering the original.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ray_accel_ext.host import open_host
from ray_accel_ext.host.snapshot import KEEP_MARKER
from ray_accel_ext.testing.snapshots import golden_of, run_snapshot, serve_snapshot, snapshot_dirs
from ray_accel_ext.tools.cli import main
from ray_accel_ext.tools.record import record
from tests.support.paths import HOSTS

SNAPSHOTS = snapshot_dirs(HOSTS)


def _comparable(golden: dict) -> dict:
    """The golden without the loopback port of this run's metadata fakes (problem messages name
    the endpoint, and every run serves the snapshot on a fresh port)."""
    data = {"descriptions": golden["descriptions"], "problems": golden["problems"], "ray": golden["ray"]}
    return json.loads(re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", json.dumps(data)))


def _record_cli(snapshot: Path, out: Path, monkeypatch, capsys) -> str:
    with serve_snapshot(snapshot) as env:
        for key in ("GCE_METADATA_HOST", "AWS_EC2_METADATA_SERVICE_ENDPOINT"):
            if key in env:
                monkeypatch.setenv(key, env[key])
            else:
                monkeypatch.delenv(key, raising=False)
        assert main(["record", str(out), "--root", str(snapshot)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recording_gives_the_same_description(snapshot, tmp_path, monkeypatch, capsys):
    out = tmp_path / "rec"
    printed = _record_cli(snapshot, out, monkeypatch, capsys)
    assert "recorded" in printed
    original = _comparable(golden_of(*run_snapshot(snapshot)))
    again = _comparable(golden_of(*run_snapshot(out)))
    assert again == original
    # the recording's own golden is the live run's result
    assert _comparable(json.loads((out / "expected.json").read_text())) == original
    assert (out / "README.md").read_text().startswith("# Recorded host:")
    # git keeps no empty directory: every directory of a recording holds something
    assert not [p for p in (out / "rootfs").rglob("*") if p.is_dir() and not p.is_symlink() and not any(p.iterdir())]


@pytest.mark.parametrize("snapshot", SNAPSHOTS[:1], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recording_holds_only_what_discovery_read(snapshot, tmp_path, monkeypatch, capsys):
    out = tmp_path / "rec"
    _record_cli(snapshot, out, monkeypatch, capsys)
    files = {p.relative_to(out / "rootfs") for p in (out / "rootfs").rglob("*") if p.is_file() and not p.is_symlink()}
    source = {p.relative_to(snapshot / "rootfs") for p in (snapshot / "rootfs").rglob("*") if p.is_file() and not p.is_symlink()}
    # keep markers hold directories that discovery looked at but read nothing below (git drops empty ones)
    markers = {f for f in files if f.name == KEEP_MARKER}
    assert all((snapshot / "rootfs" / m.parent).is_dir() for m in markers)
    recorded = files - markers
    assert recorded and recorded <= source
    for rel in (out / "rootfs").rglob("*"):
        if rel.is_symlink():
            assert not os.readlink(rel).startswith("/"), f"{rel} must be a relative symlink"


def _tree(tmp_path: Path) -> Path:
    """A small host: one NVIDIA GPU on the PCI bus plus an environment full of secrets."""
    snap = tmp_path / "src"
    dev = snap / "rootfs/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    dev.mkdir(parents=True)
    for name, value in {"vendor": "0x10de", "device": "0x2330", "class": "0x030200", "numa_node": "0",
                        "local_cpulist": "0-3", "subsystem_vendor": "0x10de", "subsystem_device": "0x16c1"}.items():
        (dev / name).write_text(value + "\n")
    bus = snap / "rootfs/sys/bus/pci/devices"
    bus.mkdir(parents=True)
    # an absolute link on the source: the recording must make it relative
    os.symlink("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", bus / "0000:01:00.0")
    (snap / "rootfs/proc/sys/kernel").mkdir(parents=True)
    (snap / "rootfs/proc/sys/kernel/hostname").write_text("gpu-box\n")
    return snap


def test_secrets_never_reach_the_recording(tmp_path):
    snap = _tree(tmp_path)
    secrets = {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
        "AWS_SESSION_TOKEN": "FQoGZXIvYXdzEXAMPLE", "HF_TOKEN": "hf_example_token_value",
        "DB_PASSWORD": "hunter2", "RAY_AUTH_TOKEN": "deadbeefcafe",
    }
    (snap / "env.json").write_text(json.dumps({**secrets, "CUDA_VISIBLE_DEVICES": "0"}))
    host = open_host(snap, environ={})
    from ray_accel_ext.host.recording import RecordingHost

    rec = RecordingHost(host)
    for name in [*secrets, "CUDA_VISIBLE_DEVICES", "NOT_SET"]:
        rec.env.get(name)
    assert rec.env.recorded() == ({"CUDA_VISIBLE_DEVICES": "0"}, sorted(secrets))
    summary = record(rec.inner, tmp_path / "rec")
    blob = "".join(p.read_text(errors="replace") for p in (tmp_path / "rec").rglob("*") if p.is_file())
    for value in secrets.values():
        assert value not in blob
    assert summary["files"] >= 1
    link = tmp_path / "rec/rootfs/sys/bus/pci/devices/0000:01:00.0"
    assert link.is_symlink() and not os.readlink(link).startswith("/")
    assert (link / "vendor").read_text() == "0x10de\n"


def test_metadata_tokens_and_credential_lines_are_dropped(tmp_path):
    from ray_accel_ext.host.recording import RecordingMetadata

    class Client:
        def gce(self, path):
            return {"instance/service-accounts/default/token": '{"access_token": "ya29.secret"}',
                    "instance/zone": "projects/1/zones/us-central2-b"}.get(path)

        def gce_attribute(self, key):
            return "TOPOLOGY: '4x4'\nAPI_KEY: 'abc123'\nWORKER_ID: '0'\n"

        def imds(self, path):
            return None

    md = RecordingMetadata(Client())
    md.gce("instance/service-accounts/default/token")
    md.gce("instance/zone")
    md.gce_attribute("tpu-env")
    md.imds("iam/security-credentials/role")
    data, dropped = md.recorded()
    assert data["gce"] == {"instance/attributes/tpu-env": "TOPOLOGY: '4x4'\nWORKER_ID: '0'\n",
                           "instance/zone": "projects/1/zones/us-central2-b"}
    assert data["ec2"] == {}
    assert dropped == ["gce:instance/attributes/tpu-env:API_KEY", "gce:instance/service-accounts/default/token",
                       "ec2:iam/security-credentials/role"]


def test_record_refuses_a_non_empty_directory(tmp_path, capsys):
    snap = _tree(tmp_path)
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["record", str(out), "--root", str(snap)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "mine"
