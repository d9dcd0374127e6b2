"""Extra SKU files from RAY_ACCEL_SKU_DIR: validation naming file and field, skip-and-report,
precedence over the built-in data, and loading once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ray_accel_ext import skus

ROOT = Path(__file__).parents[2]


def _entry(**over):
    base = {"device_id": "0x2330", "sku": "h100-site-80gb", "product": "NVIDIA H100 80GB HBM3",
            "nvml_name": "NVIDIA H100 80GB HBM3", "generation": "hopper", "memory_gib": 80,
            "ray_accelerator_type": "H100", "interconnect": "nvlink4", "source": ["site inventory"]}
    base.update(over)
    return base


def _file(directory: Path, name: str, entries=None, **top) -> Path:
    doc = {"schema": 1, "family": "nvidia", "vendor": "nvidia", "vendor_id": "0x10de",
           "entries": entries if entries is not None else [_entry()]}
    doc.update(top)
    path = directory / name
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def load_from():
    """Reload the database from given directories; restore the process's own view afterwards."""
    def load(*dirs: Path) -> None:
        skus.reload({skus.ENV_VAR: os.pathsep.join(str(d) for d in dirs)})
    yield load
    skus.reload()


def test_extra_entry_wins_over_the_built_in_one(tmp_path, load_from):
    path = _file(tmp_path, "site.json")
    load_from(tmp_path)
    hit = skus.lookup("0x10de", "0x2330")
    assert (hit.sku, hit.origin) == ("h100-site-80gb", str(path))
    assert skus.load_problems() == ()
    assert skus.lookup("0x10de", "0x2331").sku == "h100-pcie-80gb"  # the rest is still built in
    assert str(path) in skus.loaded_files()


def test_extra_entry_adds_a_new_id(tmp_path, load_from):
    _file(tmp_path, "new.json", [_entry(device_id="0x2b85", sku="geforce-rtx-5090-32gb", product="NVIDIA GeForce RTX 5090",
                                        nvml_name=None, generation="blackwell", memory_gib=32,
                                        ray_accelerator_type="GeForce-RTX-5090", interconnect="none")])
    load_from(tmp_path)
    who = skus.identify("0x10de", "0x2b85", nvml_name="NVIDIA GeForce RTX 5090")
    assert (who.sku, who.generation, who.memory_gib, who.source) == ("geforce-rtx-5090-32gb", "blackwell", 32, "database")


def test_first_listed_directory_wins_and_later_file_names_win_within_one(tmp_path, load_from):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    _file(second, "a.json", [_entry(sku="from-second")])
    _file(first, "a.json", [_entry(sku="from-first-a")])
    _file(first, "b.json", [_entry(sku="from-first-b")])
    load_from(first, second)
    assert skus.lookup("0x10de", "0x2330").sku == "from-first-b"
    assert skus.extra_dirs()[-1] == skus.SYSTEM_DIR


def test_bad_json_is_skipped_and_named(tmp_path, load_from):
    (tmp_path / "broken.json").write_text('{"schema": 1, "entries": [')
    _file(tmp_path, "good.json")
    load_from(tmp_path)
    (problem,) = skus.load_problems()
    assert str(tmp_path / "broken.json") in problem and "not JSON" in problem and "file ignored" in problem
    assert skus.lookup("0x10de", "0x2330").sku == "h100-site-80gb"  # the good file still counts


@pytest.mark.parametrize("entry, field, words", [
    (_entry(memory_gib="80GB"), "entries[0].memory_gib", "whole GiB"),
    (_entry(memory_gib=True), "entries[0].memory_gib", "whole GiB"),
    (_entry(sku="H100 SXM"), "entries[0].sku", "label value"),
    (_entry(device_id="2330"), "entries[0].device_id", "PCI device id"),
    (_entry(subsystem="10de-14a9"), "entries[0].subsystem", "0xVVVV:0xDDDD"),
    (_entry(colour="green"), "entries[0].colour", "unknown field"),
    (_entry(source=[]), "entries[0].source", "citations"),
    (_entry(ray_accelerator_type="H100-SXM"), "entries[0].ray_accelerator_type", "Ray 2.60 derives 'H100'"),
    (_entry(machine_types={"p5.48xlarge": 0}), "entries[0].machine_types.p5.48xlarge", "integer"),
    ({k: v for k, v in _entry().items() if k != "generation"}, "entries[0].generation", "missing"),
])
def test_bad_field_is_skipped_and_named(tmp_path, load_from, entry, field, words):
    path = _file(tmp_path, "site.json", [entry])
    load_from(tmp_path)
    (problem,) = skus.load_problems()
    assert problem.startswith(f"skus: {path}: {field}: ") and words in problem, problem
    assert skus.lookup("0x10de", "0x2330").sku == "h100-sxm5-80gb"  # built-in entry untouched


