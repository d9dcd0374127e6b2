"""Security: outside data never becomes label keys, paths outside the root, commands, or leaked secrets.

* Metadata and environment values that try to inject label keys (``,k=v``, newlines, ``ray.io/``
  keys, YAML), shell text (``$(...)``, backticks) or Ray's own resource names come out as sanitised
  values of the expected keys only; every delivery format (``--labels`` flags, labels YAML,
  ``RAY_OVERRIDE_*`` exports evaluated by a real shell) carries exactly the same labels and runs
  nothing.
* Symbolic links in a host root (absolute, ``..`` chains, loops) never reach a file outside it.
* External tools: only fixed absolute paths, never a shell, a bounded time, a clean environment;
  checked on the host seam and on the package source (no ``shell=True``, ``os.system``, ...).
* ``ray-accel record`` snapshots and the discovery/telemetry logs never contain credentials from
  the environment, from IMDS/GCE answers, or from error bodies.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("ray")  # labels are checked by Ray's own parser

from ray._private.label_utils import parse_node_labels_string
from ray._private.parameter import RayParams

from ray_accel_ext.errors import CommandError, HostReadError
from ray_accel_ext.host import FsHost, open_host
from ray_accel_ext.labels import (
    TPU_ATTR_SLICE_NAME,
    TPU_ATTR_TOPOLOGY,
    TPU_ATTR_WORKER_ID,
)
from ray_accel_ext.ray_hook import merge_into_params, node_spec
from ray_accel_ext.testing.fake_metadata import MetadataServers
from ray_accel_ext.testing.snapshots import metadata_spec
from ray_accel_ext.tools.record import record
from tests.support.paths import HOSTS, REPO
from tests.support.reliability import Results, label_errors

PACKAGE = REPO / "ray_accel_ext"
GCE_NODE = HOSTS / "tpu" / "gce-v5p-16-worker1"
EC2_NODE = HOSTS / "neuron" / "trn2u-48xlarge-node1"
MARKER = "/tmp/ray-accel-pwned-{pid}"

_results = Results("security")


@pytest.fixture(scope="module", autouse=True)
def _write_results():
    yield
    _results.write()


def _injections(marker: str) -> list[str]:
    return [
        f"$(touch {marker})", f"`touch {marker}`", f"x; touch {marker}", f"x' ; touch {marker}; echo '",
        "v5p-16,rayaccel.io/rack=evil", "v5p-16\nrayaccel.io/discovery: ok", "ray.io/node-id=evil",
        "rayaccel.io/rack: evil\n", "{\"a\": 1}", "- evil\n- list", "memory", "CPU", "node:127.0.0.1",
        "../../../../etc/passwd", "\x00\x1b[31mred", "a" * 500,
    ]


def _spec_under(snapshot: Path, spec: dict, env: dict, monkeypatch, tmp_path: Path):
    """The hook's node spec for ``snapshot`` with metadata ``spec`` and extra ``env`` values."""
    snap = tmp_path / snapshot.name
    if not snap.exists():
        shutil.copytree(snapshot, snap, symlinks=True)
    (snap / "env.json").write_text(json.dumps(env))
    with MetadataServers(spec) as servers:
        for k in ("GCE_METADATA_HOST", "AWS_EC2_METADATA_SERVICE_ENDPOINT"):
            monkeypatch.delenv(k, raising=False)
        for k, v in servers.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("RAY_ACCEL_ROOT", str(snap))
        return node_spec()


