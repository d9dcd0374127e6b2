"""The pytest11 plugin is inert in other projects' runs, and the suite works without it."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from ray_accel_ext.conformance.settings import ENV, REFERENCE_SNAPSHOTS
from ray_accel_ext.tools.cli import main

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for var in ENV.values():
        monkeypatch.delenv(var, raising=False)


def test_plugin_is_inert_in_another_project(pytester):
    pytester.makepyfile(test_other="def test_one(request):\n    assert 'suite' not in request.fixturenames\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fixtures")
    out = result.stdout.str()
    assert "_accel_suite_gate" not in out and "ray_accel_ext" not in out.split("fixtures defined from")[-1]
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)


def test_options_are_registered(pytester):
    result = pytester.runpytest_subprocess("--help")
    out = result.stdout.str()
    for option in ("--accel-backend", "--accel-snapshots", "--accel-xfails", "--accel-live-ray"):
        assert option in out


def test_suite_runs_from_environment_without_plugin_autoload(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv(ENV["backend"], "ray_accel_ext.testing.fake_backend:FakeBackend")
    monkeypatch.setenv(ENV["snapshots"], str(REFERENCE_SNAPSHOTS))
    result = pytester.runpytest_subprocess("--pyargs", "ray_accel_ext.conformance", "-p", "no:cacheprovider", "-q", "-rs")
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "import string 'ray_accel_ext.testing.fake_backend:FakeBackend') is not installed" in out


def test_unknown_backend_fails_every_test_with_the_reason(pytester):
    result = pytester.runpytest_subprocess(
        "--pyargs", "ray_accel_ext.conformance", "--accel-backend", "no_such_npu", "-p", "no:cacheprovider", "-q",
        "-k", "test_backend_loads",
    )
    assert result.ret == 1
    assert "no backend named 'no_such_npu' is installed under the 'ray_accel_ext.backends' entry point" in result.stdout.str()


def test_cli_reports_checklist_as_json_and_junit(tmp_path, capsys):
    junit = tmp_path / "report.xml"
    code = main([
        "conformance", "ray_accel_ext.testing.fake_backend:FakeBackend", "--snapshots", str(REFERENCE_SNAPSHOTS),
        "--format", "json", "--junit", str(junit),
    ])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["passed"] is True
    items = {i["item"]: i for i in report["items"]}
    assert items["visibility"]["status"] == "pass"
    assert items["capabilities"]["counts"] == {"passed": 5, "skipped": 2}  # data, shown, links/numa/fabric; nic/provider skipped
    assert "fake_accel does not declare Capabilities(nic_affinity=True)" in items["capabilities"]["reasons"]
    assert items["live-ray"]["status"] == "skip" and items["ci"]["status"] == "manual"
    suite = ET.parse(junit).getroot()
    cases = suite.iter("testcase")
    assert sum(1 for _ in cases) == len(report["tests"])


def test_cli_table_and_exit_code_on_failure(tmp_path, capsys):
    xfails = tmp_path / "xfails.txt"
    long_words = "claims a bug that is not there, and says so at length: " + "the table cuts this prose, " * 4
    xfails.write_text(f"BaseDescriptionTests::test_round_trip  # {long_words}https://example.com/1\n")
    code = main([
        "conformance", "ray_accel_ext.testing.fake_backend:FakeBackend", "--snapshots", str(REFERENCE_SNAPSHOTS),
        "--xfails", str(xfails),
    ])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "FAIL    Descriptions consistent and round-trippable" in out
    assert "BaseDescriptionTests::test_round_trip[fake-4dev-hive]: [XPASS(strict)] xfails file: claims a bug" in out
    row = next(line for line in out.splitlines() if line.startswith("FAIL    Descriptions consistent"))
    assert "https://example.com/1" not in row and ("… (+" in row or row.endswith("…"))  # prose cut, marked
    assert "https://example.com/1" in out  # and whole in the failures below
