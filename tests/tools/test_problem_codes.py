"""Problem codes: the golden hosts' problems carry the right codes, a vendor backend's own code
reaches ``ray-accel doctor`` with its fix (across the worker-process boundary), and the vocabulary
in ``docs/problems.md`` is the one in ``ray_accel_ext/problems.py``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ray_accel_ext import problems
from ray_accel_ext.findings import finding_of
from ray_accel_ext.model import NodeDescription, Problem, Sku
from ray_accel_ext.testing.fake_backend import PEER_MISSING
from ray_accel_ext.testing.snapshots import serve_snapshot
from ray_accel_ext.tools.cli import main
from tests.support.paths import HOSTS

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "ray_accel_ext" / "conformance" / "data" / "hosts" / "fake_accel" / "fake-4dev-hive"


def _cli(argv: list[str], snapshot: Path, monkeypatch, capsys) -> dict:
    monkeypatch.setenv("RAY_ACCEL_BUDGET_S", "6")
    monkeypatch.setenv("RAY_ACCEL_METADATA_TIMEOUT_S", "0.5")
    with serve_snapshot(snapshot) as served:
        for key in ("GCE_METADATA_HOST", "AWS_EC2_METADATA_SERVICE_ENDPOINT"):
            if key in served:
                monkeypatch.setenv(key, served[key])
            else:
                monkeypatch.delenv(key, raising=False)
        main([*argv, "--root", str(snapshot), "--format", "json"])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("snapshot, codes", [
    ("neuron/inf2-xlarge-imds-no-token", ["metadata-token-refused"]),
    ("neuron/trn2-48xlarge-no-neuron-ls", ["tool-missing"]),
    ("nvidia_gpu/unknown-device-id", ["sku-unknown"]),
    ("tpu/gce-tpu-unknown-id", ["sku-unknown", "degraded"]),
    ("tpu/gce-v6e-4-metadata-timeout", ["metadata-timeout", "degraded"]),
    ("tpu/gke-tpu-unknown-id-typed", ["sku-unknown"]),
])
def test_golden_hosts_problems_carry_their_codes(snapshot, codes, monkeypatch, capsys):
    """The golden files keep messages only; the codes of the same problems are checked here."""
    out = _cli(["discover"], HOSTS / snapshot, monkeypatch, capsys)
    found = [p["code"] for d in out["descriptions"] for p in d["problems"]]
    assert found == codes, out["descriptions"][0]["problems"]
    assert all(p["backend"] == d["backend"] for d in out["descriptions"] for p in d["problems"])


def _vendor_site(where: Path) -> None:
    """A distribution that is not this package, installing the fake backend: it runs in a worker process."""
    info = where / "acme_fake-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme_fake\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[ray_accel_ext.backends]\nfake_accel = ray_accel_ext.testing.fake_backend:FakeBackend\n")


def test_a_vendor_code_reaches_doctor_with_its_fix(tmp_path, monkeypatch, capsys):
    snap = tmp_path / "fake"
    shutil.copytree(FAKE, snap, symlinks=True)
    links = snap / "rootfs/sys/class/fake_accel/accel0/links"
    text = links.read_text().strip()
    links.unlink()
    links.write_text(f"{text} 9\n")
    _vendor_site(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    report = _cli(["doctor"], snap, monkeypatch, capsys)
    (finding,) = [f for f in report["findings"] if f["backend"] == "fake_accel"]
    assert finding["cause"] == PEER_MISSING.code and finding["severity"] == "warning" and finding["declared"]
    assert PEER_MISSING.hint in finding["fix"] and "peer 9 does not exist" in finding["message"]
    assert "device 0" in finding["detail"]


def test_declare_keeps_builtin_codes_and_undeclared_codes_are_named():
    with pytest.raises(ValueError, match="built in"):
        problems.declare("file-missing", severity="info", summary="mine", hint="mine")
    with pytest.raises(ValueError, match="lowercase"):
        problems.declare("Not A Code", severity="info", summary="s", hint="h")
    assert problems.lookup("file-missing").severity == "error"
    undeclared = finding_of(Problem(code="acme-never-declared", message="it broke", backend="acme", hint="call acme"))
    assert not undeclared.declared and undeclared.cause == "acme-never-declared" and undeclared.fix == "call acme"


def test_a_plain_string_problem_gets_the_generic_code_and_both_forms_load():
    desc = NodeDescription(backend="acme", sku=Sku(vendor="acme", name="x", generation="g"), resource_name="acme",
                           resource_quantity=0, devices=(), problems=("an old-style problem line",))
    (problem,) = desc.problems
    assert (problem.code, problem.backend, problem.message) == (problems.DEGRADED, "acme", "an old-style problem line")
    assert NodeDescription.from_dict(desc.to_dict()) == desc
    old = {**desc.to_dict(), "problems": ["an old-style problem line"]}
    assert NodeDescription.from_dict(old) == desc
    assert desc.golden_dict()["problems"] == ["an old-style problem line"]


def test_docs_list_every_code_as_problems_py_declares_it():
    doc = (ROOT / "docs" / "problems.md").read_text()
    for entry in problems.codes(vendor=False):
        row = f"| `{entry.code}` | {entry.severity} | {entry.summary} | {entry.hint} |"
        assert row in doc, f"docs/problems.md lacks or differs for {entry.code}: regenerate with python -m ray_accel_ext.problems"
