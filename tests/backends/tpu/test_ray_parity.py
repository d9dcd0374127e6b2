"""Our ``ray.io/*`` labels, TPU resources and host count equal what Ray 2.60's own
``TPUAcceleratorManager`` gives the same machine, except where ours is a documented fix.

Both sides read the same inputs: a host snapshot's rootfs and env.json, and a loopback GCE
metadata fake serving its metadata.json (one fake per side, so each side's requests are counted
apart). Ours runs through discovery and the adapter (what the start hook and ``ray-accel
ray-args`` run); Ray's through ``ResourceAndLabelSpec.resolve()`` with its file access and
hard-coded metadata URL pointed at the snapshot (:mod:`tests.support.ray_tpu`; Ray's
transport is redirected, nothing of ours is patched), plus Ray's host count
``get_num_workers_in_current_tpu_pod``.

Inputs: every committed TPU snapshot, and the input classes of ``tests/support/tpu_parity_cases.py``
(each generation's pod types on 1-, 4- and 8-chip hosts, GKE and GCE, partial and malformed
identity, VFIO layouts). Where we differ on purpose a rule below says so, with the row of the
differences table in docs/tpu.md it stands for; every rule must fire at least once and change
something when it does.
"""

from __future__ import annotations

import math
import threading
from collections import Counter

import pytest

pytest.importorskip("ray")  # compared with what Ray's own TPU manager derives

from ray_accel_ext.backends.tpu.topology import parse_accelerator_type, parse_topology
from ray_accel_ext.errors import TopologyStringError
from ray_accel_ext.node.tpu_subslices import parse_shape, subslice_labels
from ray_accel_ext.testing.fake_metadata import MetadataServers
from ray_accel_ext.testing.snapshots import metadata_spec, run_snapshot, snapshot_dirs
from tests.support.paths import HOSTS
from tests.support.ray_tpu import ray_tpu_node_spec
from tests.support.tpu_parity_cases import Case, cases

TPU_SNAPSHOTS = snapshot_dirs(HOSTS / "tpu")
CASES = list(cases())
RAY_TYPE = {"v2": "TPU-V2", "v3": "TPU-V3", "v4": "TPU-V4", "v5p": "TPU-V5P", "v5litepod": "TPU-V5LITEPOD",
            "v6e": "TPU-V6E", "tpu7x": "TPU-V7X"}
# Rule id -> docs/tpu.md differences row (the words the row starts with).
RULES = {
    "tpu7x-chips": "TPU7x host",
    "non-tpu-vfio": "A Google function on vfio-pci",
    "type-ray-cannot-read": "No accelerator type Ray can read",
    "single-host-named": "Single-host slice without a name or worker id",
    "hostnames-name": "Multi-host slice without a name",
    "topology-unparsed": "A topology that does not parse",
    "accel-not-tpu": "A bare `/dev/accel0` beside a PCI tree with no Google function",
    "subslice-labels": "`ray.io/tpu-subslice-<shape>` node labels",
    "subslice-host-block": "Subslice labels on hosts whose chip block is not 2x2",
}
# GKE's getChipsPerDim: a host's chip block from its chip count (docs/tpu.md, "Slice arithmetic").
CHIP_BLOCK = {1: (1, 1, 1), 2: (1, 2, 1), 4: (2, 2, 1), 8: (2, 4, 1)}
FIRED: Counter[str] = Counter()


def _ours(snapshot):
    inventory, spec = run_snapshot(snapshot)
    resources = {k: (int(v) if float(v).is_integer() else v) for k, v in spec.resources.items()}
    labels = {k: v for k, v in spec.labels.items() if k.startswith("ray.io/")}
    hosts = spec.labels.get("rayaccel.io/fabric-hosts")
    return {"resources": resources, "labels": labels, "hosts": int(hosts) if hosts else None}, inventory


def _ray(snapshot):
    spec = metadata_spec(snapshot)
    with MetadataServers(spec) as servers:
        base = f"http://{servers.gce.address}" if servers.gce else None
        return ray_tpu_node_spec(snapshot, base)


