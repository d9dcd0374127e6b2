"""SKU files a vendor package ships (entry-point group ``ray_accel_ext.skus``): found after ``pip install``
alone, validated like the built-in files, read without importing the package, and below the
operator's directories in precedence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ray_accel_ext.testing.cluster import with_this_package
from tests.support.paths import TESTS

EMPTY = TESTS / "downstream" / "ray_accel_ext_acme" / "tests" / "hosts" / "empty"
GOOD = {"schema": 1, "family": "vendorx", "vendor": "vendorx", "vendor_id": "0x1f7b", "sources": {"ds": "datasheet"},
        "entries": [{"device_id": "0x0001", "sku": "vx-1", "product": "VendorX One", "generation": "gen1", "memory_gib": 32,
                     "ray_accelerator_type": "VX-1", "interconnect": "none", "source": ["ds"]}]}


def _distribution(root: Path, files: dict[str, object]) -> Path:
    """A vendor distribution on ``root`` (what pip leaves: a package and its dist-info with the entry
    point); its ``__init__`` raises, so reading its data must not import it."""
    pkg = root / "vendorx_pkg"
    (pkg / "skus").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('vendor code ran while reading SKU data')\n")
    for name, doc in files.items():
        (pkg / "skus" / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))
    info = root / "vendorx-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vendorx\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ray_accel_ext.skus]\nvendorx = vendorx_pkg.skus\n")
    return root


def _cli(root: Path, *argv: str, **env: str) -> subprocess.CompletedProcess:
    environ = with_this_package({k: v for k, v in os.environ.items() if not k.startswith("RAY_ACCEL")})
    environ["PYTHONPATH"] = environ["PYTHONPATH"] + os.pathsep + str(root)
    environ.update(env)
    return subprocess.run([sys.executable, "-m", "ray_accel_ext.tools.cli", *argv], env=environ, capture_output=True,
                          text=True, timeout=120)


def test_vendor_entries_are_in_ray_accel_skus_after_install_alone(tmp_path):
    root = _distribution(tmp_path, {"vendorx.json": GOOD})
    done = _cli(root, "skus", "--format", "json")
    doc = json.loads(done.stdout)
    found = [e for e in doc["entries"] if e["family"] == "vendorx"]
    assert [(e["sku"], e["ray_accelerator_type"]) for e in found] == [("vx-1", "VX-1")], done.stderr
    assert any(f.endswith("vendorx_pkg/skus/vendorx.json") for f in doc["files"]) and not doc["problems"]


def test_a_broken_vendor_file_is_reported_by_skus_and_doctor_and_ignored(tmp_path):
    bad = {**GOOD, "entries": [{**GOOD["entries"][0], "sku": "Not A Label"}]}
    root = _distribution(tmp_path, {"bad.json": bad})
    doc = json.loads(_cli(root, "skus", "--format", "json").stdout)
    assert not [e for e in doc["entries"] if e["family"] == "vendorx"]
    assert any("bad.json" in p and "sku" in p for p in doc["problems"]), doc["problems"]
    diagnosis = json.loads(_cli(root, "doctor", "--root", str(EMPTY), "--format", "json").stdout)
    assert any(f["cause"] == "sku-file" and "bad.json" in f["message"] for f in diagnosis["findings"]), diagnosis["findings"]


def test_the_operators_directory_wins_over_the_vendor_package(tmp_path):
    root = _distribution(tmp_path / "site", {"vendorx.json": GOOD})
    site_dir = tmp_path / "operator"
    site_dir.mkdir()
    (site_dir / "fix.json").write_text(json.dumps({**GOOD, "entries": [{**GOOD["entries"][0], "memory_gib": 48}]}))
    doc = json.loads(_cli(root, "skus", "--format", "json", RAY_ACCEL_SKU_DIR=str(site_dir)).stdout)
    assert [e["memory_gib"] for e in doc["entries"] if e["family"] == "vendorx"] == [48]
