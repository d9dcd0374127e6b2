"""The hostile-host kit in-process, through the hook's own function (``node_spec``) and the parts
it is built of. Fast; the same classes through a real ``ray start`` are in test_hostile_ray.py.

* Hostile third-party backends, in worker processes (the default) and in threads
  (``RAY_ACCEL_ISOLATION=none``, for what a thread can contain): every one reported by name, the
  node's own family intact, nothing left running (no child process, no thread the process waits for).
* Special files and unlistable directories: refused or reported, never opened, never "no devices, ok";
  a FIFO as a distribution's ``entry_points.txt`` skips only that distribution.
* Hostile metadata servers: every behaviour bounded by the per-call timeout; after the hook, a
  process exits promptly (it used to wait for the metadata pool's threads for ever).
* Hostile values and numeric settings; secrets by structure in records, logs and telemetry.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

pytest.importorskip("ray")  # labels are checked by Ray's own parser (tests/support/reliability.py)

from ray_accel_ext.bounds import ascii_uint, bounded_json, setting
from ray_accel_ext.host import FsHost, open_host
from ray_accel_ext.host.metadata import MetadataClient
from ray_accel_ext.host.protocol import Deadline
from ray_accel_ext.node.registry import scan_backends
from ray_accel_ext.problems import DISTRIBUTION_SKIPPED
from ray_accel_ext.ray_hook import node_spec
from ray_accel_ext.redact import redact
from ray_accel_ext.testing.corrupt import remove_copy
from ray_accel_ext.testing.hostile import (
    HOSTILE_BACKENDS,
    HUGE,
    NON_ASCII_DIGITS,
    NUL,
    copy_snapshot,
    install_hostile_backends,
    make_special,
    set_env,
    set_metadata,
)
from ray_accel_ext.testing.hostile_metadata import BEHAVIOURS, HostileGce, nested_json
from ray_accel_ext.testing.snapshots import metadata_spec, serve_snapshot
from ray_accel_ext.tools.record import record
from tests.support.paths import HOSTS, REPO
from tests.support.reliability import LOAD_SLACK_S, Results, label_errors, without_dac_override

BUDGET_S = 2.0
STRUCTURAL_S = BUDGET_S + LOAD_SLACK_S
H100 = HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
A3 = HOSTS / "nvidia_gpu" / "gce-a3-highgpu-1g"
GKE_TPU = HOSTS / "tpu" / "gke-v6e-4x4-worker3"
GCE_TPU = HOSTS / "tpu" / "gce-v5p-16-worker1"
GROUP = "hostile host (in-process)"

_results = Results("hostile")


@pytest.fixture(scope="module", autouse=True)
def _write_results():
    yield
    _results.write()


@pytest.fixture
def hostile_site(tmp_path, monkeypatch):
    def install(backends=HOSTILE_BACKENDS):
        site = install_hostile_backends(tmp_path / "site", backends)
        monkeypatch.syspath_prepend(str(site))
        return site

    yield install
    for name in [m for m in sys.modules if m.startswith("rayaccel_hostile_")]:
        sys.modules.pop(name)


def _children() -> list[int]:
    return [c.pid for c in psutil.Process().children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE]


def _waited_threads() -> list[str]:
    """Threads the interpreter would wait for at exit (non-daemon), besides the main thread."""
    return [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]


def _spec_and_reasons(caplog, root, env=None, budget_s=BUDGET_S):
    caplog.clear()
    caplog.set_level(logging.INFO, logger="ray_accel_ext")
    started = time.monotonic()
    spec = node_spec(root, budget_s=budget_s, environ=env if env is not None else {})
    elapsed = time.monotonic() - started
    events = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith('{"')]
    reasons = next((e["reasons"] for e in events if e.get("event") == "discovery"), [])
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    return spec, reasons, warnings, elapsed


@pytest.mark.parametrize("isolation", ["third-party", "none"])
def test_hostile_backends_are_contained_and_named(isolation, hostile_site, caplog):
    # In threads a backend can still end or freeze the process (os._exit, a crash, a busy loop, a
    # fork of the test process): those run only in workers.
    in_threads = [b for b in HOSTILE_BACKENDS
                  if b.action not in ("hang", "exit", "crash", "fork", "busy", "stuck-read", "thread")]
    backends = HOSTILE_BACKENDS if isolation == "third-party" else in_threads
    hostile_site(backends)
    before = set(_children())
    spec, reasons, _, elapsed = _spec_and_reasons(caplog, H100, {"RAY_ACCEL_ISOLATION": isolation})
    assert spec.resources.get("GPU") == 8 and spec.labels["rayaccel.io/discovery"] == "degraded"
    assert elapsed < STRUCTURAL_S, elapsed
    assert not label_errors(spec.labels)
    missing = [b.name for b in backends if not any(r.startswith(b.name + " ") for r in reasons)]
    assert not missing, (missing, reasons)
    time.sleep(0.3)
    assert set(_children()) <= before, "worker processes (or what they forked) outlived the hook"
    assert not _waited_threads(), _waited_threads()
    for b in backends:
        said = next(r for r in reasons if r.startswith(b.name + " "))
        _results.add(GROUP, f"backend in {'a worker' if isolation != 'none' else 'a thread'}: {b.what}", "degraded",
                     elapsed_s=elapsed, budget_s=BUDGET_S, detail=said[:300], reported=said[:300])


def test_a_fifo_entry_points_file_skips_only_its_distribution(tmp_path, monkeypatch):
    info = tmp_path / "site" / "fifo_dist-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fifo-dist\nVersion: 1.0\n")
    make_special(info / "entry_points.txt", "fifo")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    done: list = []
    worker = threading.Thread(target=lambda: done.append(scan_backends({})), daemon=True)
    worker.start()
    worker.join(30)
    assert done, "the entry-point scan blocked on a FIFO"
    specs, problems = done[0]
    assert {"nvidia_gpu", "tpu", "neuron"} <= {s.name for s in specs}
    (registry,) = [m for name, code, m in problems if name == "registry" and code == DISTRIBUTION_SKIPPED]
    assert "entry_points.txt is a FIFO" in registry
    said = registry.replace(str(tmp_path), "<site-dir>")  # the report names no machine path
    _results.add(GROUP, "FIFO as a distribution's entry_points.txt", "degraded", detail=said, reported=said)


@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_special_files_are_refused_never_opened(kind, tmp_path, caplog):
    snap = copy_snapshot(H100, tmp_path / "snap")
    vendor = "rootfs/sys/devices/pci0000:00/0000:00:00.0/vendor"
    try:
        make_special(snap / vendor, kind)
        make_special(snap / "rootfs/proc/sys/kernel/hostname", kind)
    except PermissionError:
        pytest.skip(f"cannot make a {kind} here (no CAP_MKNOD)")
    spec, reasons, _, elapsed = _spec_and_reasons(caplog, snap)
    what = {"fifo": "is a FIFO", "socket": "is a socket", "device": "is a character device"}[kind]
    assert spec.resources.get("GPU") == 8 and spec.labels["rayaccel.io/discovery"] == "degraded"
    assert any(f"/proc/sys/kernel/hostname: {what}" in r for r in reasons), reasons
    assert any("0000:00:00.0/vendor" in r and what in r for r in reasons), reasons
    # ray-accel record does not open it either, and says it was not copied
    summary = record(open_host(snap), tmp_path / "rec")
    assert any(what in u for u in summary["unreadable"]), summary["unreadable"]
    assert not (tmp_path / "rec" / vendor).exists()
    said = next(r for r in reasons if f"/proc/sys/kernel/hostname: {what}" in r)
    _results.add(GROUP, f"special file: {kind} where a file is read", "degraded", elapsed_s=elapsed, budget_s=BUDGET_S,
                 detail="; ".join(r for r in reasons if what in r)[:300], reported=said)


_UNPRIVILEGED = """
import json, sys
from ray_accel_ext.ray_hook import node_spec
from ray_accel_ext.node.discovery import discover_node
from ray_accel_ext.host import open_host
found = discover_node(open_host(sys.argv[1], budget_s=3))
print(json.dumps({"gpus": sum(len(d.devices) for d in found.inventory.descriptions),
                  "reasons": found.inventory.reasons()}))
