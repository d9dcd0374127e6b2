"""The value types: round trip, path-qualified validation errors, consistency checks."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ray_accel_ext.errors import DescriptionError
from ray_accel_ext.model import (
    Device,
    Fabric,
    Link,
    Location,
    Nic,
    NicPath,
    NodeDescription,
    NodeInventory,
    Problem,
    Sku,
)


def make_desc(**overrides) -> NodeDescription:
    """Two GPUs, one NVLink between them, one RoCE NIC next to device 0, a 2-host fabric."""
    base = dict(
        backend="acme",
        sku=Sku(vendor="acme", name="acme-x1", generation="gen1", ray_accelerator_type="X1", memory_bytes=80 << 30),
        resource_name="GPU",
        resource_quantity=2,
        devices=(
            Device(index=0, id="GPU-a", pci_address="0000:18:00.0", numa_node=0, cpus=(0, 1), nics=(NicPath(nic="mlx5_0", path="PIX"),)),
            Device(index=1, id="GPU-b", pci_address="0000:2a:00.0", numa_node=1, cpus=(2, 3)),
        ),
        interconnect="nvlink4",
        links=(Link(a=0, b=1, kind="nvlink4", lanes=18),),
        nics=(Nic(name="mlx5_0", kind="roce", pci_address="0000:19:00.0", numa_node=0, netdev="eth1", rate_gbps=400.0),),
        fabric=Fabric(kind="nvlink-domain", id="u.1", hosts=2, worker=1, hostnames=("a", "b")),
        location=Location(provider="gcp", zone="us-east5-a", rack="r1"),
        attributes={"acme.ai/firmware": "1.2"},
    )
    base.update(overrides)
    return NodeDescription(**base)


def test_round_trip_through_json():
    desc = make_desc()
    data = json.loads(json.dumps(desc.to_dict()))
    assert NodeDescription.from_dict(data) == desc
    assert NodeDescription.from_dict(data).to_dict() == desc.to_dict()


def test_inventory_round_trip_and_reasons():
    inv = NodeInventory(
        descriptions=(make_desc(problems=("/sys/x: permission denied",)),),
        problems=(Problem(backend="tpu", stage="describe", error="MetadataTimeout", message="slow"),),
        elapsed_s=0.01,
    )
    assert NodeInventory.from_dict(json.loads(json.dumps(inv.to_dict()))) == inv
    assert inv.degraded
    assert inv.reasons() == ["tpu describe: MetadataTimeout: slow", "acme: /sys/x: permission denied"]


def test_values_are_frozen():
    desc = make_desc()
    with pytest.raises(dataclasses.FrozenInstanceError):
        desc.backend = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        desc.attributes["acme.ai/new"] = "x"  # type: ignore[index]


@pytest.mark.parametrize(
    "mutate, path, message",
    [
        (lambda d: d["devices"][1].update(numa_node="one"), "devices[1].numa_node", "expected int, got str"),
        (lambda d: d["devices"][0]["nics"][0].update(path="NEAR"), "devices[0].nics[0].path", "expected one of"),
        (lambda d: d["sku"].pop("name"), "sku.name", "required field missing"),
        (lambda d: d.update(devices={}), "devices", "expected list, got dict"),
        (lambda d: d["fabric"].update(hosts=True), "fabric.hosts", "expected int, got bool"),
        (lambda d: d.update(extra=1), "", "unknown field(s) ['extra']"),
        (lambda d: d.update(schema_version=2), "schema_version", "unsupported schema version 2"),
        (lambda d: d["links"][0].update(lanes="18"), "links[0].lanes", "expected int, got str"),
    ],
)
def test_from_dict_names_the_field_path(mutate, path, message):
    data = make_desc().to_dict()
    mutate(data)
    with pytest.raises(DescriptionError) as err:
        NodeDescription.from_dict(data)
    assert err.value.path == path
    assert message in str(err.value)
    if path:
        assert str(err.value).startswith(f"{path}: ")


def test_consistency_errors_name_paths():
    desc = make_desc(
        devices=(Device(index=0, id="a"), Device(index=2, id="a", nics=(NicPath(nic="ghost", path="SYS"),))),
        links=(Link(a=0, b=9, kind="nvlink4"),),
        fabric=Fabric(kind="tpu-slice", id="s", hosts=2, worker=2),
    )
    errors = desc.consistency_errors()
    assert "devices[1].index: expected 1 (indices must be 0..1 in order), got 2" in errors
    assert "devices[*].id: duplicate ids ['a']" in errors
    assert "links[0].b: references device 9 but the node has devices 0..1" in errors
    assert "devices[1].nics[0].nic: 'ghost' is not in nics" in errors
    assert "fabric.worker: 2 is outside 0..1" in errors
    assert make_desc().consistency_errors() == []