@pytest.mark.parametrize("top, field", [
    ({"schema": 2}, "schema"),
    ({"family": "NVIDIA"}, "family"),
    ({"entries": {}}, "entries"),
    ({"scope": {"0x10de": ["("]}}, "scope.0x10de[0]"),
    ({"left_out": [{"device_id": "0x2330"}]}, "left_out[0].reason"),
    ({"extra": 1}, "extra"),
])
def test_bad_file_level_field_is_named(tmp_path, load_from, top, field):
    path = _file(tmp_path, "site.json", **top)
    load_from(tmp_path)
    (problem,) = skus.load_problems()
    assert problem.startswith(f"skus: {path}: {field}: "), problem


def test_duplicate_key_in_one_file(tmp_path, load_from):
    path = _file(tmp_path, "dup.json", [_entry(), _entry(sku="again")])
    load_from(tmp_path)
    assert skus.load_problems() == (f"skus: {path}: entries[1]: duplicate of entries[0] (same vendor_id, device_id, subsystem); file ignored",)


def test_not_an_object_not_utf8_and_too_large(tmp_path, load_from):
    (tmp_path / "a.json").write_text("[1, 2]")
    (tmp_path / "b.json").write_bytes(b'{"schema": 1, "family": "\xff"}')
    (tmp_path / "c.json").write_text(" " * (2 << 20))
    (tmp_path / "notes.txt").write_text("not a SKU file, not read")
    load_from(tmp_path)
    problems = skus.load_problems()
    assert len(problems) == 3
    assert "a.json: expected a JSON object" in problems[0]
    assert "b.json: not UTF-8" in problems[1]
    assert "c.json: larger than" in problems[2]


def test_missing_directory_is_quiet_and_a_file_in_its_place_is_reported(tmp_path, load_from):
    (tmp_path / "plain").write_text("")
    load_from(tmp_path / "absent", tmp_path / "plain")
    assert len(skus.load_problems()) == 1 and "plain: cannot list" in skus.load_problems()[0]
    assert skus.lookup("0x10de", "0x2330").sku == "h100-sxm5-80gb"


def test_check_file_raises_for_the_cli(tmp_path):
    path = _file(tmp_path, "x.json", [_entry(memory_gib=-1)])
    with pytest.raises(skus.SkuFileError) as info:
        skus.check_file(path)
    assert (info.value.origin, info.value.path) == (str(path), "entries[0].memory_gib")


def test_env_variable_is_read_lazily_once_per_process(tmp_path):
    """A fresh process: the directory is read at first use (not at import), then not again."""
    code = f"""
import json, pathlib
from ray_accel_ext import skus
d = pathlib.Path({str(tmp_path)!r})
doc = {{"schema": 1, "family": "nvidia", "vendor": "nvidia", "vendor_id": "0x10de", "entries": [{json.dumps(_entry())!s}]}}
(d / "site.json").write_text(json.dumps(doc))           # written after import
print(skus.lookup("0x10de", "0x2330").sku)
(d / "site.json").unlink()                              # gone, but already read
print(skus.lookup("0x10de", "0x2330").sku, len(skus.loaded_files()))
skus.reload()
print(skus.lookup("0x10de", "0x2330").sku)
"""
    env = {**os.environ, skus.ENV_VAR: str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["h100-site-80gb", "h100-site-80gb", str(len(skus.FAMILIES) + 1), "h100-sxm5-80gb"]
