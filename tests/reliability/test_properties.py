"""Property-based tests (hypothesis) for every parser of outside text, and for the adapter.

Each parser either returns a well-formed value or raises a clear error (``TopologyStringError``,
``HostReadError``, ``ValueError`` naming the input), whatever the input; it never raises anything
else, never hangs, never builds something huge. The adapter turns ANY NodeDescription (hostile
strings everywhere) into labels that Ray's own validators accept and resources that ``ray start``
accepts. Case counts go to ``artifacts/reliability/properties.json`` for the fault report.
"""

from __future__ import annotations

import json
import re
import shutil
import string
import time

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("ray")  # labels are checked by Ray's own parser (tests/support/reliability.py)

from ray._private.parameter import RayParams

from ray_accel_ext.backends.amd_gpu import kfd
from ray_accel_ext.backends.neuron.read import parse_core_list, parse_neuron_ls
from ray_accel_ext.backends.nvidia_gpu import nvml as _nvml
from ray_accel_ext.backends.tpu.backend import parse_tpu_env
from ray_accel_ext.backends.tpu.layout import HostFacts, slice_layout
from ray_accel_ext.backends.tpu.topology import (
    GENERATIONS,
    parse_accelerator_type,
    parse_topology,
)
from ray_accel_ext.errors import HostReadError, TopologyStringError
from ray_accel_ext.host import open_host
from ray_accel_ext.hw.pci import BDF_RE, MAX_CPUS, format_cpulist, parse_cpulist, parse_hex_id
from ray_accel_ext.labels import sanitize_value
from ray_accel_ext.model import Device, Fabric, Link, Location, Nic, NicPath, NodeDescription, NodeInventory, Problem, Sku
from ray_accel_ext.node.adapter import to_ray_node
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.ray_hook import merge_into_params
from tests.support.paths import HOSTS
from tests.support.reliability import Results, label_errors

_results = Results("properties")
# Examples per property: enough to find the classic mistakes, cheap on a shared 2-core machine.
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


class _Tally:
    """Counts what one property saw (per parser: values returned, clear errors raised)."""

    def __init__(self, cls: str, group: str = "parser input") -> None:
        self.cls, self.group = cls, group
        self.ok = self.errors = self.degraded = 0
        self.worst = 0.0

    def __call__(self, fn, *args, errors=(ValueError,)):
        started = time.perf_counter()
        try:
            out = fn(*args)
            self.ok += 1
            return out
        except errors:
            self.errors += 1
            return None
        finally:
            self.worst = max(self.worst, time.perf_counter() - started)

    def record(self) -> None:
        for outcome, n in (("correct", self.ok), ("clear error", self.errors), ("degraded", self.degraded)):
            for _ in range(n):
                _results.add(self.group, self.cls, outcome, elapsed_s=None)
        if self.ok + self.errors + self.degraded:
            _results.cases[-1]["elapsed_s"] = round(self.worst, 4)


# Text from outside: printable, control characters, non-ASCII digits/letters, shell and YAML syntax.
HOSTILE = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=string.printable, max_size=80),
    st.sampled_from([
        "", " ", "\x00", "v6e-16\x00", "４x４", "٣x٣", "v6e-１６", "2x2x2\n", "-1", "0x", "1e3", "NaN", "inf",
        "$(reboot)", "`id`", "; rm -rf /", "a,b=c", "rayaccel.io/rack=evil", "ray.io/node-id=x",
        "../../etc/passwd", "x" * 300, "ÄÖÜ", "<html>", "'", "''", "\r\n", "\ufeffv4-8",
    ]),
)

_tallies: dict[str, _Tally] = {}


def tally(cls: str, group: str = "parser input") -> _Tally:
    return _tallies.setdefault(cls, _Tally(cls, group))


@pytest.fixture(scope="module", autouse=True)
def _record_tallies():
    yield
    for t in _tallies.values():
        t.record()
    _results.write()


# -- TPU type and topology strings ----------------------------------------------------------------


@FAST
@given(HOSTILE)
@example("4x4")
@example("0x4")
@example("9" * 5000 + "x1")
def test_topology_string_parses_or_names_the_problem(text):
    topo = tally("TPU topology string")(parse_topology, text, errors=(TopologyStringError,))
    if topo is not None:
        assert all(d >= 1 for d in topo.dims) and 2 <= len(topo.dims) <= 3
        assert parse_topology(topo.text) == topo  # canonical text round-trips
        assert re.fullmatch(r"\d+(x\d+){1,2}", topo.text)


