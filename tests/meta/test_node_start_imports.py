"""What the node-start path imports: the hook and ``ray-accel ray-args`` load no module of the
cluster side, the CLI's other commands, doctor or the conformance suite (issue: costs that grow
with the host; a fresh ``ray-args`` process paid for the dashboard server and doctor)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.paths import HOSTS, REPO

H100 = HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
FORBIDDEN = ("ray_accel_ext.cluster", "ray_accel_ext.tools.doctor", "ray_accel_ext.conformance",
             "ray_accel_ext.placement", "ray_accel_ext.transport", "ray_accel_ext.train", "ray_accel_ext.testing")
_REPORT = "import json, sys; print(json.dumps(sorted(m for m in sys.modules if m.startswith('ray_accel_ext'))), file=sys.stderr)"


def _modules(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\n" + _REPORT], capture_output=True, text=True, cwd=REPO,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "RAY_ACCEL_ROOT": str(H100)})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("what, code", [
    ("the start hook's module", "import ray_accel_ext.ray_hook"),
    ("a node spec", "from ray_accel_ext.ray_hook import node_spec; node_spec()"),
    ("ray-accel ray-args", "from ray_accel_ext.tools.cli import main; main(['ray-args', '--format', 'json'])"),
])
def test_node_start_imports_no_cluster_tool_or_suite_module(what, code):
    loaded = _modules(code)
    assert "ray_accel_ext.node.hook" in loaded, loaded  # the path itself was imported
    extra = [m for m in loaded if m.startswith(FORBIDDEN)]
    assert not extra, f"{what} imports {extra}"


def test_other_commands_are_still_registered_for_help():
    from ray_accel_ext.tools.cli import COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {n.replace("_", "-") for n in COMMANDS} == set(sub.choices)