def _check_delivery(spec, marker: str) -> None:
    """Every delivery format carries exactly ``spec.labels`` and runs nothing."""
    assert not label_errors(spec.labels), label_errors(spec.labels)
    flags = spec.ray_start_flags()
    if "--labels" in flags:
        assert parse_node_labels_string(flags[flags.index("--labels") + 1]) == dict(spec.labels)
    assert (yaml.safe_load(spec.labels_yaml()) or {}) == dict(spec.labels)
    out = subprocess.run(["/bin/bash", "-c", spec.env_exports() + 'printf "%s\\n%s" "$RAY_OVERRIDE_LABELS" "$RAY_OVERRIDE_RESOURCES"'],
                         capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    labels_json, resources_json = out.stdout.split("\n", 1)
    assert json.loads(labels_json) == dict(spec.labels)
    assert json.loads(resources_json) == {k: (int(v) if float(v).is_integer() else v) for k, v in spec.resources.items()}
    params = RayParams(num_cpus=1)
    merge_into_params(params, spec)
    params.update_if_absent(node_ip_address="127.0.0.1")  # `ray start` would accept these resources
    assert not os.path.exists(marker), "an injected command ran"


PARTIAL_SLICE_KEYS = {TPU_ATTR_SLICE_NAME, TPU_ATTR_TOPOLOGY, TPU_ATTR_WORKER_ID}


def test_gce_metadata_values_cannot_inject_keys_commands_or_resources(monkeypatch, tmp_path):
    marker = MARKER.format(pid=os.getpid())
    base = metadata_spec(GCE_NODE)
    intact = _spec_under(GCE_NODE, base, {}, monkeypatch, tmp_path)
    keys = set(intact.labels)
    fields = ["instance/attributes/instance-id", "instance/attributes/accelerator-type", "instance/zone",
              "instance/attributes/physical_host_topology", "instance/attributes/tpu-env"]
    tried = 0
    for payload in _injections(marker):
        for field in fields:
            spec = json.loads(json.dumps(base))
            value = payload
            if field.endswith("physical_host_topology"):
                value = json.dumps({"cluster": payload, "block": payload, "subBlock": "sb", "host": payload})
            elif field.endswith("tpu-env"):
                value = base["gce"][field].replace("NODE_ID: 'v5p-slice-b'", f"NODE_ID: '{payload}'") + payload + "\n"
            spec["gce"][field] = value
            started = time.perf_counter()
            out = _spec_under(GCE_NODE, spec, {}, monkeypatch, tmp_path)
            elapsed = time.perf_counter() - started
            # A type that does not parse leaves the slice partly known: its parts get their own
            # fixed keys (as Ray labels them, field by field), never a key made of the value.
            new_keys = set(out.labels) - keys - PARTIAL_SLICE_KEYS
            assert not new_keys, (field, payload, new_keys)
            _check_delivery(out, marker)
            outcome = "degraded" if out.labels.get("rayaccel.io/discovery") == "degraded" else "correct"
            _results.add("security", "metadata value injection (GCE)", outcome, elapsed_s=elapsed)
            tried += 1
    assert tried == len(fields) * len(_injections(marker))


def test_env_and_imds_values_cannot_inject(monkeypatch, tmp_path):
    marker = MARKER.format(pid=os.getpid())
    base = metadata_spec(EC2_NODE)
    intact = _spec_under(EC2_NODE, base, json.loads((EC2_NODE / "env.json").read_text()), monkeypatch, tmp_path)
    keys = set(intact.labels)
    for payload in _injections(marker):
        spec = json.loads(json.dumps(base))
        for field in list(spec["ec2"]):
            spec["ec2"][field] = payload if field != "instance-type" else spec["ec2"][field]
        env = {"NEURON_RT_VISIBLE_CORES": payload, "NEURON_LOGICAL_NC_CONFIG": payload, "TPU_NAME": payload}
        started = time.perf_counter()
        out = _spec_under(EC2_NODE, spec, env, monkeypatch, tmp_path)
        assert not set(out.labels) - keys, (payload, set(out.labels) - keys)
        _check_delivery(out, marker)
        _results.add("security", "IMDS/env value injection (EC2)", "degraded" if out.labels.get("rayaccel.io/discovery") == "degraded" else "correct",
                     elapsed_s=time.perf_counter() - started)
        # the instance type itself: a hostile one is an unknown instance, never a key
        spec["ec2"]["instance-type"] = payload
        out = _spec_under(EC2_NODE, spec, {}, monkeypatch, tmp_path)
        assert not set(out.labels) - keys
        _check_delivery(out, marker)
        _results.add("security", "IMDS/env value injection (EC2)", "degraded" if out.labels.get("rayaccel.io/discovery") == "degraded" else "correct")


def test_tpu_slice_named_like_a_ray_resource_still_starts(monkeypatch, tmp_path):
    """A slice (instance-id) named ``memory`` or ``CPU`` must not become a resource `ray start` refuses."""
    for name in ("memory", "CPU", "object_store_memory", "GPU", "TPU"):
        spec = metadata_spec(GCE_NODE)
        spec["gce"]["instance/attributes/instance-id"] = name
        out = _spec_under(GCE_NODE, spec, {}, monkeypatch, tmp_path)
        assert out.resources.get("TPU") == 4 and "GPU" not in out.resources, dict(out.resources)
        _check_delivery(out, MARKER.format(pid=os.getpid()))
        _results.add("security", "slice named like a Ray resource", "correct")


# -- the host root ------------------------------------------------------------------------------


def test_symlinks_never_leave_the_root(tmp_path):
    secret = tmp_path / "outside" / "secret"
    secret.parent.mkdir()
    secret.write_text("SECRET-OUTSIDE-THE-ROOT\n")
    snap = tmp_path / "snap"
    shutil.copytree(HOSTS / "nvidia_gpu" / "l4-single-pcie", snap, symlinks=True)
    root = snap / "rootfs"
    devices = root / "sys/bus/pci/devices"
    gpu = sorted(devices.iterdir())[0]
    real = Path(os.path.realpath(gpu))
    depth = len(real.relative_to(tmp_path).parts)
    # every file discovery reads for the GPU becomes a link out of the root
    for f in ("numa_node", "local_cpulist", "device", "vendor", "class"):
        if (real / f).exists():
            (real / f).unlink()
    os.symlink("../" * depth + "outside/secret", real / "numa_node")      # relative .. chain
    os.symlink(str(secret), real / "local_cpulist")                       # absolute target
    os.symlink("/../../../../" + str(secret), real / "device")            # absolute with ..
    os.symlink("vendor", real / "vendor")                                 # self loop
    os.symlink("../" * 40 + "etc/hostname", real / "class")
    os.symlink("../../../../../../../../../../", devices / "0000:ff:00.0")  # a device dir above /
    host = FsHost(root, env={})
    cases = 0
    for name in ("numa_node", "local_cpulist", "device", "vendor", "class"):
        path = f"/sys/bus/pci/devices/{gpu.name}/{name}"
        resolved = host.realpath(path) if name != "vendor" else None
        if resolved is not None:
            assert not (root / resolved.lstrip("/")).resolve().is_relative_to(tmp_path / "outside")
        try:
            text = host.read_optional(path)
        except HostReadError as exc:
            text = str(exc)
        assert "SECRET-OUTSIDE" not in (text or "")
        cases += 1
    assert host.realpath("/sys/bus/pci/devices/0000:ff:00.0") == "/"
    assert host.realpath("/../../..") == "/"
    summary = record(open_host(snap, environ={}), tmp_path / "rec")
    dumped = json.dumps(summary, default=str)
    for p in (tmp_path / "rec").rglob("*"):
        if p.is_file() and not p.is_symlink():
            dumped += p.read_text(errors="replace")
    assert "SECRET-OUTSIDE" not in dumped
    inv_spec = node_spec(snap)
    assert "SECRET-OUTSIDE" not in json.dumps(dict(inv_spec.labels))
    for _ in range(cases):
        _results.add("security", "symlink out of the host root", "clear error")


# -- external tools -----------------------------------------------------------------------------


def _tool_root(tmp_path: Path, script: str) -> FsHost:
    root = tmp_path / "toolroot"
    (root / "opt/bin").mkdir(parents=True)
    tool = root / "opt/bin/tool"
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)
    return FsHost(root, env={"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "PATH": "/evil"},
                  run_tools=True)


def test_tools_only_from_absolute_paths_without_a_shell(tmp_path):
    marker = tmp_path / "ran"
    host = _tool_root(tmp_path, 'printf "%s|" "$@"; env\n')
    for argv in (["tool"], ["opt/bin/tool"], ["./tool"], ["sh", "-c", f"touch {marker}"], []):
        with pytest.raises(CommandError):
            host.run(argv, timeout_s=2)
        _results.add("security", "tool not at a fixed absolute path", "clear error")
    out = host.run(["/opt/bin/tool", f"$(touch {marker})", f"`touch {marker}`", "; id"], timeout_s=5)
    assert out.startswith(f"$(touch {marker})|`touch {marker}`|; id|"), out  # arguments stay literal
    assert not marker.exists()
    assert "wJalrXUtnFEMI" not in out and "AWS_SECRET" not in out  # the tool gets a clean environment
    assert "PATH=/usr/bin:/bin" in out
    _results.add("security", "shell text in tool arguments", "correct")


def test_tools_are_bounded_in_time(tmp_path):
    host = _tool_root(tmp_path, "sleep 30\n")
    started = time.perf_counter()
    with pytest.raises(CommandError, match="timed out"):
        host.run(["/opt/bin/tool"], timeout_s=0.3)
    elapsed = time.perf_counter() - started
    assert elapsed < 10.0  # the 0.3 s timeout, with room for a loaded machine; the tool sleeps 30 s
    _results.add("security", "tool that hangs", "clear error", elapsed_s=elapsed)


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def test_package_source_never_uses_a_shell():
    """No shell=True, os.system, os.popen or string commands anywhere in the package; every
    ``host.run`` names its tool by a constant absolute path."""
    offenders: list[str] = []
    runs = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                  for t in n.targets if isinstance(t, ast.Name)}
        where = path.relative_to(REPO)
        for call in _calls(tree):
            f = call.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
            for kw in call.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    offenders.append(f"{where}:{call.lineno}: shell={ast.unparse(kw.value)}")
            if (owner, name) in {("os", "system"), ("os", "popen"), ("os", "execvp"), ("os", "execlp"), ("subprocess", "getoutput"),
                                 ("subprocess", "getstatusoutput")}:
                offenders.append(f"{where}:{call.lineno}: {owner}.{name}")
            if owner == "subprocess" and call.args and isinstance(call.args[0], (ast.Constant, ast.JoinedStr)):
                offenders.append(f"{where}:{call.lineno}: subprocess.{name} with a string command")
            if owner == "host" and name == "run":
                runs += 1
                first = call.args[0].elts[0] if call.args and isinstance(call.args[0], ast.List) and call.args[0].elts else None
                tool = first.value if isinstance(first, ast.Constant) else consts.get(first.id) if isinstance(first, ast.Name) else None
                if not (isinstance(tool, str) and tool.startswith("/")):
                    offenders.append(f"{where}:{call.lineno}: host.run without a constant absolute tool path")
    assert runs >= 1, "found no host.run call to check"
    assert not offenders, "\n".join(offenders)
    _results.add("security", "source scan: shell use, tool paths", "correct", detail=f"{runs} host.run calls")