def _type_text(case: Case) -> str | None:
    return case.env.get("TPU_ACCELERATOR_TYPE") or case.attributes.get("accelerator-type")


def _parsed_type(case: Case):
    try:
        return parse_accelerator_type(_type_text(case) or "")
    except TopologyStringError:
        return None


def _topology_text(case: Case) -> str | None:
    if "TPU_TOPOLOGY" in case.env:
        return case.env["TPU_TOPOLOGY"]
    env = case.attributes.get("tpu-env", "")
    return next((line.split("'")[1] for line in env.splitlines() if line.startswith("TOPOLOGY:")), None)


def _expected(case: Case, ray: dict) -> tuple[dict, list[str]]:
    """Ray's answer with our documented fixes applied; the ids of the fixes that changed it."""
    res, labels = dict(ray["resources"]), dict(ray["labels"])
    hosts = ray["workers"]
    fired: list[str] = []
    acc = _parsed_type(case)

    def fire(rule: str, before: object, after: object) -> None:
        if before != after:
            fired.append(rule)

    if case.gen == "tpu7x" or case.extra_google_vfio:
        # Ray counts IOMMU groups: two per TPU7x chip, and any group with a Google function.
        rule = "tpu7x-chips" if case.gen == "tpu7x" else "non-tpu-vfio"
        before = (dict(res), hosts)
        if case.chips:
            res["TPU"] = case.chips
        else:
            res.pop("TPU", None)
        if acc is not None and hosts is not None:
            hosts = math.ceil(acc.chips / case.chips)
        fire(rule, before, (res, hosts))
    if not case.chips and not case.extra_google_vfio and res.get("TPU"):
        # Ray counts glob("/dev/accel*"); with sysfs PCI visible and no Google function the node
        # is another vendor's accelerator (ray-project/ray#45302): no TPU, nothing TPU about it.
        res = {k: v for k, v in res.items() if k != "TPU" and not k.startswith("accelerator_type:TPU")}
        labels = {k: v for k, v in labels.items() if not k.startswith("ray.io/tpu-") and k != "ray.io/accelerator-type"}
        hosts = None
        fired.append("accel-not-tpu")
    if case.gen is not None and not any(k.startswith("accelerator_type:") for k in res):
        # The chips say what they are; Ray knows only what the type string says.
        res[f"accelerator_type:{RAY_TYPE[case.gen]}"] = 1
        labels["ray.io/accelerator-type"] = RAY_TYPE[case.gen]
        if acc is not None and case.chips:  # a type only we can read ("V4-8") sizes the slice too
            hosts = math.ceil(acc.chips / case.chips)
        fired.append("type-ray-cannot-read")
    topo = _topology_text(case)
    if topo is not None and "ray.io/tpu-topology" in labels:
        try:
            parse_topology(topo)
        except TopologyStringError:
            del labels["ray.io/tpu-topology"]
            fired.append("topology-unparsed")
    pod_type = labels.get("ray.io/tpu-pod-type")
    if acc is not None and case.chips and math.ceil(acc.chips / case.chips) == 1:
        # One host: it is worker 0, and a slice of one host can be named after it.
        before = (dict(labels), dict(res))
        labels.setdefault("ray.io/tpu-worker-id", "0")
        name = labels.setdefault("ray.io/tpu-slice-name", case.hostname)
        if pod_type:
            res.setdefault(name, 1)
            if labels["ray.io/tpu-worker-id"] == "0":
                res.setdefault(f"TPU-{pod_type}-head", 1)
        fire("single-host-named", before, (labels, res))
    hostnames = case.env.get("TPU_WORKER_HOSTNAMES") or case.attributes.get("worker-network-endpoints")
    if acc is not None and hostnames and "ray.io/tpu-slice-name" not in labels and "ray.io/tpu-worker-id" in labels:
        first = hostnames.split(",")[0].split(":")[-1]
        labels["ray.io/tpu-slice-name"] = first
        if pod_type:
            res[first] = 1
            if labels["ray.io/tpu-worker-id"] == "0":
                res[f"TPU-{pod_type}-head"] = 1
        fired.append("hostnames-name")
    _subslices(case, labels, fired)
    return {"resources": res, "labels": labels, "hosts": hosts}, fired


