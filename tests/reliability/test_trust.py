"""Trust boundaries: snapshots, third-party answers, settings and the dashboard, through the CLI.

Every case runs ``ray-accel`` in its own process, as a user would (``discover`` / ``ray-args`` /
``doctor`` / ``skus`` / ``record``), on a copy of a shipped snapshot with one hostile thing in it
(``ray_accel_ext.testing.hostile_answers`` and ``hostile_snapshot``). Shown for each: the command
ends (the one timed assertion is structural: far below the kit's hangs of 10 s and more), the
healthy devices are kept, the loss is said as a coded problem (the code is what is asserted, in
``discover``/``doctor --format json``), no process of the command is left, no program of the
snapshot ran, no secret is written. The ``ray start`` cases are in test_trust_ray.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from ray_accel_ext import problems as codes
from ray_accel_ext.host.protocol import DEFAULT_BUDGET_S
from ray_accel_ext.testing.fake_metadata import MetadataServers
from ray_accel_ext.testing.hostile import copy_snapshot, set_metadata
from ray_accel_ext.testing.hostile_answers import (
    BROKEN_DISTRIBUTIONS,
    HOSTILE_ANSWERS,
    install_broken_distributions,
    install_hostile_answers,
    install_sleepers,
)
from ray_accel_ext.testing.hostile_snapshot import (
    BAD_ENDPOINTS,
    TPU_ENV_SECRETS,
    bad_env_json,
    cpulist_bomb,
    dangling_pci,
    hostile_sku_dir,
    numa_overflow,
    plant_tool,
)
from ray_accel_ext.testing.snapshots import metadata_spec
from tests.support.paths import HOSTS, REPO
from tests.support.reliability import Results, label_errors

BUDGET_S = DEFAULT_BUDGET_S
PROMISE_S = BUDGET_S + 4.0   # what the brief of this class promises for a command
STRUCTURAL_S = BUDGET_S + 20.0  # the assertion: a process start on a loaded machine, far below any hang
H100 = HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
A3 = HOSTS / "nvidia_gpu" / "gce-a3-highgpu-1g"
GCE_TPU = HOSTS / "tpu" / "gce-v5p-16-worker1"
TRN2 = HOSTS / "neuron" / "trn2-48xlarge"
GAUDI = HOSTS / "gaudi" / "hls3-gaudi3-8"

_results = Results("trust")


@pytest.fixture(scope="module", autouse=True)
def _write_results():
    yield
    _results.write()


def _cli(args, *, env=None, site=None, timeout=120):
    """``ray-accel ARGS`` in a fresh process: (rc, stdout, stderr, seconds, processes left)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ACCEL_", "GCE_", "AWS_EC2_"))}
    full.update(env or {})
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(site) if site else "", str(REPO)) if p)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ray_accel_ext.tools.cli", *map(str, args)], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        return None, out, err, time.monotonic() - started, []
    elapsed = time.monotonic() - started
    time.sleep(0.2)
    left = [p.pid for p in psutil.process_iter() if _in_group(p, proc.pid)]
    for pid in left:  # the test's own cleanup; the assertion below is what counts
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    return proc.returncode, out, err, elapsed, left


def _in_group(proc, pgid):
    try:
        return os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, OSError):
        return False


def _discover(root, **kw):
    """``discover --format json``: (counts, [(code, reason line)], seconds, processes left)."""
    rc, out, err, elapsed, left = _cli(["discover", "--root", root, "--format", "json"], **kw)
    assert rc == 0, err[-3000:]
    data = json.loads(out)
    reasons = [(p["code"], f"{p['backend']} {p['stage']}: {p['error']}: {p['message']}") for p in data["problems"]]
    reasons += [(p["code"], f"{d['backend']}: {p['message']}") for d in data["descriptions"] for p in d.get("problems", ())]
    counts = {d["resource_name"]: d["resource_quantity"] for d in data["descriptions"]}
    return counts, reasons, elapsed, left


def _doctor_causes(out):
    """The codes (``cause``) of ``doctor --format json``'s findings."""
    return [f["cause"] for f in json.loads(out)["findings"]]


def _ray_args(root, **kw):
    rc, out, err, elapsed, left = _cli(["ray-args", "--root", root, "--format", "json"], **kw)
    assert rc == 0, err[-3000:]
    return json.loads(out), elapsed, left


