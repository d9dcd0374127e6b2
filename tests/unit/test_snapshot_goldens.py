"""Every host snapshot under tests/data/hosts gives exactly its golden expected.json.

Runs through the public CLI (``ray-accel discover/ray-args --root DIR --format json``) with the
snapshot's metadata served by loopback fakes, so the golden covers discovery and the adapter.
"""

from __future__ import annotations

import json

import pytest

from ray_accel_ext.model import golden_form
from ray_accel_ext.testing.snapshots import load_expected, serve_snapshot, snapshot_dirs
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS

SNAPSHOTS = snapshot_dirs(HOSTS)


def _cli_json(capsys, monkeypatch, env, argv):
    for key, value in env.items():
        if key.startswith(("GCE_", "AWS_EC2_", "RAY_ACCEL_")):
            monkeypatch.setenv(key, value)
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_snapshot_matches_golden(snapshot, capsys, monkeypatch):
    expected = load_expected(snapshot)
    readme = snapshot / "README.md"
    assert readme.is_file() and readme.read_text().strip(), f"{snapshot} must say what machine it stands for"
    with serve_snapshot(snapshot) as env:
        inventory = _cli_json(capsys, monkeypatch, env, ["discover", "--root", str(snapshot), "--format", "json"])
        ray_args = _cli_json(capsys, monkeypatch, env, ["ray-args", "--root", str(snapshot), "--format", "json"])
    assert [golden_form(d) for d in inventory["descriptions"]] == expected["descriptions"]
    assert [{k: p[k] for k in ("backend", "stage", "error")} for p in inventory["problems"]] == expected["problems"]
    assert ray_args == expected["ray"]


def test_every_backend_has_snapshots():
    backends = {p.parent.name for p in SNAPSHOTS}
    assert "nvidia_gpu" in backends, backends


def test_snapshots_have_no_empty_directories():
    """Git does not keep empty directories: a snapshot relying on one differs in a fresh clone."""
    empty = [str(p.relative_to(HOSTS)) for s in SNAPSHOTS for p in s.rglob("*") if p.is_dir() and not p.is_symlink() and not any(p.iterdir())]
    assert not empty, f"empty directories (put a real sysfs attribute file in them): {empty[:5]}"
