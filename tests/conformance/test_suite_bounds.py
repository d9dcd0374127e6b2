"""The conformance suite bounds every backend call: a ``detect()`` that blocks fails its tests
with a message that says it blocks and where, the suite still finishes; a ``KeyboardInterrupt``
or ``SystemExit`` from a backend fails tests instead of ending the pytest session.

Each scenario writes a vendor-style test module for a ``FakeBackend`` with one defect and runs it
in a fresh pytest process (as ``test_suite_catches.py`` does).
"""

from __future__ import annotations

import re
import textwrap

import pytest

from ray_accel_ext.conformance.settings import ENV, REFERENCE_SNAPSHOTS
from tests.support.paths import REPO

pytest_plugins = ["pytester"]

HIVE = "fake-4dev-hive"
MODULE = """
import time
from ray_accel_ext.conformance.base import BaseDetectionTests
from ray_accel_ext.testing.fake_backend import FakeBackend
SNAPS = {snaps!r}

{code}

class TestDetection(BaseDetectionTests):
    backend_cls = Broken
    snapshots = SNAPS
"""


def _run(pytester, monkeypatch, code: str):
    for var in ENV.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RAY_ACCEL_BUDGET_S", "0.2")  # each blocked call then costs 2.2 s
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the suite of this checkout, not an installed one
    pytester.makepyfile(test_vendor=MODULE.format(snaps=str(REFERENCE_SNAPSHOTS), code=textwrap.dedent(code)))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rfE", "-q", "--tb=short", timeout=600)
    text = result.stdout.str()
    failed = set(re.findall(r"^FAILED \S+::Test\w+::(test_\w+(?:\[[^\]]*\])?)", text, re.M))
    return failed, text, result


def test_a_blocking_detect_fails_with_a_clear_message_and_the_suite_finishes(pytester, monkeypatch):
    code = """
    class Broken(FakeBackend):
        def detect(self, host):
            time.sleep(3600)
            return True
    """
    failed, text, result = _run(pytester, monkeypatch, code)
    assert "test_detect_false_on_empty_host" in failed and f"test_detect_matches_golden[{HIVE}]" in failed, text
    assert "fake_accel.detect() on snapshot fake-4dev-hive did not return within 2.2s" in text, text
    assert "it blocks" in text and "blocked at: test_vendor.py:9 detect" in text, text  # and where
    assert re.search(r"\d+ failed", text) and result.ret == 1, text  # finished, did not hang


@pytest.mark.parametrize("raised", ["KeyboardInterrupt", "SystemExit(0)"])
def test_a_base_exception_fails_tests_instead_of_ending_the_session(raised, pytester, monkeypatch):
    code = f"""
    class Broken(FakeBackend):
        def detect(self, host):
            raise {raised}
    """
    failed, text, result = _run(pytester, monkeypatch, code)
    name = raised.split("(")[0]
    assert "test_detect_false_on_empty_host" in failed, text
    assert f"raised {name}" in text and "which is not an Exception" in text, text
    assert "Interrupted" not in text and result.ret == 1, text
