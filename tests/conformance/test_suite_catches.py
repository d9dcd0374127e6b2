"""The conformance suite catches deliberately broken backends, each with a message that explains
itself, and passes the reference FakeBackend.

Every scenario writes a vendor-style test module (subclass mode, class data only) for a
``FakeBackend`` variant with ONE defect, runs it in a fresh pytest process and asserts exactly
which suite tests fail and what their messages say.
"""

from __future__ import annotations

import re
import textwrap

import pytest

from ray_accel_ext.conformance.settings import ENV, REFERENCE_SNAPSHOTS

pytest_plugins = ["pytester"]

BASES = ("Registration", "Detection", "Description", "Adapter", "Visibility")
HIVE = "fake-4dev-hive"


def _module(backend_code: str, extra: str = "", bases=BASES, xfails: str | None = None) -> str:
    classes = "\n".join(
        f"class Test{b}(Base{b}Tests):\n    backend_cls = Broken\n    snapshots = SNAPS\n"
        + (f"    xfails = {xfails!r}\n" if xfails else "")
        for b in bases
    )
    return (
        "import os, socket\n"
        "from ray_accel_ext.conformance.base import " + ", ".join(f"Base{b}Tests" for b in BASES) + "\n"
        "from ray_accel_ext.testing.fake_backend import FakeBackend\n"
        "from ray_accel_ext.backend import Capabilities\n"
        "from ray_accel_ext.model import Link\n"
        "import dataclasses\n"
        f"SNAPS = {str(REFERENCE_SNAPSHOTS)!r}\n\n"
        + textwrap.dedent(backend_code) + "\n\n" + classes + "\n" + textwrap.dedent(extra)
    )


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str, *files: tuple[str, str]):
    for var in ENV.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("FAKE_ACCEL_READY", raising=False)
    for name, text in files:
        pytester.path.joinpath(name).write_text(text)
    pytester.makepyfile(test_vendor=source)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rfEX", "-q", "--tb=short")
    text = result.stdout.str()
    failed = set(re.findall(r"^(?:FAILED|ERROR) \S+::Test\w+::(test_\w+(?:\[[^\]]*\])?)", text, re.M))
    return failed, text, result


def test_reference_backend_passes_the_whole_suite(pytester, monkeypatch):
    failed, text, result = _run(pytester, monkeypatch, _module("Broken = FakeBackend"))
    assert not failed, text
    assert result.ret == 0, text


def test_dangling_link(pytester, monkeypatch):
    code = """
    class Broken(FakeBackend):
        def describe(self, host):
            desc = super().describe(host)
            return dataclasses.replace(desc, links=desc.links + (Link(a=3, b=9, kind="fakelink"),))
    """
    failed, text, _ = _run(pytester, monkeypatch, _module(code))
    assert failed == {f"test_consistent[{HIVE}]", f"test_matches_golden[{HIVE}]"}, text
    assert "links[6].b: references device 9 but the node has devices 0..3" in text
    assert f"fake_accel.describe() on snapshot {HIVE} differs from its expected.json" in text


def test_undeclared_network_use_through_host_metadata(pytester, monkeypatch):
    code = """
    class Broken(FakeBackend):
        def describe(self, host):
            try:
                host.metadata.gce("instance/zone")  # opportunistic: ignored when unreachable
            except Exception:
                pass
            return super().describe(host)
    """
    failed, text, _ = _run(pytester, monkeypatch, _module(code))
    assert failed == {f"test_no_network_unless_declared[{HIVE}]"}, text
    assert f"fake_accel used the network on snapshot {HIVE} (1 metadata request(s)" in text
    assert "does not declare Capabilities(uses_network=True)" in text


def test_network_use_around_host_metadata(pytester, monkeypatch):
    code = """
    class Broken(FakeBackend):
        capabilities = dataclasses.replace(FakeBackend.capabilities, uses_network=True)
        def describe(self, host):
            try:
                socket.create_connection(("metadata.google.internal", 80), timeout=0.5).close()
            except OSError:
                pass
            return super().describe(host)
    """
    failed, text, _ = _run(pytester, monkeypatch, _module(code))
    assert failed == {f"test_no_network_unless_declared[{HIVE}]"}, text
    assert "opened network connections itself" in text
    assert "resolve metadata.google.internal:80 directly (not through host.metadata) [refused: not loopback]" in text