# -- credentials in snapshots and logs ------------------------------------------------------------

SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-K7MDENG-SECRET1",
    "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEJr-SECRET2",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7SECRET3",
    "HF_TOKEN": "hf_SECRET4abcdef",
    "RAY_AUTH_TOKEN": "ray-SECRET5",
    "GOOGLE_API_KEY": "AIzaSECRET6",
    "DB_PASSWORD": "hunter2-SECRET7",
}
SECRET_WORDS = [v for v in SECRETS.values()] + ["SECRET8-in-tpu-env", "SECRET9-iam", "SECRET10-imds-body", "SECRET11-sa-token"]


def _secret_snapshot(tmp_path: Path) -> tuple[Path, dict]:
    snap = tmp_path / "gce"
    shutil.copytree(GCE_NODE, snap, symlinks=True)
    env = dict(SECRETS, TPU_WORKER_ID="1")
    (snap / "env.json").write_text(json.dumps(env))
    spec = metadata_spec(GCE_NODE)
    tpu_env = spec["gce"]["instance/attributes/tpu-env"]
    spec["gce"]["instance/attributes/tpu-env"] = (
        tpu_env + "API_KEY: 'SECRET8-in-tpu-env'\nACCESS_TOKEN='SECRET8-in-tpu-env'\nexport AUTH_TOKEN=SECRET8-in-tpu-env\n"
    )
    spec["gce"]["instance/service-accounts/default/token"] = '{"access_token":"SECRET11-sa-token"}'
    spec["gce_faults"] = {"instance/attributes/physical_host_topology": {"status": 500}}
    return snap, spec