@FAST
@given(st.lists(st.integers(1, 64), min_size=2, max_size=3))
def test_topology_round_trip(dims):
    text = "x".join(map(str, dims))
    assert tally("TPU topology string")(parse_topology, text, errors=()).dims == tuple(dims)


_GEN_NAMES = [g.name for g in GENERATIONS] + ["v7x", "v5e", "tpu-v6e", "V6E", "v99", "tpu"]


@FAST
@given(st.one_of(HOSTILE, st.builds(lambda g, n: f"{g}-{n}", st.sampled_from(_GEN_NAMES), st.integers(-2, 10**6))))
@example("v6e-16")
@example("tpu7x-8")
@example("v4-" + "9" * 5000)
def test_accelerator_type_parses_or_names_the_problem(text):
    acc = tally("TPU accelerator type")(parse_accelerator_type, text, errors=(TopologyStringError,))
    if acc is not None:
        assert acc.chips >= 1 and 1 <= acc.nominal_chips_per_host <= min(acc.chips, 8)
        assert acc.suffix == acc.chips * acc.generation.cores_per_chip
        assert re.fullmatch(r"(v|tpu)\d+[a-z]*-\d+", acc.ray_pod_type) or acc.ray_pod_type.startswith("v")


def _layout(gen, n, topo, seen):
    acc, problems = parse_accelerator_type(f"{gen}-{n}"), []
    return slice_layout(acc, parse_topology(topo), HostFacts(chips_seen=seen), problems), problems


@FAST
@given(st.sampled_from(_GEN_NAMES), st.integers(1, 4096), st.lists(st.integers(1, 32), min_size=2, max_size=3),
       st.sampled_from([1, 2, 4, 8]))
def test_slice_layout_is_consistent_or_says_why(gen, n, dims, seen):
    topo = "x".join(map(str, dims))
    result = tally("TPU type + topology")(_layout, gen, n, topo, seen, errors=(TopologyStringError,))
    if result is None:
        return
    layout, problems = result
    if layout.hosts * seen != layout.accelerator_type.chips:
        assert problems
    ici = layout.ici
    if ici is None:
        return
    seen_at = set()
    for worker in range(min(ici.hosts, 16)):
        for chip in range(ici.chips_per_host):
            c = ici.slice_coords(worker, chip)
            assert all(0 <= x < d for x, d in zip(c, ici.topology)), (worker, chip, c)
            seen_at.add(c)
    assert len(seen_at) == min(ici.hosts, 16) * ici.chips_per_host  # no two chips share a coordinate


# -- tpu-env ------------------------------------------------------------------------------------

_KEY = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)
_VAL = st.text(alphabet=st.characters(blacklist_characters="'\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), max_size=40)


@FAST
@given(HOSTILE)
@example("ACCELERATOR_TYPE: 'v6e-4'\nTOPOLOGY: '2x2'\nWORKER_ID: '0'\n")
@example("ACCELERATOR_TYPE: 'v6e-4\n")
def test_tpu_env_never_raises(text):
    values, bad = tally("tpu-env")(parse_tpu_env, text, errors=())
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) for k in values)
    assert all("'" not in v and "\n" not in v for v in values.values())
    assert all(len(b) < 700 for b in bad)  # messages quote at most 60 characters of the line


@FAST
@given(st.dictionaries(_KEY, _VAL, max_size=8))
def test_tpu_env_round_trip(env):
    text = "".join(f"{k}: '{v}'\n" for k, v in env.items())
    values, bad = tally("tpu-env")(parse_tpu_env, text, errors=())
    assert bad == [] and values == env


# -- neuron-ls JSON -----------------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | HOSTILE,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
_NEURON_ENTRY = st.fixed_dictionaries(
    {"neuron_device": st.integers(0, 64)},
    optional={
        "bdf": st.one_of(st.sampled_from(["cc:00.0", "0000:cc:00.0", "zz:00.0", ""]), HOSTILE),
        "numa_node": st.one_of(st.integers(-2, 8), st.sampled_from(["1", "-1", "x", ""]), st.none()),
        "cpu_affinity": st.one_of(st.sampled_from(["0-47", "48-95", "0-70000", ""]), HOSTILE),
        "connected_to": st.one_of(st.lists(st.integers(-1, 64), max_size=4), st.none(), HOSTILE),
        "nc_count": st.one_of(st.integers(-1, 16), st.none(), HOSTILE),
        "logical_neuroncore_config": st.one_of(st.integers(0, 4), st.none()),
        "memory_size": st.one_of(st.integers(-1, 2**40), HOSTILE),
    },
)


