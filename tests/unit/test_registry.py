"""Backend registration through real entry points (distributions on a temporary sys.path)."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import time

import pytest

from ray_accel_ext.backend import AcceleratorBackend
from ray_accel_ext.errors import BackendLoadError
from ray_accel_ext.host import FsHost
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.node.registry import available_backends, load_backend, load_backends, validate_backend_class

BACKEND_SRC = '''
from ray_accel_ext.backend import AcceleratorBackend
from ray_accel_ext.model import NodeDescription

class Good(AcceleratorBackend):
    name = "{name}"
    resource_name = "ACME"
    label_prefix = "acme.example"
    def detect(self, host):
        return False
    def describe(self, host):
        raise AssertionError("not detected")
'''


@pytest.fixture
def install(tmp_path, monkeypatch):
    """Install fake distributions (dist-info with entry_points.txt) on sys.path."""

    def _install(dist: str, version: str, entries: dict[str, str], module: str | None = None, source: str = ""):
        site = tmp_path / f"site-{dist}"
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = "\n".join(f"{k} = {v}" for k, v in entries.items())
        (info / "entry_points.txt").write_text(f"[ray_accel_ext.backends]\n{lines}\n")
        if module:
            (site / f"{module}.py").write_text(textwrap.dedent(source))
        monkeypatch.syspath_prepend(str(site))
        return site

    yield _install
    for mod in [m for m in sys.modules if m.startswith(("acme_", "zeta_"))]:
        sys.modules.pop(mod)


def test_third_party_backend_is_found_through_the_entry_point(install):
    install("zeta-npu", "1.0", {"zeta_npu": "zeta_npu_mod:Good"}, "zeta_npu_mod", BACKEND_SRC.format(name="zeta_npu"))
    specs = {s.name: s for s in available_backends()}
    assert specs["zeta_npu"].dist == "zeta-npu 1.0"
    backend = load_backend(specs["zeta_npu"])
    assert backend.name == "zeta_npu"


def test_duplicate_names_from_two_distributions_fail_loudly(install):
    install("zeta-npu", "1.0", {"acme_dup": "acme_a:Good"}, "acme_a", BACKEND_SRC.format(name="acme_dup"))
    install("other-npu", "2.1", {"acme_dup": "acme_b:Good"}, "acme_b", BACKEND_SRC.format(name="acme_dup"))
    with pytest.raises(BackendLoadError) as err:
        available_backends()
    assert "'acme_dup' is provided by both" in str(err.value)
    assert "zeta-npu 1.0" in str(err.value) and "other-npu 2.1" in str(err.value)


def test_duplicate_registration_drops_only_that_name_and_the_disable_list_resolves_it(install, tmp_path):
    install("zeta-npu", "1.0", {"acme_dup2": "acme_c:Good"}, "acme_c", BACKEND_SRC.format(name="acme_dup2"))
    install("other-npu", "2.1", {"acme_dup2": "acme_d:Good"}, "acme_d", BACKEND_SRC.format(name="acme_dup2"))
    inventory = discover(FsHost(tmp_path, env={}))
    assert inventory.degraded
    (problem,) = inventory.problems
    assert (problem.backend, problem.stage) == ("acme_dup2", "load") and "provided by both" in problem.message
    assert "RAY_ACCEL_DISABLE=acme_dup2" in problem.message
    # the other backends still load
    assert {"nvidia_gpu", "tpu", "neuron"} <= {b.name for b in load_backends({}, on_error=lambda *a: None)}
    resolved = discover(FsHost(tmp_path, env={"RAY_ACCEL_DISABLE": "acme_dup2"}))
    assert not resolved.problems
    assert "acme_dup2" not in {b.name for b in load_backends({"RAY_ACCEL_DISABLE": "acme_dup2"})}


def test_broken_import_is_named_and_skipped_on_the_start_path(install):
    install("acme-broken", "0.1", {"acme_broken": "acme_missing_module:Nope"})
    errors = []
    backends = load_backends({}, on_error=lambda name, exc: errors.append((name, str(exc))))
    assert "acme_broken" not in {b.name for b in backends}
    assert errors and errors[0][0] == "acme_broken"
    assert "acme-broken 0.1" in errors[0][1] and "ModuleNotFoundError" in errors[0][1]
    with pytest.raises(BackendLoadError):
        load_backends({})


def test_disable_list(install):
    install("zeta-npu", "1.0", {"zeta_npu": "zeta_npu_mod2:Good"}, "zeta_npu_mod2", BACKEND_SRC.format(name="zeta_npu"))
    assert "zeta_npu" in {b.name for b in load_backends({})}
    assert "zeta_npu" not in {b.name for b in load_backends({"RAY_ACCEL_DISABLE": "zeta_npu, other"})}


def _cls(**attrs):
    base = dict(
        name="acme", resource_name="ACME", label_prefix="acme.example",
        detect=lambda self, host: False, describe=lambda self, host: None,
    )
    base.update(attrs)
    return type("Acme", (AcceleratorBackend,), base)


@pytest.mark.parametrize(
    "attrs, message",
    [
        (dict(name="Acme-NPU"), "lower_snake_case"),
        (dict(label_prefix="ray.io"), "reserved"),
        (dict(label_prefix="rayaccel.io"), "reserved"),
        (dict(label_prefix="Not A Domain"), "DNS subdomain"),
        (dict(resource_name="CPU"), "not a usable Ray resource name"),
        (dict(api_version=99), "api_version 99 is not supported"),
        (dict(capabilities={"topology_links": True}), "Capabilities instance"),
    ],
)
def test_malformed_backends_are_rejected_with_the_reason(attrs, message):
    with pytest.raises(BackendLoadError, match=message):
        validate_backend_class(_cls(**attrs), "acme" if "name" not in attrs else None)


def test_name_must_match_entry_point_and_methods_must_exist():
    with pytest.raises(BackendLoadError, match="differs from its entry-point name"):
        validate_backend_class(_cls(), "other")
    incomplete = type("Half", (AcceleratorBackend,), dict(name="half", resource_name="H", label_prefix="h.example"))
    with pytest.raises(BackendLoadError, match="does not implement describe, detect"):
        validate_backend_class(incomplete)
    with pytest.raises(BackendLoadError, match="not a subclass"):
        validate_backend_class(object)


def _age(*paths) -> None:
    """Date files and directories an hour back (a scan keeps only what changed over 2 s ago)."""
    for path in paths:
        os.utime(path, (time.time() - 3600, time.time() - 3600))


def test_the_scan_is_kept_per_process_and_sees_installs_and_removals(install):
    site = install("zeta-npu", "1.0", {"zeta_one": "zeta_one_mod:Good"})
    entry_points = site / "zeta_npu-1.0.dist-info" / "entry_points.txt"
    _age(entry_points, entry_points.parent, site)
    assert "zeta_one" in {s.name for s in available_backends()}
    # an in-place edit that keeps the size and the time is not read again: the scan was kept
    before = os.stat(entry_points)
    entry_points.write_text(entry_points.read_text().replace("zeta_one", "zeta_two"))
    os.utime(entry_points, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert "zeta_two" not in {s.name for s in available_backends()}
    # a distribution installed into the same directory mid-process is seen, as is an edit that changes the time
    info = site / "zeta_more-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zeta-more\nVersion: 2.0\n")
    (info / "entry_points.txt").write_text("[ray_accel_ext.backends]\nzeta_more = zeta_more_mod:Good\n")
    specs = {s.name: s for s in available_backends()}
    assert specs["zeta_more"].dist == "zeta-more 2.0" and "zeta_two" in specs
    # and one removed is gone
    shutil.rmtree(info)
    _age(site)
    assert "zeta_more" not in {s.name for s in available_backends()}
