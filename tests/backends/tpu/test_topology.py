"""Accelerator-type and topology parsing (ray_accel_ext.backends.tpu.topology), exhaustively.

Expected values come from hardware.md 4.3/4.4 (GKE tpu-device-plugin test vectors, Ray's
``get_total_chips_from_accelerator_type``), and every type is cross-checked against Ray 2.60's own
chip arithmetic where Ray has one.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel_ext.backends.tpu.topology import (
    GENERATIONS,
    generation_for,
    generation_from_pci,
    parse_accelerator_type,
    parse_topology,
)
from ray_accel_ext.errors import TopologyStringError

# (type, chips, hosts on Ray's usual hosts, chips of such a host, generation); how many hosts a
# slice really has is the host's business (test_tpu_ici.py), this is Ray's nominal rule.
TYPES = [
    ("v2-8", 4, 1, 4, "v2"),
    ("v2-32", 16, 4, 4, "v2"),
    ("v3-8", 4, 1, 4, "v3"),
    ("v3-32", 16, 4, 4, "v3"),
    ("v3-2048", 1024, 256, 4, "v3"),
    ("v4-8", 4, 1, 4, "v4"),
    ("v4-16", 8, 2, 4, "v4"),
    ("v4-128", 64, 16, 4, "v4"),
    ("v5p-8", 4, 1, 4, "v5p"),
    ("v5p-16", 8, 2, 4, "v5p"),
    ("v5p-128", 64, 16, 4, "v5p"),
    ("v5litepod-1", 1, 1, 1, "v5e"),
    ("v5litepod-4", 4, 1, 4, "v5e"),
    ("v5litepod-8", 8, 1, 8, "v5e"),
    ("v5litepod-16", 16, 4, 4, "v5e"),
    ("v5litepod-256", 256, 64, 4, "v5e"),
    ("v6e-1", 1, 1, 1, "v6e"),
    ("v6e-4", 4, 1, 4, "v6e"),
    ("v6e-8", 8, 1, 8, "v6e"),
    ("v6e-16", 16, 4, 4, "v6e"),
    ("v6e-256", 256, 64, 4, "v6e"),
    ("tpu7x-2", 1, 1, 1, "tpu7x"),
    ("tpu7x-8", 4, 1, 4, "tpu7x"),
    ("tpu7x-16", 8, 2, 4, "tpu7x"),
    ("tpu7x-128", 64, 16, 4, "tpu7x"),
    ("v7x-8", 4, 1, 4, "tpu7x"),
]


@pytest.mark.parametrize("text,chips,hosts,per_host,gen", TYPES)
def test_accelerator_type_chips_and_nominal_hosts(text, chips, hosts, per_host, gen):
    acc = parse_accelerator_type(text)
    assert (acc.chips, acc.nominal_chips_per_host, acc.generation.generation) == (chips, per_host, gen)
    assert -(-acc.chips // acc.nominal_chips_per_host) == hosts


@pytest.mark.parametrize("text,chips,hosts,per_host,gen", TYPES)
def test_chip_count_agrees_with_ray(text, chips, hosts, per_host, gen):
    from ray._private.accelerators import tpu as ray_tpu

    ray_name = parse_accelerator_type(text).ray_pod_type
    assert ray_tpu.get_total_chips_from_accelerator_type(ray_name) == chips
    # Ray answers the host's capacity (4) for a sub-host tpu7x-2 slice of one chip; we answer the
    # chips the slice has on its host. Both agree once capped at the slice size.
    assert min(ray_tpu.get_num_tpu_visible_chips_per_host(ray_name), chips) == per_host


@pytest.mark.parametrize(
    "text,pod_type",
    [("tpu7x-8", "v7x-8"), ("v6e-16", "v6e-16"), ("V4-8", "v4-8"), ("v5litepod-16", "v5litepod-16")],
)
def test_ray_pod_type_normalisation_matches_ray(text, pod_type):
    from ray._private.accelerators.tpu import normalize_tpu_accelerator_type

    assert parse_accelerator_type(text).ray_pod_type == pod_type == normalize_tpu_accelerator_type(text)


@pytest.mark.parametrize(
    "bad",
    ["", "v6e", "v6e-", "-16", "v6e-1x", "v6e16", "v9z-8", "gpu-8", "v4-7", "v6e-2", "v6e-6", "v6e-20x",
     "v6e-18", "tpu7x-3", "v6e--16", "v6e-0"],
)
def test_malformed_accelerator_type_names_the_string(bad):
    with pytest.raises(TopologyStringError) as info:
        parse_accelerator_type(bad)
    assert repr(bad) in str(info.value)
    assert info.value.text == bad


def test_non_string_is_an_error():
    with pytest.raises(TopologyStringError):
        parse_accelerator_type(None)  # type: ignore[arg-type]
    with pytest.raises(TopologyStringError):
        parse_topology(16)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text,dims,chips",
    [("4x4", (4, 4), 16), ("2x2x2", (2, 2, 2), 8), ("1x1", (1, 1), 1), ("2x4", (2, 4), 8),
     ("16x16", (16, 16), 256), ("12x24x24", (12, 24, 24), 6912), (" 2X2x1 ", (2, 2, 1), 4)],
)
def test_topology(text, dims, chips):
    topo = parse_topology(text)
    assert topo.dims == dims and topo.chips == chips


@pytest.mark.parametrize("bad", ["", "4", "4x", "x4", "4x4x", "4x4x4x4", "4*4", "4x0", "0x4", "axb", "4x-4", "4 x 4"])
def test_malformed_topology_names_the_string(bad):
    with pytest.raises(TopologyStringError) as info:
        parse_topology(bad)
    assert repr(bad) in str(info.value)


@given(st.sampled_from([g for g in GENERATIONS]), st.integers(min_value=1, max_value=4096))
def test_parse_never_crashes_on_any_count(gen, n):
    text = f"{gen.name}-{n}"
    try:
        acc = parse_accelerator_type(text)
    except TopologyStringError as exc:
        assert repr(text) in str(exc)
    else:
        assert acc.chips * gen.cores_per_chip == n
        assert 1 <= acc.nominal_chips_per_host <= 8


def test_pci_generations():
    assert generation_from_pci("0x0027", "0x004e").generation == "v2"
    assert generation_from_pci("0x0027", "0x004f").generation == "v3"
    assert generation_from_pci("0x0027", None) is None  # v2/v3 cannot be told apart without it
    assert generation_from_pci("0x005e", None).generation == "v4"
    assert generation_from_pci("0x0062", None).generation == "v5p"
    assert generation_from_pci("0x0063", None).generation == "v5e"
    assert generation_from_pci("0x006f", "0x0000").generation == "v6e"
    assert generation_from_pci("0x0076", None).functions_per_chip == 2
    assert generation_from_pci("0x0042", None) is None  # gVNIC
    assert generation_from_pci("0x001f", None) is None  # NVMe


def test_generation_names_and_ray_types():
    assert generation_for("TPU-V6E").ray_accelerator_type == "TPU-V6E"
    assert generation_for("v7x").ray_accelerator_type == "TPU-V7X"
    assert generation_for("v5litepod").ray_accelerator_type == "TPU-V5LITEPOD"
    from ray.util import accelerators as ray_acc

    for gen in GENERATIONS:
        assert gen.ray_accelerator_type in {
            ray_acc.GOOGLE_TPU_V2, ray_acc.GOOGLE_TPU_V3, ray_acc.GOOGLE_TPU_V4, ray_acc.GOOGLE_TPU_V5P,
            ray_acc.GOOGLE_TPU_V5LITEPOD, ray_acc.GOOGLE_TPU_V6E, ray_acc.GOOGLE_TPU_V7X,
        }
    with pytest.raises(TopologyStringError):
        generation_for("v9")