@FAST
@given(st.one_of(_JSON.map(json.dumps), st.lists(_NEURON_ENTRY, max_size=6).map(json.dumps), HOSTILE))
@example("[" * 50000)
@example('[{"neuron_device": 0, "cpu_affinity": "' + ",".join(f"{i}-{i}" for i in range(0, 200000, 2)) + '"}]')
def test_neuron_ls_json_parses_or_raises_value_error(text):
    out = tally("neuron-ls JSON")(parse_neuron_ls, text)
    if out is not None:
        for number, dev in out.items():
            assert number == dev.number >= 0
            assert dev.bdf is None or BDF_RE.match(dev.bdf)
            assert all(0 <= c < MAX_CPUS for c in dev.cpus)


def test_neuron_ls_deep_nesting_is_a_clear_problem(tmp_path):
    """A neuron-ls that prints 50k nested brackets: the backend reports it, the node is degraded."""
    src = HOSTS / "neuron" / "trn1-32xlarge"
    snap = tmp_path / "deep"
    shutil.copytree(src, snap, symlinks=True)
    rec = json.loads((snap / "commands" / "neuron-ls.json").read_text())
    rec["stdout"] = "[" * 50000
    (snap / "commands" / "neuron-ls.json").write_text(json.dumps(rec))
    inv = discover(open_host(snap, environ={}, budget_s=3.0))
    assert inv.degraded
    assert not [p for p in inv.problems if p.error == "RecursionError"], inv.problems
    _results.add("parser input", "neuron-ls JSON", "degraded", detail="50k nested brackets through the backend")


# -- KFD properties (AMD backend) ----------------------------------------------------------------


@FAST
@given(st.one_of(HOSTILE, st.lists(st.tuples(st.text(max_size=20), st.one_of(st.integers(-2**64, 2**64).map(str), HOSTILE)), max_size=8)
                 .map(lambda kv: "\n".join(f"{k} {v}" for k, v in kv))))
@example("simd_count 304\nvendor_id 4098\nlocation_id 49408\ndomain 0\n")
@example("location_id -1\ndevice_id -5\ngfx_target_version -90402\n")
def test_kfd_properties_parse_or_raise_host_read_error(text):
    props = tally("KFD properties")(kfd.parse_properties, text, "/sys/class/kfd/kfd/topology/nodes/1/properties",
                                    errors=(HostReadError,))
    if props is not None:
        assert all(isinstance(v, int) for v in props.values())
        node = kfd.GpuNode(1, props)
        node.device_id, node.gfx_target  # noqa: B018 - must not raise
        # A PCI address made from corrupt properties is either well formed or obviously not one.
        addr = node.pci_address
        assert isinstance(addr, str)


# -- PCI ids and CPU lists ----------------------------------------------------------------------


@FAST
@given(HOSTILE)
@example("0x10de\n")
@example("0x10DE")
@example("0x")
def test_pci_hex_id_is_normalised_or_refused(text):
    value = tally("PCI id")(parse_hex_id, text, "/sys/bus/pci/devices/x/device", errors=(HostReadError,))
    if value is not None:
        assert re.fullmatch(r"0x[0-9a-f]{1,6}", value)


@FAST
@given(HOSTILE)
@example("00000000:1A:00.0")
@example("-1:-1:-1.-1")
@example("1_0:00:00.0")
@example("../../x:00:00.0")
def test_nvml_bus_id_is_a_sysfs_address_or_none(text):
    addr = tally("NVML bus id")(_nvml.sysfs_address, text, errors=())
    if addr is not None:  # hex fields only: nothing that could walk a path
        assert re.fullmatch(r"[-0-9a-f]+:[-0-9a-f]+:[-0-9a-f]+\.[-0-9a-f]+", addr), addr


@FAST
@given(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7))
def test_nvml_bus_id_round_trip(domain, bus, dev, fn):
    nvml = f"{domain:08X}:{bus:02X}:{dev:02X}.{fn}"
    assert tally("NVML bus id")(_nvml.sysfs_address, nvml, errors=()) == f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"


@FAST
@given(st.one_of(HOSTILE, st.lists(st.one_of(st.integers(-5, 70000).map(str),
                                             st.tuples(st.integers(-5, 70000), st.integers(-5, 70000)).map(lambda t: f"{t[0]}-{t[1]}")),
                                   max_size=10).map(",".join)))