def test_label_outside_its_prefix(pytester, monkeypatch):
    code = """
    class Broken(FakeBackend):
        def describe(self, host):
            desc = super().describe(host)
            return dataclasses.replace(desc, attributes={**desc.attributes, "nvidia.com/gpu.product": "H100"})
    """
    failed, text, _ = _run(pytester, monkeypatch, _module(code))
    assert failed == {
        f"test_consistent[{HIVE}]",
        f"test_vendor_labels_under_own_prefix[{HIVE}]",
        f"test_matches_golden[{HIVE}]",
        f"test_matches_golden_ray_spec[{HIVE}]",
    }, text
    assert "attribute 'nvidia.com/gpu.product' is outside the backend's label_prefix 'fake-accel.example.com'" in text
    assert "label 'nvidia.com/gpu.product' is in nobody's namespace" in text


def test_backend_that_mutates_os_environ(pytester, monkeypatch):
    code = """
    class Broken(FakeBackend):
        def describe(self, host):
            os.environ["FAKE_ACCEL_READY"] = "1"
            return super().describe(host)
    """
    failed, text, _ = _run(pytester, monkeypatch, _module(code))
    assert failed == {f"test_leaves_process_unchanged[{HIVE}]"}, text
    assert f"fake_accel changed the process on snapshot {HIVE}" in text
    assert "os.environ['FAKE_ACCEL_READY'] set (None -> '1')" in text


def test_global_cache(pytester, monkeypatch):
    code = """
    _SEEN = {}
    class Broken(FakeBackend):
        def describe(self, host):
            _SEEN[str(host.root)] = True
            return super().describe(host)
    """
    failed, text, _ = _run(pytester, monkeypatch, _module(code))
    assert failed == {f"test_leaves_process_unchanged[{HIVE}]"}, text
    assert "test_vendor._SEEN: module-level container changed (a global cache" in text


def test_detection_that_raises_on_an_empty_host(pytester, monkeypatch):
    code = """
    class Broken(FakeBackend):
        def detect(self, host):
            if not host.exists("/sys/class/fake_accel"):
                raise FileNotFoundError("/sys/class/fake_accel")
            return super().detect(host)
    """
    failed, text, _ = _run(pytester, monkeypatch, _module(code))
    assert failed == {"test_detect_false_on_empty_host", "test_detect_matches_golden[empty]"}, text
    assert "fake_accel.detect() raised FileNotFoundError: /sys/class/fake_accel on an empty host" in text
    assert "fake_accel.detect() raised FileNotFoundError: /sys/class/fake_accel on snapshot empty; it must never raise" in text


def test_overridden_suite_test(pytester, monkeypatch):
    extra = """
    class TestNeutered(BaseDescriptionTests):
        backend_cls = Broken
        snapshots = SNAPS

        def test_matches_golden(self, suite, backend, device_snapshot):
            return  # "our hardware differs", reported as PASSED in other suites

        test_round_trip = None
    """
    failed, text, _ = _run(pytester, monkeypatch, _module("Broken = FakeBackend", extra))
    assert failed == {"test_matches_golden", "test_round_trip", "test_no_suite_test_overridden"}, text
    assert "TestNeutered overrides the suite test BaseDescriptionTests::test_matches_golden" in text
    assert "test_vendor.TestNeutered overrides test_matches_golden (from BaseDescriptionTests), test_round_trip" in text


def test_declared_capability_missing(pytester, monkeypatch):
    code = """
    class Broken(FakeBackend):
        capabilities = dataclasses.replace(FakeBackend.capabilities, nic_affinity=True)
        def describe(self, host):
            return dataclasses.replace(super().describe(host), fabric=None)
    """
    failed, text, _ = _run(pytester, monkeypatch, _module(code))
    assert failed == {
        f"test_fabric_domain_filled[{HIVE}]",
        f"test_matches_golden[{HIVE}]",
        f"test_matches_golden_ray_spec[{HIVE}]",
        "test_declared_capabilities_are_shown",
    }, text
    assert (
        f"fake_accel declares Capabilities(fabric_domains=True) but on snapshot {HIVE} fabric is not filled in" in text
    )
    assert "fake_accel declares nic_affinity=True, fabric_domains=True but none of its snapshots" in text


def test_undeclared_capability_is_skipped_with_reason(pytester, monkeypatch):
    code = """
    class Broken(FakeBackend):
        capabilities = Capabilities()
    """
    failed, text, result = _run(pytester, monkeypatch, _module(code))
    assert not failed, text
    result2 = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "-q")
    assert "fake_accel does not declare Capabilities(device_visibility=True)" in result2.stdout.str()
    assert "fake_accel does not declare Capabilities(topology_links=True)" in result2.stdout.str()