"""


def test_an_unlistable_device_directory_is_a_problem_never_no_devices(tmp_path):
    """``/sys/devices/pci0000:15`` (a root complex with GPUs behind it) mode 000, read without the
    right to bypass file modes (what a non-root ``ray start`` sees)."""
    prefix = without_dac_override()
    if prefix is None:
        pytest.skip("cannot drop the file-mode override here (not root, or no setpriv)")
    snap = copy_snapshot(H100, tmp_path / "snap")
    os.chmod(snap / "rootfs/sys/devices/pci0000:15", 0)
    try:
        proc = subprocess.run([*prefix, sys.executable, "-c", _UNPRIVILEGED, str(snap)], capture_output=True, text=True,
                              timeout=120, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)})
    finally:
        remove_copy(snap)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    said = [r for r in out["reasons"] if "/sys/devices/pci0000:15: permission denied" in r]
    assert said, out["reasons"]
    assert 0 < out["gpus"] < 8  # the GPUs behind the other root complexes are still counted
    _results.add(GROUP, "unlistable directory on the device path", "degraded", detail=said[0][:300],
                 reported=said[0][:300])


@pytest.mark.parametrize("behaviour", sorted(BEHAVIOURS))
def test_every_hostile_metadata_behaviour_is_bounded_by_the_call_timeout(behaviour):
    values = {"instance/zone": "projects/1/zones/us-central1-a", "project/project-id": "example-project"}
    with HostileGce(values, behaviour, paths={"instance/zone"}) as gce:  # hostile on the instance/ read
        client = MetadataClient(gce.env(), Deadline(BUDGET_S), live=False)
        started = time.monotonic()
        with pytest.raises(Exception) as err:
            client.gce("instance/zone")
        elapsed = time.monotonic() - started
        # a server that timed out is not asked again this run; else other keys are still answered
        assert behaviour in ("header-drip", "status-drip") or client.gce("project/project-id") == "example-project"
    assert elapsed < client.timeout_s + 2.0, elapsed  # the call's timeout bounds it (hangs are 120 s)
    assert type(err.value).__name__.startswith("Metadata"), err.value
    _results.add(GROUP, f"metadata server: {BEHAVIOURS[behaviour]}", "clear error", elapsed_s=elapsed,
                 budget_s=BUDGET_S, detail=str(err.value)[:300], reported=str(err.value)[:300])


_EXIT_AFTER_HOOK = """
import sys, time
from ray_accel_ext.ray_hook import start_hook
class Params:
    num_gpus = None
    resources = None
    labels = None