def _record(group, cls, elapsed, said, *, left=(), promise_s=PROMISE_S, **extra):
    ok = elapsed is not None and elapsed <= max(STRUCTURAL_S, promise_s) and not left
    _results.add(group, cls, "degraded" if ok and said else "unflagged change", elapsed_s=elapsed,
                 budget_s=BUDGET_S, hang=elapsed is None or elapsed > promise_s, detail=said[:300],
                 reported=said[:300], **extra)


def _said(reasons, code, needle=""):
    """The line of the first problem of ``code`` (whose line holds ``needle``); the code is what
    is asserted, the words only pick among several problems of one code."""
    found = next((line for c, line in reasons if c == code and needle in line), None)
    assert found is not None, (code, needle, reasons)
    return found


# -- 1. a snapshot is data: no program of it runs --------------------------------------------------


@pytest.mark.parametrize("snapshot, tool, command", [
    (TRN2, "/opt/aws/neuron/bin/neuron-ls", "discover"), (TRN2, "/opt/aws/neuron/bin/neuron-ls", "ray-args"),
    (TRN2, "/opt/aws/neuron/bin/neuron-ls", "doctor"), (TRN2, "/opt/aws/neuron/bin/neuron-ls", "RAY_ACCEL_ROOT"),
    (GAUDI, "/usr/bin/hl-smi", "discover"), (GAUDI, "/usr/bin/hl-smi", "doctor"),
])
def test_no_program_of_a_snapshot_is_executed(tmp_path, snapshot, tool, command):
    snap = copy_snapshot(snapshot, tmp_path / "snap")
    marker = tmp_path / "it-ran"
    plant_tool(snap, tool, marker)
    if command == "RAY_ACCEL_ROOT":
        args, env = ["ray-args", "--format", "json"], {"RAY_ACCEL_ROOT": str(snap)}
    else:
        args, env = [command, "--root", snap, "--format", "json"], {}
    rc, out, err, elapsed, left = _cli(args, env=env)
    assert rc in (0, 1) and out, err[-2000:]  # doctor exits 1 when it has errors to show
    assert not marker.exists(), f"{tool} of the snapshot was executed"
    assert not left and elapsed <= STRUCTURAL_S
    said = "not recorded; the program in the root is not run"
    assert said in out + err or command in ("ray-args", "RAY_ACCEL_ROOT"), out[-2000:]
    if command == "doctor":
        assert codes.TOOL_NOT_RECORDED in _doctor_causes(out), out[-2000:]
    if command == "discover":
        counts, reasons, _, _ = _discover(snap)
        assert counts  # the family is still described from sysfs
        said = _said(reasons, codes.TOOL_NOT_RECORDED)
    _record("snapshot is data", f"{tool.rsplit('/', 1)[1]} planted in the snapshot, `{command}`", elapsed, said,
            code=codes.TOOL_NOT_RECORDED if command in ("discover", "doctor") else "")


@pytest.mark.parametrize("content", [b"not json", b"[1, 2]", b"[" * 100_000])
def test_an_unusable_recording_is_coded_and_runs_nothing(tmp_path, content):
    snap = copy_snapshot(TRN2, tmp_path / "snap")
    marker = tmp_path / "it-ran"
    plant_tool(snap, "/opt/aws/neuron/bin/neuron-ls", marker)
    (snap / "commands" / "neuron-ls.json").write_bytes(content)
    counts, reasons, elapsed, left = _discover(snap)
    assert counts.get("neuron_cores") == 64 and not left and not marker.exists(), (counts, reasons)
    said = _said(reasons, codes.RECORDING_INVALID, "neuron-ls")
    _record("snapshot is data", f"commands/neuron-ls.json holding {content[:12]!r} ({len(content):,} bytes)", elapsed,
            said, code=codes.RECORDING_INVALID)


def test_conformance_on_a_snapshot_runs_no_program(tmp_path):
    snap = copy_snapshot(TRN2, tmp_path / "hosts" / "neuron" / "trn2")
    marker = tmp_path / "it-ran"
    plant_tool(snap, "/opt/aws/neuron/bin/neuron-ls", marker)
    rc, out, err, elapsed, left = _cli(["conformance", "neuron", "--snapshots", snap.parent], timeout=600)
    assert rc is not None and not marker.exists() and not left
    # The suite runs many discoveries in a pytest session: its bound is the command's timeout, not
    # one discovery budget.
    _record("snapshot is data", "neuron-ls planted in the snapshot, `conformance`", elapsed,
            "the suite ran; the planted program did not", promise_s=600.0)