def _everything_written(directory: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(directory.rglob("*")) if p.is_file() and not p.is_symlink())


def test_record_never_writes_credentials(tmp_path):
    snap, spec = _secret_snapshot(tmp_path)
    with MetadataServers(spec) as servers:
        env = {**servers.env()}
        host = open_host(snap, environ=env)
        summary = record(host, tmp_path / "rec")
    written = _everything_written(tmp_path / "rec") + json.dumps(summary, default=str)
    leaked = [w for w in SECRET_WORDS if w in written]
    assert not leaked, leaked
    _results.add("security", "credentials in recorded snapshots (GCE)", "correct")


def test_record_never_writes_imds_credentials(tmp_path):
    snap = tmp_path / "ec2"
    shutil.copytree(EC2_NODE, snap, symlinks=True)
    (snap / "env.json").write_text(json.dumps({**json.loads((EC2_NODE / "env.json").read_text()), **SECRETS}))
    spec = metadata_spec(EC2_NODE)
    spec["ec2"]["iam/security-credentials/role"] = json.dumps({"AccessKeyId": "AKIA", "SecretAccessKey": "SECRET9-iam", "Token": "SECRET9-iam"})
    spec["ec2"]["user-data"] = "#!/bin/sh\nexport AWS_SECRET_ACCESS_KEY=SECRET10-imds-body\n"
    spec["ec2_faults"] = {"placement/availability-zone": {"status": 500}}
    with MetadataServers(spec) as servers:
        host = open_host(snap, environ=servers.env())
        summary = record(host, tmp_path / "rec")
        tokens = set(servers.imds.tokens)
    written = _everything_written(tmp_path / "rec") + json.dumps(summary, default=str)
    leaked = [w for w in SECRET_WORDS + sorted(tokens) if w in written]
    assert tokens and not leaked, leaked
    _results.add("security", "credentials in recorded snapshots (EC2)", "correct")