@example(",".join(f"{i * 100}-{i * 100 + 99}" for i in range(80000)))
@example("0-65535")
def test_cpulist_parses_bounded_or_raises_value_error(text):
    cpus = tally("CPU list")(parse_cpulist, text)
    if cpus is not None:
        assert list(cpus) == sorted(set(cpus)) and all(0 <= c < MAX_CPUS for c in cpus)
        assert parse_cpulist(format_cpulist(cpus)) == cpus
        assert parse_core_list(text) == list(cpus)


@FAST
@given(st.sets(st.integers(0, MAX_CPUS - 1), max_size=200))
def test_cpulist_round_trip(cpus):
    assert tally("CPU list")(parse_cpulist, format_cpulist(cpus), errors=()) == tuple(sorted(cpus))


# -- NVML recordings through the NVIDIA backend -------------------------------------------------

_BUS = st.one_of(st.sampled_from(["00000000:01:00.0", "00000000:02:00.0", "0000:01:00.0", "garbage", ""]), HOSTILE)
_NVML_DEV = st.fixed_dictionaries(
    {},
    optional={
        "index": st.one_of(st.integers(-1, 8), HOSTILE),
        "bus_id": st.one_of(_BUS, st.integers()),
        "uuid": st.one_of(HOSTILE, st.none(), st.integers()),
        "name": st.one_of(st.sampled_from(["NVIDIA L4", "NVIDIA H100 80GB HBM3"]), HOSTILE, st.none()),
        "memory_total": st.one_of(st.integers(-1, 2**50), st.none(), HOSTILE, st.booleans()),
        "nvlinks": st.one_of(st.lists(st.fixed_dictionaries({"remote_type": st.one_of(st.integers(-1, 300), HOSTILE)},
                                                             optional={"link": st.integers(-1, 40), "version": st.one_of(st.integers(-1, 9), st.none()),
                                                                       "remote_bus_id": _BUS}), max_size=3), HOSTILE),
        "fabric": st.one_of(st.none(), st.fixed_dictionaries({"state": st.one_of(st.integers(-1, 5), HOSTILE)},
                                                             optional={"status": st.integers(-1, 5), "cluster_uuid": st.one_of(HOSTILE, st.uuids().map(str)),
                                                                       "clique_id": st.one_of(st.integers(-1, 2**40), HOSTILE)})),
        "errors": st.one_of(st.lists(HOSTILE, max_size=2), HOSTILE),
    },
)
_NVML = st.one_of(
    st.fixed_dictionaries({"format": st.sampled_from([1, 1, 2, "1", None]), "devices": st.one_of(st.lists(_NVML_DEV, max_size=3), HOSTILE)},
                          optional={"driver_version": st.one_of(HOSTILE, st.none()), "error": st.one_of(HOSTILE, st.none())}),
    _JSON,
)


@pytest.fixture(scope="module")
def l4_copy(tmp_path_factory):
    snap = tmp_path_factory.mktemp("nvml") / "l4"
    shutil.copytree(HOSTS / "nvidia_gpu" / "l4-single-pcie", snap, symlinks=True)
    return snap


@SLOW
@given(reading=_NVML)
def test_nvml_recording_never_crashes_the_backend(reading, l4_copy):
    assert isinstance(_nvml.validate(reading), list)
    (l4_copy / "libraries" / "nvml.json").write_text(json.dumps(reading))
    t = tally("NVML recording")
    started = time.perf_counter()
    inv = discover(open_host(l4_copy, environ={}, budget_s=3.0))
    t.worst = max(t.worst, time.perf_counter() - started)
    crashed = [p for p in inv.problems if p.stage in ("detect", "describe")]
    assert not crashed, crashed  # the backend reports bad readings as problems, it does not crash
    spec = to_ray_node(inv)
    assert not label_errors(spec.labels)
    if inv.degraded:
        t.degraded += 1
    else:
        t.ok += 1


# -- the adapter: any description gives valid labels and a startable node -----------------------

_NAME = st.one_of(HOSTILE, st.sampled_from(["tpu", "nvidia_gpu", "neuron", "amd_gpu", "x y", "ray.io", "CPU"]))
_OPT = st.one_of(st.none(), HOSTILE)
_SKU = st.builds(Sku, vendor=HOSTILE, name=HOSTILE, generation=HOSTILE, ray_accelerator_type=_OPT, product=_OPT,
                 memory_bytes=st.one_of(st.none(), st.integers(-2**40, 2**50)), pci_device_id=_OPT, known=st.booleans())