p = Params()
t = time.monotonic()
start_hook(p, False)
print(f"{time.monotonic() - t:.3f} {p.labels.get('rayaccel.io/discovery')} {p.resources.get('TPU')}", flush=True)
"""


@pytest.mark.parametrize("behaviour", ["header-drip", "endless-continue"])
def test_the_process_exits_promptly_after_the_hook(behaviour, tmp_path):
    """The TPU backend asks GCE metadata from a thread pool; with a server that never finishes an
    answer, the interpreter used to wait for those threads at exit for ever."""
    with HostileGce(metadata_spec(GCE_TPU)["gce"], behaviour) as gce:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "RAY_ACCEL_ROOT": str(GCE_TPU),
               "RAY_ACCEL_BUDGET_S": str(BUDGET_S), **gce.env()}
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-c", _EXIT_AFTER_HOOK], env=env, capture_output=True, text=True,
                              timeout=120)
        total = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    hook_s, discovery, tpus = proc.stdout.split()
    assert discovery == "degraded" and tpus == "4.0"
    # Structural: the process ended (a wait for the pool would last the server's 120 s).
    assert total < 60, total
    _results.add(GROUP, f"process exit after the hook ({behaviour} server)", "degraded", elapsed_s=float(hook_s),
                 budget_s=BUDGET_S, detail=f"hook {hook_s}s, process ended {total:.2f}s after launch", start_s=round(total, 2),
                 reported=f"process exited {total:.2f}s after launch")


def test_hostile_values_never_become_resources_and_are_named(tmp_path, caplog):
    nul = copy_snapshot(GKE_TPU, tmp_path / "nul")
    set_env(nul, TPU_NAME=f"slice-a{NUL}evil")
    digits = copy_snapshot(GKE_TPU, tmp_path / "digits")
    set_env(digits, TPU_WORKER_ID=NON_ASCII_DIGITS["superscript"])
    huge = copy_snapshot(GCE_TPU, tmp_path / "huge")
    set_metadata(huge, "gce", "instance/attributes/instance-id", HUGE)
    nested = copy_snapshot(A3, tmp_path / "nested")
    set_metadata(nested, "gce", "instance/attributes/physical_host_topology", nested_json())
    cases = [(nul, "fabric.id 'slice-a\\x00evil'", "NUL in TPU_NAME"), (digits, "worker id from env is not a number",
             "non-ASCII digits in TPU_WORKER_ID"), (huge, "140000 characters", "140,000-character instance-id"),
             (nested, "nested deeper than 32 levels", "nested JSON in physical_host_topology")]
    for snap, needle, what in cases:
        with serve_snapshot(snap) as env:
            spec, reasons, _, elapsed = _spec_and_reasons(caplog, snap, env)
        assert spec.labels["rayaccel.io/discovery"] == "degraded"
        assert not label_errors(spec.labels)
        bad = [r for r in spec.resources if not r.isascii() or NUL in r or len(r) > 100]
        assert not bad, bad
        said = [r for r in reasons if needle in r]
        assert said, (what, reasons)
        _results.add(GROUP, f"hostile value: {what}", "degraded", elapsed_s=elapsed, budget_s=BUDGET_S,
                     detail=said[0][:300], reported=said[0][:300])


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e10", "61", "\uff13", "3s", " "])
def test_absurd_numeric_settings_are_refused_with_a_warning(value, caplog):
    caplog.set_level(logging.WARNING, logger="ray_accel_ext")
    env = {"RAY_ACCEL_BUDGET_S": value, "RAY_ACCEL_METADATA_TIMEOUT_S": value}
    assert FsHost(H100 / "rootfs", env=env).deadline.budget_s == 3.0
    assert MetadataClient(env, Deadline(3.0), live=False).timeout_s == 0.5
    assert setting({"X": "2.5"}, "X", 3.0, high=60) == 2.5
    if value.strip():
        refused = " ".join(r.getMessage() for r in caplog.records if "refused" in r.getMessage())
        assert "RAY_ACCEL_BUDGET_S=" in refused and "RAY_ACCEL_METADATA_TIMEOUT_S=" in refused, refused
    _results.add(GROUP, "absurd numeric settings (nan, inf, -1, 0, 1e10, non-ASCII)", "correct", detail=f"{value!r}: default used")


def test_only_ascii_digits_are_numbers_and_json_is_bounded():
    for digit in NON_ASCII_DIGITS.values():
        with pytest.raises(ValueError, match="ASCII digits"):
            ascii_uint(digit)
    assert ascii_uint(" 12\n") == 12
    for text, message in [(nested_json(1000), "nested deeper"), ("[" + "1," * 600_000 + "1]", "larger than"),
                          ("[NaN]", "not a JSON number")]:
        with pytest.raises(ValueError, match=message):
            bounded_json(text)
    assert bounded_json('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}') == {"a": "[" * 36}


SECRETS = {
    "pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7Vh3kqYBq9f0sEcrEt\n-----END RSA PRIVATE KEY-----",
    "url": "https://alice:hunter2-secret@proxy.example.com:3128/",
    "bearer": "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9SecretJwtPayload42",
    "token": "ghp_9aZ3kQ7mX2pL5vN8rT1wY4bC6dF0hJ2sK8eR",
}
LEAKS = ("MIIEpAIBAAKCAQEA7Vh3kqYBq9f0sEcrEt", "hunter2-secret", "SecretJwtPayload42", "9aZ3kQ7mX2pL5vN8rT1wY4bC6dF0hJ2sK8eR")


def test_secrets_are_redacted_by_structure_in_records_logs_and_telemetry(tmp_path, caplog, monkeypatch):
    snap = copy_snapshot(GCE_TPU, tmp_path / "snap")
    tpu_env = metadata_spec(GCE_TPU)["gce"]["instance/attributes/tpu-env"]
    pem = SECRETS["pem"].replace("\n", "\n  ")
    tpu_env += f"SSH_KEY: '{pem}'\nPROXY: '{SECRETS['url']}'\nBEARER: '{SECRETS['token']}'\nNOTE: '{SECRETS['bearer']}'\n"
    set_metadata(snap, "gce", "instance/attributes/tpu-env", tpu_env)
    set_env(snap, HTTPS_PROXY=SECRETS["url"], NOTE=SECRETS["bearer"], PLAIN=SECRETS["token"])
    # a problem message that quotes the secrets (the accelerator type is what the TPU backend quotes)
    set_metadata(snap, "gce", "instance/attributes/accelerator-type", f"v5p-16 {SECRETS['url']} {SECRETS['token']}")
    with serve_snapshot(snap) as env:
        for k, v in env.items():
            if k.startswith(("GCE_", "AWS_")):
                monkeypatch.setenv(k, v)
        record(open_host(snap, environ=env), tmp_path / "rec")
        spec, reasons, warnings, _ = _spec_and_reasons(caplog, snap, env)
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "rec").rglob("*") if p.is_file())
    logged = "\n".join(r.getMessage() for r in caplog.records) + json.dumps(dict(spec.labels))
    leaked = [s for s in LEAKS if s in written or s in logged]
    assert not leaked, leaked
    assert "<redacted>" in written and (tmp_path / "rec" / "README.md").is_file()
    # what is no secret stays: GPU UUIDs, paths, words next to secret-looking ones
    kept = ["GPU-5a3f2c1e-0b4d-4c8a-9e1f-2d3c4b5a6f70", "projects/123456789/machineTypes/ct6e-standard-4t",
            "keyboard: us", "monkey: 3", "/latest/api/token: HTTP 403", "sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]
    assert [redact(k) for k in kept] == kept
    _results.add(GROUP, "secrets by structure (PEM, URL userinfo, bearer, high-entropy) in records/logs/telemetry",
                 "correct", detail="none of the four secrets in the recording, its README and golden, or the logs")


def test_hostile_slice_names_are_never_handed_to_rays_tpu_manager(tmp_path):
    """The hook hands Ray's TPU manager the slice (TPU_NAME, ...); Ray makes a resource of
    TPU_NAME unchecked, so a hostile name is handed on as the host's name, never as itself."""
    from ray_accel_ext.labels import is_valid_value
    from ray_accel_ext.ray_hook import hand_off
    from ray_accel_ext.testing.snapshots import run_snapshot

    huge = copy_snapshot(GCE_TPU, tmp_path / "huge")
    set_metadata(huge, "gce", "instance/attributes/instance-id", HUGE)
    inventory, _ = run_snapshot(huge, budget_s=BUDGET_S)
    env: dict[str, str] = {}
    handed = hand_off(inventory, "host-a", env)
    assert handed["TPU_NAME"] == "host-a"
    bad = {k: v[:40] for k, v in env.items() if k.startswith("TPU_") and v.strip() and not is_valid_value(v)}
    assert not bad, bad
    _results.add(GROUP, "hostile slice name handed to Ray's TPU manager", "correct",
                 detail="TPU_NAME handed on as the host's name", reported="TPU_NAME=host-a")


def test_a_tool_that_leaves_a_child_holding_its_output_is_cut_off_with_it(tmp_path):
    """A tool that starts a child and exits: the child holds the output pipe, so the output never
    ends; the call ends at its timeout and the child dies with the tool's session."""
    from ray_accel_ext.errors import CommandError

    tool = tmp_path / "usr" / "bin" / "hostile-tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\nsleep 600 &\necho started\n")
    tool.chmod(0o755)
    host = FsHost(tmp_path, env={}, budget_s=BUDGET_S, run_tools=True)
    started = time.monotonic()
    with pytest.raises(CommandError, match="timed out"):
        host.run(["/usr/bin/hostile-tool"], timeout_s=0.5)
    elapsed = time.monotonic() - started
    time.sleep(0.2)
    assert not [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[:2] == ["sleep", "600"]
                and p.ppid() in (1, os.getpid())]
    assert elapsed < STRUCTURAL_S
    _results.add(GROUP, "tool that leaves a child holding its output", "clear error", elapsed_s=elapsed,
                 budget_s=BUDGET_S, reported="timed out; the tool's session killed")