# -- 2, 4, 5, 14. third-party answers and distributions -------------------------------------------


@pytest.fixture(scope="module")
def answers_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("answers")
    install_hostile_answers(site)
    install_broken_distributions(site)
    return site


_ANSWER_CODES = {
    "many_attributes": codes.LABELS_CUT,
    "huge_quantity": codes.VALUE_BOUNDED,
    "gpu_1e18": codes.VALUE_BOUNDED,
    "many_devices": codes.ANSWER_TOO_LARGE,
    "name_nul": codes.DECLARATION_INVALID,
    "name_node": codes.DECLARATION_INVALID,
    "name_blank": codes.DECLARATION_INVALID,
    "reserved_prefix": codes.PREFIX_RESERVED,
}
# (code, the distribution it names)
_BROKEN_CODES = {
    "latin1-metadata": (codes.DISTRIBUTION_SKIPPED, "broken_latin1_metadata-1.0.dist-info"),
    "malformed-entry-points": (codes.DISTRIBUTION_SKIPPED, "broken_malformed_entry_points-1.0.dist-info"),
    "non-utf8-entry-points": (codes.DISTRIBUTION_SKIPPED, "broken_non_utf8_entry_points-1.0.dist-info"),
    "nvidia-gpu-clash": (codes.ENTRY_POINT_REFUSED, "'nvidia_gpu'"),
}


def test_third_party_answers_are_bounded_and_named(answers_site):
    counts, reasons, elapsed, left = _discover(H100, site=answers_site)
    assert counts.get("GPU") == 8, (counts, reasons)
    assert not left and elapsed <= STRUCTURAL_S
    for answer in HOSTILE_ANSWERS:
        said = _said(reasons, _ANSWER_CODES[answer.key], answer.name)
        _record("third-party answer", answer.what, elapsed, said, code=_ANSWER_CODES[answer.key])
    for name, (what, *_rest) in BROKEN_DISTRIBUTIONS.items():
        code, names = _BROKEN_CODES[name]
        said = _said(reasons, code, names).replace(str(answers_site), "<site-dir>")
        _record("broken distribution", what, elapsed, said, code=code)
    assert not [line for c, line in reasons if c == codes.SKU_FILE], reasons  # vendor SKU data is still read


def test_ray_args_with_hostile_answers_gives_valid_bounded_labels(answers_site):
    spec, elapsed, left = _ray_args(H100, site=answers_site)
    labels = spec["labels"]
    assert spec["resources"]["GPU"] == 8 and labels["rayaccel.io/discovery"] == "degraded"
    assert not label_errors(labels) and not left
    assert len(json.dumps(labels)) < 64 << 10  # the raylet's argument, far below Linux's 128 KiB
    _record("third-party answer", "ray-args: labels of every answer together", elapsed,
            f"{len(labels)} labels, {len(json.dumps(labels))} bytes")


# -- 6. many entry points that sleep at import ------------------------------------------------------


@pytest.mark.parametrize("count", [300, 600])
def test_many_sleeping_entry_points_keep_the_node_and_leave_nothing(tmp_path, count):
    site = install_sleepers(tmp_path / "site", count)
    spec, elapsed, left = _ray_args(H100, site=site)
    assert spec["resources"].get("GPU") == 8 and spec["labels"]["rayaccel.io/discovery"] == "degraded"
    assert not left, f"{len(left)} processes left after ray-args exited"
    assert elapsed <= STRUCTURAL_S
    counts, reasons, _, _ = _discover(H100, site=site)
    said = _said(reasons, codes.BACKEND_NOT_STARTED, "third-party backend(s) not started")
    _record("third-party backends", f"{count} entry points sleeping at import", elapsed, said,
            code=codes.BACKEND_NOT_STARTED)


# -- 7, 10, 15. hostile sysfs ----------------------------------------------------------------------