def test_xfails_file_is_strict_and_checked(pytester, monkeypatch):
    code = """
    class Broken(FakeBackend):
        def describe(self, host):
            desc = super().describe(host)
            return dataclasses.replace(desc, links=desc.links + (Link(a=3, b=9, kind="fakelink"),))
    """
    xfails = (
        f"BaseDescriptionTests::test_consistent[{HIVE}]  # dangling link, https://example.com/bugs/1\n"
        f"BaseDescriptionTests::test_matches_golden  # same bug https://example.com/bugs/1\n"
        f"BaseDescriptionTests::test_round_trip  # stale: this test passes https://example.com/bugs/2\n"
        f"BaseAdapterTests::test_no_such_test  # typo https://example.com/bugs/3\n"
        f"BaseDetectionTests::test_within_time_budget  # no link given\n"
    )
    failed, text, result = _run(pytester, monkeypatch, _module(code, xfails="xfails.txt"), ("xfails.txt", xfails))
    assert failed == {f"test_round_trip[{HIVE}]", "test_xfails_file_valid"}, text
    assert "[XPASS(strict)] xfails file: stale: this test passes https://example.com/bugs/2" in text
    assert "BaseAdapterTests::test_no_such_test: no such suite test (stale entry?)" in text
    assert "BaseDetectionTests::test_within_time_budget needs '# <reason> <link to the bug>' after it (not applied)" in text
    assert result.parseoutcomes().get("xfailed") == 2, text


def test_describe_that_raises_instead_of_reporting_problems(pytester, monkeypatch):
    code = """
    class Broken(FakeBackend):
        def describe(self, host):
            raise KeyError("memory_mib")
    """
    failed, text, _ = _run(pytester, monkeypatch, _module(code))
    assert f"test_matches_golden[{HIVE}]" in failed and f"test_consistent[{HIVE}]" in failed, text
    assert "test_detect_false_on_empty_host" not in failed and f"test_leaves_process_unchanged[{HIVE}]" not in failed
    assert (
        f"fake_accel.describe() raised KeyError: 'memory_mib' on snapshot {HIVE}; put what cannot be read into "
        "NodeDescription.problems instead of raising"
    ) in text


def test_problem_code_neither_built_in_nor_declared(pytester, monkeypatch):
    code = """
    from ray_accel_ext.model import Problem
    class Broken(FakeBackend):
        def describe(self, host):
            desc = super().describe(host)
            made_up = Problem(code="fake-accel-made-up", message="something odd")
            return dataclasses.replace(desc, problems=desc.problems + (made_up,))
    """
    failed, text, _ = _run(pytester, monkeypatch, _module(code))
    assert f"test_consistent[{HIVE}]" in failed and "test_reference_backend_passes_the_whole_suite" not in failed, text
    assert "problems[0].code: 'fake-accel-made-up' is neither built in nor in the backend's problem_codes" in text


# -- third-party answers a node refuses (node/answers.py): the suite fails them first ---------------

_REFUSED = {
    "quantity_1e300": ("return dataclasses.replace(super().describe(host), resource_quantity=1e300)",
                       "resource_quantity: 1e+300 is outside 0..1e+14, what Ray accepts"),
    "devices_20000": ("desc = super().describe(host)\n"
                      "            devs = tuple(dataclasses.replace(desc.devices[0], index=i, id=f'd{i}', nics=()) "
                      "for i in range(20000))\n"
                      "            return dataclasses.replace(desc, devices=devs, resource_quantity=20000, links=())",
                      "devices: 20000 entries, at most 4096 on one node"),
    "attributes_2000": ("desc = super().describe(host)\n"
                        "            many = {f'{self.label_prefix}/a{i}': 'v' * 60 for i in range(2000)}\n"
                        "            return dataclasses.replace(desc, attributes={**desc.attributes, **many})",
                        "a node publishes at most 256 labels"),
}


@pytest.mark.parametrize("case", sorted(_REFUSED))
def test_an_answer_a_node_would_refuse_fails_the_suite(pytester, monkeypatch, case):
    body, needle = _REFUSED[case]
    code = f"""
    class Broken(FakeBackend):
        def describe(self, host):
            {body}
    """
    failed, text, _ = _run(pytester, monkeypatch, _module(code, bases=("Description",)))
    assert f"test_consistent[{HIVE}]" in failed, text
    assert needle in text, text


def test_a_resource_name_that_changes_after_validation_fails_the_suite(pytester, monkeypatch):
    code = """
    from ray_accel_ext.testing.hostile_answers import shifting_name_class


    class Broken(FakeBackend, metaclass=shifting_name_class(FakeBackend.resource_name, "node:1.2.3.4", after=1)):
        pass
    """
    failed, text, _ = _run(pytester, monkeypatch, _module(code, bases=("Description",)))
    assert f"test_consistent[{HIVE}]" in failed, text
    assert "resource_name 'node:1.2.3.4' is not a usable Ray custom-resource name" in text, text
