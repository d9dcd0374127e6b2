"""The ``/api/cluster`` document: holders joined from Ray's two sources, occupancy and device
states, metrics scraped from a real loopback exporter, PCIe paths computed on recorded hosts,
and the doctor's advice for each reason. No Ray here (the live path is in test_dashboard.py).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ray_accel_ext import problems
from ray_accel_ext.cluster.dashboard import MetricsHistory, build_document, merge_holders
from ray_accel_ext.cluster.dashboard.holders import HolderReport
from ray_accel_ext.cluster.dashboard.metrics import device_samples, parse_exposition
from ray_accel_ext.cluster.inventory import assemble
from ray_accel_ext.cluster.topology import pcie_paths
from ray_accel_ext.findings import finding_of
from ray_accel_ext.host import open_host
from ray_accel_ext.model import PATH_CLASSES, Problem
from ray_accel_ext.node.discovery import discover
from tests.support.paths import HOSTS

H100 = HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
TRN2 = HOSTS / "neuron" / "trn2-48xlarge"


def _node(snapshot, node_id, **extra_labels):
    expected = json.loads((snapshot / "expected.json").read_text())
    ray_node = {"NodeID": node_id, "Alive": True, "Labels": {**expected["ray"]["labels"], **extra_labels},
                "Resources": {"CPU": 8.0, **expected["ray"]["resources"]}, "NodeManagerAddress": "127.0.0.1",
                "NodeManagerHostname": snapshot.name, "NodeManagerPort": 1, "MetricsExportPort": 2}
    host = open_host(snapshot)
    probe = {"inventory": {"descriptions": expected["descriptions"], "problems": expected["problems"]},
             "hostname": snapshot.name, "pcie": pcie_paths(host, discover(host))}
    return ray_node, probe


GPU_NODE, TRN_NODE = "a" * 56, "b" * 56
ACTOR, TASK_WORKER, TASK = "c" * 24 + "01000000", "d" * 56, "e" * 40 + "01000000"
ACTOR_WORKER = "9" * 56


@pytest.fixture(scope="module")
def inventory():
    nodes, probes = zip(_node(H100, GPU_NODE), _node(TRN2, TRN_NODE))
    pg = {"f" * 36: {"name": "train", "state": "CREATED", "strategy": "PACK", "bundles": {0: {"GPU": 2.0}}, "bundles_to_node_id": {0: GPU_NODE}}}
    gone = "accelerator 0000:1a:00.0 (0x10de:0x2330) disappeared after the node started"
    health = {GPU_NODE: {"status": "degraded", "reasons": [gone], "problems": [{"code": "device-gone", "message": gone}],
                         "missing": [{"pci_address": "0000:1a:00.0"}]}}
    return assemble(nodes, {GPU_NODE: probes[0], TRN_NODE: probes[1]}, pg, health=health)


# Rows as the raylet's worker stats and Ray's state API give them (measured on Ray 2.60; field names of
# ray.util.state.common.ActorState / TaskState; "used" from CoreWorkerStats.used_resources).
WORKERS = {
    GPU_NODE: [
        # in a placement group the slots come under the group's resource names
        {"worker_id": ACTOR_WORKER, "pid": 11, "actor_id": ACTOR, "job_id": "01000000",
         "used": {"GPU_group_0_" + "f" * 36: [2, 3], "GPU_group_" + "f" * 36: [2, 3], "CPU": [0]}},
        {"worker_id": TASK_WORKER, "pid": 12, "actor_id": "f" * 32, "job_id": "01000000", "used": {"GPU": [5]}},
        {"worker_id": "8" * 56, "pid": 13, "actor_id": "f" * 32, "job_id": "01000000", "used": {"CPU": [1]}},
    ],
    TRN_NODE: [{"worker_id": "7" * 56, "pid": 14, "actor_id": "6" * 24 + "01000000", "job_id": "01000000", "used": {"neuron_cores": [4, 5, 6, 7, 9]}}],
}
ACTORS = [{"actor_id": ACTOR, "class_name": "Trainer", "name": "trainer-0", "state": "ALIVE", "job_id": "01000000", "node_id": GPU_NODE,
           "pid": 11, "required_resources": {"GPU": 2.0, "CPU": 1.0}, "placement_group_id": "f" * 36},
          {"actor_id": "5" * 24 + "01000000", "class_name": "Idle", "name": "", "state": "ALIVE", "job_id": "01000000",
           "node_id": GPU_NODE, "pid": 15, "required_resources": {"CPU": 1.0}, "placement_group_id": None}]
TASKS = [{"task_id": TASK, "name": "score", "func_or_class_name": "score", "type": "NORMAL_TASK", "state": "RUNNING", "job_id": "01000000",
          "node_id": GPU_NODE, "worker_id": TASK_WORKER, "worker_pid": 12, "required_resources": {"GPU": 1.0}, "placement_group_id": None,
          "actor_id": None},
         {"task_id": "4" * 40 + "01000000", "name": "Trainer.step", "func_or_class_name": "Trainer.step", "type": "ACTOR_TASK",
          "state": "RUNNING", "job_id": "01000000", "node_id": GPU_NODE, "worker_id": ACTOR_WORKER, "worker_pid": 11,
          "required_resources": {}, "placement_group_id": None, "actor_id": ACTOR}]


def test_holders_join_worker_slots_and_state_rows():
    holders = {h.id: h for h in merge_holders(WORKERS, ACTORS, TASKS, ["GPU", "TPU", "neuron_cores"])}
    assert set(holders) == {ACTOR, TASK, "6" * 24 + "01000000"}  # CPU-only workers and actors hold no accelerator
    actor = holders[ACTOR]
    assert (actor.kind, actor.name, actor.slots, actor.placement_group_id, actor.pid) == ("actor", "trainer-0", {"GPU": [2, 3]}, "f" * 36, 11)
    task = holders[TASK]
    assert (task.kind, task.name, task.slots, task.worker_id, task.resources) == ("task", "score", {"GPU": [5]}, TASK_WORKER, {"GPU": 1.0})
    # only the state API answered: counts, but no device ids
    only_state = {h.id: h for h in merge_holders(None, ACTORS, TASKS, ["GPU"])}
    assert only_state[ACTOR].slots is None and only_state[ACTOR].resources == {"GPU": 2.0}
    # only the raylets answered: device ids, no names
    only_stats = {h.id: h for h in merge_holders(WORKERS, None, None, ["GPU"])}
    assert only_stats[ACTOR].name == "" and only_stats[TASK_WORKER].slots == {"GPU": [5]}


def test_document_occupancy_device_states_and_links(inventory):
    report = HolderReport(merge_holders(WORKERS, ACTORS, TASKS, ["GPU", "TPU", "neuron_cores"]))
    doc = build_document(inventory, holders=report, ray_dashboard="http://10.0.0.1:8265")
    gpu = next(n for n in doc["nodes"] if n["node_id"] == GPU_NODE)
    # 2 GPUs reserved by the placement group (the actor inside it uses them), 1 used by the task outside
    assert gpu["occupancy"] == {"GPU": {"total": 8.0, "reserved": 2.0, "used": 1.0, "free": 5.0}}
    states = [d["state"] for d in gpu["devices"]["nvidia_gpu"]]
    assert states == ["missing", "free", "held", "held", "free", "held", "free", "free"]
    assert gpu["devices"]["nvidia_gpu"][2]["holders"] == [ACTOR] and gpu["holders"] == sorted(gpu["holders"])
    trn = next(n for n in doc["nodes"] if n["node_id"] == TRN_NODE)
    held = [d["index"] for d in trn["devices"]["neuron"] if d["state"] == "held"]
    assert held == [1, 2]  # NeuronCores 4-7 are device 1, core 9 is on device 2 (4 cores per device)
    by_id = {h["id"]: h for h in doc["holders"]}
    assert by_id[ACTOR]["devices"] == [["nvidia_gpu", 2], ["nvidia_gpu", 3]] and by_id[ACTOR]["ray_dashboard"] == f"#/actors/{ACTOR}"
    assert by_id[TASK]["ray_dashboard"] == f"#/jobs/01000000/tasks/{TASK}"
    assert gpu["ray_dashboard"] == f"#/cluster/nodes/{GPU_NODE}" and doc["ray_dashboard"] == "http://10.0.0.1:8265"
    assert doc["summary"]["devices_missing"] == 1 and doc["summary"]["devices_held"] == 5 and doc["summary"]["holders"] == 3
    assert gpu["advice"][0]["cause"] == "device-gone" and gpu["advice"][0]["fix"] == problems.lookup("device-gone").hint
    assert doc["label_keys"]["fabric_worker"] == "rayaccel.io/fabric-worker"
    json.dumps(doc, allow_nan=False)


# Ray's reporter agent text for one H100 node (metric and label names of
# ray/dashboard/modules/reporter/reporter_agent.py, Ray 2.60; GPU memory in MiB).
def _ray_text(uuids, util, used_mib):
    lines = ["# HELP ray_node_gpus_utilization Total GPUs usage on a ray node", "# TYPE ray_node_gpus_utilization gauge"]
    for i, u in enumerate(uuids):
        tags = f'GpuDeviceName="NVIDIA H100 80GB HBM3",GpuIndex="{i}",GpuUuid="{u}",IsHeadNode="false",SessionName="s",ip="127.0.0.1"'
        lines += [f"ray_node_gpus_utilization{{{tags}}} {util + i}", f"ray_node_gram_used{{{tags}}} {used_mib}",
                  f"ray_node_gram_available{{{tags}}} {81559 - used_mib}"]
    lines += ['ray_rayaccel_placements_total{outcome="ready",level="fabric",step="0"} 3', "not a metric line {", "ray_node_cpu_count 8"]
    return "\n".join(lines) + "\n"


class _Exporter(BaseHTTPRequestHandler):
    texts: list[str] = []

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        body = self.texts.pop(0).encode() if self.texts else b""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_metrics_scraped_from_a_loopback_exporter(inventory):
    desc = next(n for n in inventory.nodes if n.node_id == GPU_NODE).inventory.descriptions[0]
    uuids = [d.id for d in desc.devices]
    _Exporter.texts = [_ray_text(uuids, 10, 1024), _ray_text(uuids, 30, 2048)]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        history = MetricsHistory(keep=5)
        closed = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
        dead = f"http://127.0.0.1:{closed.server_address[1]}/metrics"
        closed.server_close()  # a node whose exporter does not answer
        for _ in range(2):
            history.gather({GPU_NODE: f"http://127.0.0.1:{httpd.server_address[1]}/metrics", TRN_NODE: dead})
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert set(history.errors) == {TRN_NODE} and history.nodes_scraped == 1
    doc = build_document(inventory, metrics=history)
    gpu = next(n for n in doc["nodes"] if n["node_id"] == GPU_NODE)["devices"]["nvidia_gpu"]
    assert [d["utilization"] for d in gpu] == [30.0 + i for i in range(8)]
    assert gpu[3]["memory_used"] == 2048 * 2**20 and gpu[3]["memory_total"] == 81559 * 2**20
    assert [v for _t, v in gpu[3]["history"]["utilization"]] == [13.0, 33.0]
    assert [v for _t, v in doc["project_metrics"]["rayaccel_placements"]["ready"]] == [3.0, 3.0]
    assert doc["sources"]["metrics"]["errors"][TRN_NODE].startswith("URLError")


def test_gpu_metrics_follow_the_uuid_not_the_nvml_index():
    text = 'ray_node_gpus_utilization{GpuIndex="0",GpuUuid="GPU-b"} 5\nray_node_gpus_utilization{GpuIndex="1",GpuUuid="GPU-a"} 7\n'
    samples = device_samples(parse_exposition(text))
    assert [(s.index, s.uuid, s.utilization) for s in samples] == [(0, "GPU-b", 5.0), (1, "GPU-a", 7.0)]
    assert list(parse_exposition('x{a="q\\"z\\\\",b="n"} 1\n')) == [("x", {"a": 'q"z\\', "b": "n"}, 1.0)]


@pytest.mark.parametrize("snapshot", [p.parent for p in sorted(HOSTS.glob("*/*/expected.json"))], ids=lambda p: p.name)
def test_pcie_paths_agree_with_the_backends_nearest_nics(snapshot):
    host = open_host(snapshot)
    inventory = discover(host)
    paths = pcie_paths(host, inventory)
    for desc in inventory.descriptions:
        if desc.backend not in paths:
            assert not any(d.pci_address for d in desc.devices)
            continue
        p = paths[desc.backend]
        if {n.pci_address for n in desc.nics} & {d.pci_address for d in desc.devices}:
            continue  # NICs on the devices themselves (Gaudi's scale-out ports): nearest by construction
        assert len(p["device_nic"]) == len(desc.devices) and all(len(r) == len(desc.nics) for r in p["device_nic"])
        for i, dev in enumerate(desc.devices):
            row = [c for c in p["device_nic"][i] if c is not None]
            if not dev.nics:
                continue
            best = min(PATH_CLASSES.index(c) for c in row)
            nearest = {n.nic for n in dev.nics}
            assert {n.path for n in dev.nics} == {PATH_CLASSES[best]}
            assert nearest == {desc.nics[j].name for j, c in enumerate(p["device_nic"][i]) if c == PATH_CLASSES[best]}
            assert p["devices"][i]["switch"] == dev.pcie_switch
        for i in range(len(desc.devices)):
            assert p["device_device"][i][i] is None
            assert all(p["device_device"][i][k] == p["device_device"][k][i] for k in range(len(desc.devices)))


@pytest.mark.parametrize("code,reason,backend,stage", [
    ("metadata-timeout", "MetadataTimeout: GCE metadata did not answer within 1.0s", "tpu", "describe"),
    ("metadata-timeout", "GCE metadata: location not asked, the server did not answer or rate-limited", "tpu", None),
    ("file-missing", "/proc/driver/nvidia/version: no such file", "nvidia_gpu", None),
    ("tool-missing", "neuron-ls: not installed", "neuron", None),
    ("backend-load", "ImportError: No module named pynvml", "nvidia_gpu", "load"),
    ("device-gone", "accelerator 0000:1a:00.0 (0x10de:0x2330) disappeared after the node started", "", None),
    ("device-added", "rdma nic mlx5_4 appeared after the node started; Ray does not count it", "", None),
    ("probe-failed", "inventory probe failed: GetTimeoutError: timed out", "", None),
    ("start-degraded", "started with rayaccel.io/discovery=degraded (see the node's ray start log)", "", None),
])
def test_every_coded_problem_gets_plain_words_and_a_fix(code, reason, backend, stage):
    problem = Problem(code=code, message=reason, backend=backend, stage=stage, error="Error" if stage else None)
    finding = finding_of(problem)
    assert finding.cause == code and finding.fix == problems.lookup(code).hint and reason in finding.message
    assert finding.severity in problems.SEVERITIES and finding.declared


@pytest.mark.parametrize("code", ["file-missing", "metadata-timeout", "sku-unknown", "tool-failed"])
def test_rewording_a_message_does_not_change_the_diagnosis(code):
    """The cause comes from the code: two wordings (one that reads like another cause) explain alike."""
    plain = finding_of(Problem(code=code, message="something could not be read", backend="acme_npu"))
    misleading = finding_of(Problem(code=code, message="HTTP 429 no such file not installed timed out", backend="acme_npu"))
    assert (plain.cause, plain.severity, plain.fix) == (misleading.cause, misleading.severity, misleading.fix) == (
        code, problems.lookup(code).severity, problems.lookup(code).hint)