@pytest.mark.parametrize("case", ["cpulist-1mib", "numa-overflow", "dangling-50000", "dangling-200000"])
def test_hostile_sysfs_keeps_the_gpus(tmp_path, case):
    snap = copy_snapshot(H100, tmp_path / "snap")
    if case == "cpulist-1mib":
        cpulist_bomb(snap)
        found, what = [(codes.VALUE_BOUNDED, "local_cpulist")], "a NIC's local_cpulist of 1 MiB (0-65535, repeated)"
    elif case == "numa-overflow":
        numa_overflow(snap)
        found, what = [(codes.VALUE_BOUNDED, "numa_node 99999999999999999999")], "numa_node = 99999999999999999999"
    else:
        count = int(case.rsplit("-", 1)[1])
        dangling_pci(snap, count)
        # more entries than are read: the first ones are, the dangling among them left out
        found = [(codes.ENTRIES_CAPPED, f"{count + 65} entries"), (codes.ENTRIES_DANGLING, "dangling")]
        what = f"{count:,} dangling /sys/bus/pci/devices entries"
    spec, elapsed, left = _ray_args(snap)
    assert spec["resources"].get("GPU") == 8 and spec["labels"]["rayaccel.io/discovery"] == "degraded", spec
    assert not left and elapsed <= STRUCTURAL_S
    counts, reasons, _, _ = _discover(snap)
    assert counts.get("GPU") == 8, (counts, reasons)
    said = "; ".join(_said(reasons, code, needle) for code, needle in found)
    _record("hostile host files", what, elapsed, said, code=", ".join(code for code, _ in found))


# -- 8. hostile SKU directory ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "nested"])
def test_a_hostile_sku_directory_is_skipped_by_every_command(tmp_path, kind):
    sku = hostile_sku_dir(tmp_path / "skus", kind)
    env = {"RAY_ACCEL_SKU_DIR": str(sku.parent)}
    spec, elapsed, left = _ray_args(H100, env=env)
    assert spec["resources"].get("GPU") == 8 and spec["labels"]["rayaccel.io/discovery"] == "degraded"
    needle = "FIFO" if kind == "fifo" else "nested deeper than"
    counts, reasons, _, _ = _discover(H100, env=env)
    assert counts.get("GPU") == 8 and _said(reasons, codes.SKU_FILE, needle)
    for args in (["doctor", "--root", H100], ["skus"], ["skus", "--validate", sku]):
        rc, out, err, took, left2 = _cli([*args, "--format", "json"] if args[0] != "skus" or len(args) == 1 else args,
                                         env=env, timeout=60)
        assert rc is not None, f"{args[0]} hung on a {kind} SKU file"
        assert needle in out + err and not left2, (args, out[-1500:], err[-1500:])
        if args[0] == "doctor":
            assert codes.SKU_FILE in _doctor_causes(out), out[-1500:]
        said = next(line for line in (out + err).splitlines() if needle in line).strip().replace(str(tmp_path), "<tmp>")
        _record("hostile setting", f"RAY_ACCEL_SKU_DIR with a {kind} a.json, `{' '.join(map(str, args[:2]))}`",
                took, said[:300], code=codes.SKU_FILE if args[0] == "doctor" else "")
    said = _said(reasons, codes.SKU_FILE, needle).replace(str(tmp_path), "<tmp>")
    _record("hostile setting", f"RAY_ACCEL_SKU_DIR with a {kind} a.json, `discover`", elapsed, said, code=codes.SKU_FILE)


# -- 9. malformed endpoint settings ----------------------------------------------------------------


@pytest.mark.parametrize("variable, value", BAD_ENDPOINTS)
def test_a_malformed_metadata_endpoint_loses_only_metadata(variable, value):
    roots = [(GCE_TPU, "TPU", 4), (A3, "GPU", 1)] if variable.startswith("GCE") else [(TRN2, "neuron_cores", 64)]
    for root, resource, count in roots:
        counts, reasons, elapsed, left = _discover(root, env={variable: value})
        assert counts.get(resource) == count, (counts, reasons)
        assert not left
        said = _said(reasons, codes.ENDPOINT_MALFORMED)
        _record("hostile setting", f"{variable}={value!r} ({root.name})", elapsed, said, code=codes.ENDPOINT_MALFORMED)


# -- 11. record keeps only the tpu-env keys discovery parses ----------------------------------------