def test_discovery_and_telemetry_logs_never_carry_credentials(tmp_path, monkeypatch, caplog):
    snap, spec = _secret_snapshot(tmp_path)
    spec["gce_faults"] = {
        "instance/attributes/physical_host_topology": {"status": 500},
        "instance/zone": {"body": "SECRET10-imds-body"},
    }
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    caplog.set_level(logging.DEBUG)
    with MetadataServers(spec) as servers:
        monkeypatch.setenv("GCE_METADATA_HOST", servers.gce.address)
        monkeypatch.setenv("RAY_ACCEL_ROOT", str(snap))
        out = node_spec()
    with MetadataServers({"ec2": {}, "ec2_faults": {"api/token": {"body": "tok en SECRET12"}}}) as servers:
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://{servers.imds.address}")
        monkeypatch.setenv("RAY_ACCEL_ROOT", str(EC2_NODE))
        node_spec()
    text = "\n".join(r.getMessage() for r in caplog.records) + json.dumps(dict(out.labels))
    assert "discovery" in text  # the telemetry event was logged
    leaked = [w for w in SECRET_WORDS + ["SECRET12"] if w in text]
    assert not leaked, (leaked, [r.getMessage() for r in caplog.records if any(w in r.getMessage() for w in leaked)])
    _results.add("security", "credentials in discovery/telemetry logs", "correct")
