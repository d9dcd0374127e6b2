"""docs/vendors.md works as written: its backend, entry point and commands give a passing suite.

The test does what a new vendor does: the ``python`` block becomes the package, the ``toml``
entry point is installed (as a hand-written ``.dist-info`` on ``PYTHONPATH``, which is what pip
writes), and the ``sh`` block, unchanged, records the snapshots and runs the suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from tests.support.paths import REPO
from tests.support.vendor_example import MAX_EXAMPLE_LINES, example_lines

DOC = REPO / "docs" / "vendors.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", DOC.read_text(), re.M | re.S)


def test_backend_example_is_about_30_lines():
    (code,) = _blocks("python")
    assert example_lines(code) <= MAX_EXAMPLE_LINES, "the README example must stay short (about 30 lines)"


@pytest.fixture
def acme_project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    site = tmp_path / "site"
    pkg = site / "ray_accel_ext_acme"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(_blocks("python")[0])
    (toml,) = _blocks("toml")
    groups = tomllib.loads(toml)["project"]["entry-points"]
    dist = site / "ray_accel_ext_acme-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ray-accel-ext-acme\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for g, eps in groups.items())
    )
    project = tmp_path / "project"
    project.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for key in [k for k in env if k.startswith("RAY_ACCEL_CONFORMANCE_")]:
        del env[key]
    return project, env


def test_vendor_example_passes_the_suite(acme_project):
    project, env = acme_project
    (script,) = _blocks("sh")
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=project, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert re.search(r"\d+ passed", out) and " failed" not in out, out[-3000:]
    golden = (project / "tests/hosts/acme-4npu/expected.json").read_text()
    assert '"acme.ai/npu.firmware": "2.1.0"' in golden and '"acme_npu": 4' in golden


def test_vendor_example_checklist_table(acme_project):
    project, env = acme_project
    (script,) = _blocks("sh")
    setup = script.split("\npytest --pyargs")[0]
    subprocess.run(["bash", "-e", "-c", setup], cwd=project, env=env, check=True, capture_output=True, timeout=300)
    proc = subprocess.run(
        [sys.executable, "-m", "ray_accel_ext.tools.cli", "conformance", "acme_npu", "--snapshots", "tests/hosts"],
        cwd=project, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS    Registered through the ray_accel_ext.backends entry point" in proc.stdout
    assert "SKIP    Capabilities declared as data, and delivered" not in proc.stdout
    assert "acme_npu does not declare Capabilities(fabric_domains=True) (+4 more)" in proc.stdout
    # the seventh skip: the example declares no pci_ids (CHECKLIST item 11 applies to PCI devices)
    assert "acme_npu declares no pci_ids" in proc.stdout
    # the eighth: the live isolation check (item 8) runs only with --live-ray, like item 9
    assert "PASS: 35 passed, 0 failed, 8 skipped" in proc.stdout


DOWNSTREAM = REPO / "tests" / "downstream" / "ray_accel_ext_acme"


def test_the_separately_packaged_backend_is_this_example():
    """CI installs tests/downstream/ray_accel_ext_acme with pip and runs the suite on it
    (ci/conformance.sh): its code and entry point are this document's, unchanged."""
    (code,) = _blocks("python")
    assert (DOWNSTREAM / "src" / "ray_accel_ext_acme" / "__init__.py").read_text() == code
    (toml,) = _blocks("toml")
    package = tomllib.loads((DOWNSTREAM / "pyproject.toml").read_text())
    assert package["project"]["entry-points"] == tomllib.loads(toml)["project"]["entry-points"]
    for script in ("ci/conformance.sh", "ci/test.sh"):
        assert "tests/downstream/ray_accel_ext_acme" in (REPO / script).read_text(), script