def _grid(topology: tuple[int, ...], block: tuple[int, ...]) -> str | None:
    if any(t % b for t, b in zip(topology, block)):
        return None
    return "x".join(str(t // b) for t, b in zip(topology, block))


def _subslices(case: Case, labels: dict, fired: list[str]) -> None:
    """Ray 2.60 puts no subslice label on a node. Newest Ray's (tested against Ray's own cases in
    test_subslice_labels.py) numbers the host at its chips' smallest coordinate on a grid of 2x2x1
    hosts; ours numbers it on its real chip block (GKE's block for its chip count)."""
    acc, topo, worker = _parsed_type(case), labels.get("ray.io/tpu-topology"), labels.get("ray.io/tpu-worker-id")
    if acc is None or not topo or worker is None or "ray.io/tpu-slice-name" not in labels or not case.chips:
        return
    try:
        dims = parse_shape(topo)
    except ValueError:
        return
    if len(topo.split("x")) != acc.generation.dims or math.prod(dims) != acc.chips or case.chips not in CHIP_BLOCK:
        return
    block = CHIP_BLOCK[min(case.chips, acc.chips)]
    hosts, ray_hosts = _grid(dims, block), _grid(dims, (2, 2, 1))
    if hosts is None:
        return  # a host that is no block of its slice: ours has no chip coordinates, so no labels
    w, grid = int(worker), parse_shape(hosts)
    origin = (w % grid[0] * block[0], w // grid[0] % grid[1] * block[1], w // (grid[0] * grid[1]) * block[2])
    newest: dict[str, str] = {}
    if ray_hosts is not None:
        rg = parse_shape(ray_hosts)
        physical = origin[0] // 2 + rg[0] * (origin[1] // 2 + rg[1] * origin[2])
        newest = subslice_labels(topo, "2x2x1", ray_hosts, physical)
    if newest:
        labels.update(newest)
        fired.append("subslice-labels")
    ours = subslice_labels(topo, "x".join(map(str, block)), hosts, w)
    if ours != newest:
        for key in newest:
            labels.pop(key)
        labels.update(ours)
        fired.append("subslice-host-block")


def _compare(ours: dict, expected: dict, why: list[str]) -> None:
    assert ours["resources"] == expected["resources"], f"resources differ from Ray's beyond the fixes {why}"
    assert ours["labels"] == expected["labels"], f"labels differ from Ray's beyond the fixes {why}"
    if ours["hosts"] is not None:
        # fabric-hosts is ours alone; where we publish it, it is Ray's host count (or a fix's).
        assert ours["hosts"] == expected["hosts"], f"hosts {ours['hosts']} vs Ray's {expected['hosts']} ({why})"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_generated_host_equals_rays_tpu_manager(case, tmp_path):
    snapshot = case.build(tmp_path)
    ours, inventory = _ours(snapshot)
    expected, fired = _expected(case, _ray(snapshot))
    FIRED.update(fired)
    _compare(ours, expected, fired)
    # Slice arithmetic: fabric-hosts x chips on this host is the slice, or the node says why.
    tpu = next((d for d in inventory.descriptions if d.backend == "tpu"), None)
    acc = _parsed_type(case)
    if tpu is not None and tpu.fabric is not None and acc is not None and tpu.fabric.hosts * len(tpu.devices) != acc.chips:
        numbers = (str(acc.chips), str(tpu.fabric.hosts * len(tpu.devices)))
        assert any(all(n in p for n in numbers) for p in [q.message for q in tpu.problems]), tpu.problems


@pytest.mark.parametrize("snapshot", TPU_SNAPSHOTS, ids=lambda p: p.name)
def test_committed_snapshot_equals_rays_tpu_manager(snapshot):
    spec = metadata_spec(snapshot)
    hangs = any(f.get("hang") for f in spec.get("gce_faults", {}).values())
    ours, _ = _ours(snapshot)
    ray = _ray_against_hanging_server(snapshot) if hangs else _ray(snapshot)
    case = _case_of(snapshot)
    expected, fired = _expected(case, ray)
    FIRED.update(fired)
    _compare(ours, expected, fired)


def _case_of(snapshot) -> Case:
    """The facts of a committed snapshot the rules need (what its README says it is)."""
    import json

    env = json.loads((snapshot / "env.json").read_text())
    gce = metadata_spec(snapshot).get("gce", {})
    hangs = any(f.get("hang") for f in metadata_spec(snapshot).get("gce_faults", {}).values())
    attrs = {} if hangs else {k.rpartition("/")[2]: v for k, v in gce.items() if k.startswith("instance/attributes/")}
    facts = {
        "gce-gvnic-nvme-no-tpu": (None, 0, 1), "gce-v4-8-dev-accel": ("v4", 4, 0),
        "amd-ipu-dev-accel-no-tpu": (None, 0, 0),
        "gke-tpu7x-16-two-container-c0": ("tpu7x", 2, 0), "gke-tpu7x-16-two-container-c1": ("tpu7x", 2, 0),
        "gce-v5litepod-8-single-host": ("v5litepod", 8, 0), "gce-v5p-16-worker1": ("v5p", 4, 0),
        "gce-v6e-4-metadata-timeout": ("v6e", 4, 0), "gke-tpu7x-4chip-single-host": ("tpu7x", 4, 0),
        "gke-v6e-4x4-worker0": ("v6e", 4, 0), "gke-v6e-4x4-worker3": ("v6e", 4, 0),
        # chips of an id the SKU database lacks: counted as Ray counts them, typed only by the type string
        "gce-tpu-unknown-id": (None, 4, 0), "gke-tpu-unknown-id-typed": ("v6e", 4, 0),
    }[snapshot.name]
    hostname = (snapshot / "rootfs/proc/sys/kernel/hostname").read_text().strip()
    return Case(snapshot.name, facts[0], facts[1], hostname, env, attrs, extra_google_vfio=facts[2])


def _ray_against_hanging_server(snapshot):
    """Ray's manager calls requests.get without a timeout: it blocks as long as the server does.
    Ray is given well past our 3 s budget and must still be blocked (a documented difference);
    then the server goes away, Ray's pending call fails, and Ray finishes with what it could read
    without metadata."""
    servers = MetadataServers(metadata_spec(snapshot)).start()
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(ray_tpu_node_spec(snapshot, f"http://{servers.gce.address}")),
                              daemon=True)
    thread.start()
    thread.join(5.0)
    assert thread.is_alive(), "Ray's TPU manager was expected to block on a hanging metadata server"
    servers.stop()
    thread.join(60)
    assert not thread.is_alive()
    return result


def test_every_fix_is_a_real_difference_and_documented():
    """Runs after the parity tests (file order): every rule fired, and docs/tpu.md lists it."""
    docs = (HOSTS.parent.parent.parent / "docs" / "tpu.md").read_text()
    assert set(FIRED) == set(RULES), f"rules that never changed Ray's answer: {set(RULES) - set(FIRED)}"
    for rule, row in RULES.items():
        assert f"| {row}" in docs, f"docs/tpu.md has no differences row for {rule!r} ({row!r})"


def test_the_input_classes_are_all_there():
    ids = {c.id for c in CASES}
    for needed in ("gke-v6e-8-on-4chip-host", "gce-v6e-16-on-8chip-host", "gce-partial-worker-id-only",
                   "gke-partial-name-only", "gce-bad-type-0", "vfio-bluefield-and-v6e", "vfio-gvnic-only",
                   "vfio-tpu7x-two-functions-per-chip", "drm-accel-directory-only"):
        assert needed in ids
    gens = {c.gen for c in CASES}
    assert gens >= {"v2", "v3", "v4", "v5p", "v5litepod", "v6e", "tpu7x"}
    assert {c.chips for c in CASES if c.id.endswith("chip-host")} == {1, 4, 8}
