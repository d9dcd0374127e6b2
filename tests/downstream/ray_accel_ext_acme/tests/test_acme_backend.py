"""What the Acme backend promises beyond the suite: its resource, visibility and public imports."""

from __future__ import annotations

import ast
from pathlib import Path

from ray_accel_ext.host import open_host
from ray_accel_ext_acme import AcmeNPUBackend

HOSTS = Path(__file__).parent / "hosts"


def test_four_npus_with_serials_and_firmware():
    desc = AcmeNPUBackend().describe(open_host(HOSTS / "acme-4npu", environ={}))
    assert [d.id for d in desc.devices] == ["ACME-000", "ACME-001", "ACME-002", "ACME-003"]
    assert desc.resource_name == "acme_npu" and desc.resource_quantity == 4
    assert desc.attributes == {"acme.ai/npu.firmware": "2.1.0"}


def test_visibility_round_trip():
    backend = AcmeNPUBackend()
    desc = backend.describe(open_host(HOSTS / "acme-4npu", environ={}))
    env = backend.visible_devices_env([desc.devices[1], desc.devices[3]])
    assert env == {"ACME_VISIBLE_DEVICES": "1,3"} and backend.parse_visible_devices(env) == [1, 3]


def test_not_detected_without_npus():
    assert AcmeNPUBackend().detect(open_host(HOSTS / "empty", environ={})) is False


def test_imports_only_public_core_modules():
    allowed = {"ray_accel_ext.backend", "ray_accel_ext.model", "ray_accel_ext.host", "ray_accel_ext.errors",
               "ray_accel_ext.hw.pci", "ray_accel_ext.hw.nics"}
    src = Path(__file__).parent.parent / "src" / "ray_accel_ext_acme"
    used = set()
    for file in src.glob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ray_accel_ext"):
                used.add(node.module)
            elif isinstance(node, ast.Import):
                used.update(a.name for a in node.names if a.name.startswith("ray_accel_ext."))
    assert used <= allowed, sorted(used - allowed)