def test_record_keeps_only_the_tpu_env_keys_discovery_parses(tmp_path):
    snap = copy_snapshot(GCE_TPU, tmp_path / "snap")
    spec = metadata_spec(snap)
    tpu_env = spec["gce"]["instance/attributes/tpu-env"] + "\n".join(TPU_ENV_SECRETS.values()) + "\n"
    set_metadata(snap, "gce", "instance/attributes/tpu-env", tpu_env)
    spec = metadata_spec(snap)
    out = tmp_path / "rec"
    with MetadataServers(spec) as servers:
        rc, stdout, err, elapsed, left = _cli(["record", "--root", snap, out], env=servers.env())
    assert rc == 0, err[-2000:]
    written = "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file() and not p.is_symlink())
    written += stdout + err
    for name, line in TPU_ENV_SECRETS.items():
        secret = line.split("'", 1)[1].rstrip("'")
        assert secret not in written, f"{name} written"
        _record("secret in tpu-env", f"record: {name}", elapsed, "left out (tpu-env allowlist)")
    recorded = json.loads((out / "metadata.json").read_text())["gce"]["instance/attributes/tpu-env"]
    assert "WORKER_ID: '1'" in recorded and "TOPOLOGY: '2x2x2'" in recorded


# -- 12. slowloris against the dashboard ------------------------------------------------------------


def test_slowloris_does_not_starve_the_dashboard():
    import http.client
    import socket

    from ray_accel_ext.cluster.dashboard import DashboardServer

    with DashboardServer(lambda: {"nodes": []}, refresh_s=3600, head_timeout_s=2.0) as server:
        stop = threading.Event()
        socks = []
        for _ in range(32):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sock.sendall(b"G")
            socks.append(sock)

        def drip():
            while not stop.is_set():
                for sock in socks:
                    try:
                        sock.sendall(b"E")
                    except OSError:
                        pass
                time.sleep(0.5)

        t = threading.Thread(target=drip, daemon=True)
        t.start()
        statuses = []
        started = time.monotonic()
        for _ in range(5):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("GET", "/healthz")
            statuses.append(conn.getresponse().status)
            conn.close()
        elapsed = time.monotonic() - started
        stop.set()
        for sock in socks:
            sock.close()
    assert statuses == [200] * 5, statuses
    _record("dashboard", "32 sockets sending one header byte every 0.5 s", elapsed,
            "real clients served (200); each slow head closed at its deadline or to make room")


# -- 13. doctor and record run third-party backends in workers ----------------------------------------


@pytest.mark.parametrize("command", ["doctor", "record"])
def test_doctor_and_record_contain_hostile_backends(tmp_path, command):
    from ray_accel_ext.testing.hostile import install_hostile_backends

    site = install_hostile_backends(tmp_path / "site")
    args = ["doctor", "--root", H100, "--format", "json"] if command == "doctor" else ["record", "--root", H100, tmp_path / "rec"]
    rc, out, err, elapsed, left = _cli(args, site=site, env={"RAY_ACCEL_DISABLE": "hostile_import_hang"})
    assert rc in (0, 1) and out, (rc, err[-2000:])
    assert not left and elapsed <= STRUCTURAL_S
    code = ""
    if command == "doctor":
        exited = [f for f in json.loads(out)["findings"] if "hostile_detect_exit" in f["message"]]
        assert exited and exited[0]["cause"] == codes.BACKEND_CRASH, out[-2000:]
        said, code = exited[0]["message"], codes.BACKEND_CRASH
    else:
        assert (tmp_path / "rec" / "expected.json").is_file()
        said = next(line for line in out.splitlines() if "nvidia_gpu x8" in line)
    _record("doctor and record", f"`{command}` with every hostile backend (os._exit, threads, hangs)", elapsed, said,
            code=code)


# -- 16. hostile env.json ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["nested", "list"])
def test_a_hostile_env_json_degrades_the_node_and_keeps_its_devices(tmp_path, kind):
    snap = copy_snapshot(H100, tmp_path / "snap")
    bad_env_json(snap, kind)
    counts, reasons, elapsed, left = _discover(snap)
    assert counts.get("GPU") == 8 and not left, (counts, reasons)
    said = _said(reasons, codes.SNAPSHOT_ENV_INVALID, "env.json")
    spec, _, _ = _ray_args(snap)
    assert spec["resources"].get("GPU") == 8 and spec["labels"]["rayaccel.io/discovery"] == "degraded", spec
    _record("snapshot is data", f"env.json {'nested 200,000 levels' if kind == 'nested' else 'a JSON list'}", elapsed,
            said, code=codes.SNAPSHOT_ENV_INVALID)