_FABRIC = st.builds(Fabric, kind=st.one_of(st.sampled_from(["tpu-slice", "nvlink-domain", "ultraserver", "host"]), HOSTILE),
                    id=st.one_of(HOSTILE, st.sampled_from(["CPU", "memory", "object_store_memory", "GPU", "TPU", "node:127.0.0.1", "accelerator_type:H100"])),
                    hosts=st.integers(-3, 10**6), worker=st.integers(-3, 10**6), topology=_OPT,
                    product=st.one_of(_OPT, st.sampled_from(["v6e-16", "tpu7x-8", "v4-8"])))
_LOCATION = st.builds(Location, provider=_OPT, instance_type=_OPT, region=_OPT, zone=_OPT, cluster=_OPT, block=_OPT, rack=_OPT)


@st.composite
def descriptions(draw):
    n = draw(st.integers(0, 4))
    devices = tuple(Device(index=i, id=f"{draw(HOSTILE)}#{i}", numa_node=draw(st.one_of(st.none(), st.integers(-1, 8))),
                           memory_bytes=draw(st.one_of(st.none(), st.integers(0, 2**45))),
                           nics=tuple(NicPath(nic=draw(HOSTILE), path=draw(st.sampled_from(["PIX", "PXB", "PHB", "NODE", "SYS"])))
                                      for _ in range(draw(st.integers(0, 2)))))
                    for i in range(n))
    backend = draw(_NAME)
    prefix = draw(st.sampled_from(["nvidia.rayaccel.io", "rayaccel.io", "ray.io", "bad prefix", ""]))
    attributes = draw(st.dictionaries(st.one_of(HOSTILE.map(lambda k: f"{prefix}/{k}"), HOSTILE), HOSTILE, max_size=4))
    return NodeDescription(
        backend=backend, sku=draw(_SKU), resource_name=draw(st.one_of(st.sampled_from(["GPU", "TPU", "neuron_cores", "CPU", "memory"]), HOSTILE)),
        resource_quantity=draw(st.floats(allow_nan=True, allow_infinity=True)), devices=devices,
        interconnect=draw(HOSTILE), links=tuple(Link(a=0, b=1, kind=draw(HOSTILE)) for _ in range(1 if n > 1 else 0)),
        nics=tuple(Nic(name=draw(HOSTILE), kind=draw(HOSTILE)) for _ in range(draw(st.integers(0, 2)))),
        fabric=draw(st.one_of(st.none(), _FABRIC)), location=draw(_LOCATION), attributes=attributes,
        problems=tuple(draw(st.lists(HOSTILE, max_size=2))),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(descriptions(), max_size=3, unique_by=lambda d: d.backend),
       st.lists(st.builds(Problem, backend=HOSTILE, stage=HOSTILE, error=HOSTILE, message=HOSTILE), max_size=2))
def test_adapter_output_is_always_valid_for_ray(descs, problems):
    inventory = NodeInventory(descriptions=tuple(descs), problems=tuple(problems), elapsed_s=0.0)
    t = tally("adapter (hostile NodeDescriptions)", "adapter")
    spec = t(to_ray_node, inventory, errors=())
    errors = label_errors(spec.labels)
    assert not errors, errors
    assert spec.labels["rayaccel.io/discovery"] == ("degraded" if inventory.degraded else "ok")
    # `ray start` takes the resources: Ray's own parameter checks are the oracle.
    params = RayParams(num_cpus=1)
    merge_into_params(params, spec)
    params.update_if_absent(node_ip_address="127.0.0.1")
    assert all(v > 0 and v == v and v != float("inf") for v in spec.resources.values())
    # The ray start flags round-trip through Ray's own --labels parser: no key was smuggled in.
    from ray._private.label_utils import parse_node_labels_string

    flags = spec.ray_start_flags()
    if "--labels" in flags:
        assert parse_node_labels_string(flags[flags.index("--labels") + 1]) == dict(spec.labels)


@FAST
@given(HOSTILE)
def test_sanitize_value_always_valid(text):
    value = tally("sanitize_value", "adapter")(sanitize_value, text, errors=())
    assert value == "" or not label_errors({"rayaccel.io/x": value})
    assume(value)
    assert sanitize_value(value) == value  # idempotent
