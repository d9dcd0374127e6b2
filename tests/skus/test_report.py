"""The ``ray-accel skus`` command logic: table, JSON, --check and --validate."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

from ray_accel_ext import skus
from ray_accel_ext.skus import report

PINNED = Path(__file__).parents[1] / "data" / "pci.ids"


def _run(*argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="ray-accel skus")
    report.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    rc = report.run(parser.parse_args(list(argv)), out, err)
    return rc, out.getvalue(), err.getvalue()


def test_table_lists_every_entry():
    rc, out, _ = _run()
    lines = out.strip().splitlines()
    assert rc == 0 and lines[0].split()[:5] == ["FAMILY", "VENDOR_ID", "DEVICE_ID", "SUBSYSTEM", "SKU"]
    assert len(lines) == 1 + len(skus.entries())
    assert any(line.split()[4] == "rtx-pro-6000-blackwell-server-96gb" for line in lines[1:])


def test_json_has_entries_left_out_files_and_problems():
    rc, out, _ = _run("--format", "json", "--family", "tpu")
    doc = json.loads(out)
    assert rc == 0 and {e["sku"] for e in doc["entries"]} == {e.sku for e in skus.entries("tpu")}
    v6e = next(e for e in doc["entries"] if e["sku"] == "tpu-v6e")
    assert v6e["machine_types"] == {"ct6e-standard-1t": 1, "ct6e-standard-4t": 4, "ct6e-standard-8t": 8}
    assert doc["left_out"][0]["device_id"] == "0xabcd" and doc["problems"] == []
    assert "builtin:tpu.json" in doc["files"]


def test_check_pinned_file_finds_nothing_missing():
    rc, out, err = _run("--check", str(PINNED))
    assert (rc, out) == (0, "") and err.startswith("0 in-scope")


def test_check_reports_new_in_scope_ids_only(tmp_path):
    newer = tmp_path / "pci.ids"
    newer.write_text(PINNED.read_text(encoding="utf-8").replace(
        "\t2330  GH100 [H100 SXM5 80GB]\n",
        "\t2330  GH100 [H100 SXM5 80GB]\n\t23ff  GH100 [H300 SXM 999GB]\n\t2400  GH100 NVSwitch-free\n"
        "\t2401  GA102 [GeForce RTX 3090 Super]\n"))
    rc, out, _ = _run("--check", str(newer))
    assert rc == 1 and out.splitlines() == ["10de:23ff  GH100 [H300 SXM 999GB]", "10de:2400  GH100 NVSwitch-free"]
    rc, out, _ = _run("--check", str(newer), "--format", "json")
    assert [m["device_id"] for m in json.loads(out)] == ["0x23ff", "0x2400"]


def test_check_unreadable_file(tmp_path):
    rc, out, err = _run("--check", str(tmp_path / "missing.ids"))
    assert rc == 2 and out == "" and "missing.ids: cannot read" in err


def test_validate(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"schema": 1, "family": "site", "vendor": "nvidia", "entries": []}))
    bad.write_text(json.dumps({"schema": 1, "family": "site", "vendor": "nvidia", "entries": [{"device_id": "0x1"}]}))
    rc, out, _ = _run("--validate", str(good), str(bad))
    assert rc == 1
    assert out.splitlines() == [f"{good}: ok, 0 entries", f"{bad}: entries[0].sku: missing (required; use null where a value is not known)"]
