"""Snapshots that reproduce public ``nvidia-smi topo -m`` captures, checked cell by cell against
the capture (written out here from the public page), not against the project's own goldens.

* GB200 NVL72 tray, https://github.com/sgl-project/sglang/issues/11208 (driver 570.172.08).
* 8x B200 with GPU2's NVLinks down, https://github.com/vllm-project/vllm/issues/16336.
"""

from __future__ import annotations

import json

import pytest

from ray_accel_ext.cluster.topology import pcie_paths
from ray_accel_ext.host import open_host
from ray_accel_ext.node.discovery import discover
from ray_accel_ext.transport import plan_transport
from tests.support.paths import HOSTS
from tests.transport.conftest import domain

GB200 = HOSTS / "nvidia_gpu" / "gb200-nvl72-tray-nics"

# sglang#11208, the GPU rows: GPU x GPU, GPU x NIC0..NIC5, CPU Affinity, GPU NUMA ID.
GB200_CAPTURE = """
GPU0     X      NV18    NV18    NV18    SYS     SYS     SYS     SYS     SYS     SYS     0-71    2
GPU1    NV18     X      NV18    NV18    SYS     SYS     SYS     SYS     SYS     SYS     0-71    10
GPU2    NV18    NV18     X      NV18    SYS     SYS     SYS     SYS     SYS     SYS     72-143  18
GPU3    NV18    NV18    NV18     X      SYS     SYS     SYS     SYS     SYS     SYS     72-143  26
"""


def _rows(capture: str) -> list[list[str]]:
    return [line.split()[1:] for line in capture.strip().splitlines()]


def _cpus(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _gpu_cell(desc, a: int, b: int) -> str:
    if a == b:
        return "X"
    lanes = [l.lanes for l in desc.links if {l.a, l.b} == {a, b} and l.peer_worker is None]
    return f"NV{sum(lanes)}" if lanes else "?"


def test_gb200_tray_matrix_equals_the_capture():
    host = open_host(str(GB200))
    inventory = discover(host)
    (desc,) = inventory.descriptions
    paths = pcie_paths(host, inventory)["nvidia_gpu"]
    rows = _rows(GB200_CAPTURE)
    assert len(desc.devices) == len(rows) and len(desc.nics) == 6
    for i, (dev, row) in enumerate(zip(desc.devices, rows)):
        gpus, nics, (cpus, gpu_numa) = row[:4], row[4:10], row[10:]
        assert [_gpu_cell(desc, i, j) for j in range(4)] == gpus
        assert paths["device_nic"][i] == nics
        # The nearest-NIC answer: every NIC at the capture's class (all SYS, none nearer).
        assert sorted((p.nic, p.path) for p in dev.nics) == sorted(zip((n.name for n in desc.nics), nics))
        assert list(dev.cpus) == _cpus(cpus)
        assert dev.memory_numa_node == int(gpu_numa)
    # Other GB200 captures: two NICs of one Grace are SYS as well (different root complexes).
    assert {c for row in paths["nic_nic"] for c in row if c is not None} == {"SYS"}
    assert desc.attributes["nvidia.rayaccel.io/cpu-link"] == "c2c" and not inventory.degraded


def test_gb200_tray_numa_layout_has_the_captures_34_nodes():
    """The capture's NUMA Affinity column names nodes up to 33; GPU memory nodes hold no CPU."""
    root = GB200 / "rootfs/sys/devices/system/node"
    nodes = {int(p.name[4:]): p.joinpath("cpulist").read_text().strip() for p in root.glob("node*")}
    assert sorted(nodes) == list(range(34))
    assert (nodes[0], nodes[1]) == ("0-71", "72-143")
    assert all(nodes[n] == "" for n in (2, 10, 18, 26))


def test_gb200_transport_plan_follows_nccls_c2c_rule():
    """NCCL: a NIC on the GPU's Grace is P2C (C2C to the CPU, then PHB) and GPUDirect RDMA is on
    at P2C with NCCL_NET_GDR_C2C=1 (NVIDIA/nccl src/graph/paths.cc), though nvidia-smi says SYS."""
    plan = plan_transport([domain("nvidia_gpu/gb200-nvl72-tray-nics", 1)])
    by_gpu = {r.units[0]: r.env for r in plan.ranks}
    for gpu in (0, 1):
        assert by_gpu[gpu]["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1,mlx5_4"
        assert by_gpu[gpu]["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1,mlx5_4:1"
    for gpu in (2, 3):
        assert by_gpu[gpu]["NCCL_IB_HCA"] == "=mlx5_2,mlx5_3,mlx5_5"
        assert by_gpu[gpu]["UCX_NET_DEVICES"] == "mlx5_2:1,mlx5_3:1,mlx5_5:1"
    for env in by_gpu.values():
        assert env["NCCL_NET_GDR_C2C"] == "1" and "NCCL_NET_GDR_LEVEL" not in env


def test_gb200_golden_values_are_the_captures():
    expected = json.loads((GB200 / "expected.json").read_text())
    (desc,) = expected["descriptions"]
    rows = _rows(GB200_CAPTURE)
    assert [d["memory_numa_node"] for d in desc["devices"]] == [int(r[11]) for r in rows]
    assert [sorted({p["path"] for p in d["nics"]}) for d in desc["devices"]] == [sorted(set(r[4:10])) for r in rows]


@pytest.mark.parametrize("rel", ["gb200-nvl72-tray", "h100-sxm-8gpu-dgx"])
def test_hosts_without_c2c_keep_the_pcie_rule(rel):
    """No NVML C2C links recorded: no cpu-link attribute, nvidia-smi's PCIe classes as before."""
    inventory = discover(open_host(str(HOSTS / "nvidia_gpu" / rel)))
    (desc,) = inventory.descriptions
    assert "nvidia.rayaccel.io/cpu-link" not in desc.attributes
    assert all(d.memory_numa_node is None for d in desc.devices)


B200 = HOSTS / "nvidia_gpu" / "b200-8gpu-nvlink-down"
# vllm#16336, GPU rows GPU0..GPU5 as the issue prints them (GPU x GPU, GPU x NIC0..NIC11, CPU
# Affinity); GPU6 is cut after NIC5 in the public excerpt, GPU7 is not shown.
B200_CAPTURE = """
GPU0     X      NV18    NODE    NV18    NV18    NV18    NV18    NV18    PXB     NODE    NODE    NODE    SYS     SYS     SYS     SYS     NODE    NODE    SYS     SYS     0-55,112-167
GPU1    NV18     X      NODE    NV18    NV18    NV18    NV18    NV18    NODE    PXB     NODE    NODE    SYS     SYS     SYS     SYS     NODE    NODE    SYS     SYS     0-55,112-167
GPU2    NODE    NODE     X      NODE    SYS     SYS     SYS     SYS     NODE    NODE    PXB     NODE    SYS     SYS     SYS     SYS     NODE    NODE    SYS     SYS     0-55,112-167
GPU3    NV18    NV18    NODE     X      NV18    NV18    NV18    NV18    NODE    NODE    NODE    PXB     SYS     SYS     SYS     SYS     NODE    NODE    SYS     SYS     0-55,112-167
GPU4    NV18    NV18    SYS     NV18     X      NV18    NV18    NV18    SYS     SYS     SYS     SYS     PXB     NODE    NODE    NODE    SYS     SYS     NODE    NODE    56-111,168-223
GPU5    NV18    NV18    SYS     NV18    NV18     X      NV18    NV18    SYS     SYS     SYS     SYS     NODE    PXB     NODE    NODE    SYS     SYS     NODE    NODE    56-111,168-223
GPU6    NV18    NV18    SYS     NV18    NV18    NV18     X      NV18    SYS     SYS     SYS     SYS     NODE    NODE
"""


def test_b200_with_gpu2_nvlinks_down_matrix_equals_the_capture():
    host = open_host(str(B200))
    inventory = discover(host)
    (desc,) = inventory.descriptions
    paths = pcie_paths(host, inventory)["nvidia_gpu"]
    column = {n.name: i for i, n in enumerate(desc.nics)}  # NICk is mlx5_k (the capture's legend order)
    for i, row in enumerate(_rows(B200_CAPTURE)):
        gpu_cells = [_gpu_cell(desc, i, j) for j in range(8)]
        # Where NVML lists no link, nvidia-smi prints the PCIe class: our matrix's device_device.
        gpu_cells = [paths["device_device"][i][j] if c == "?" else c for j, c in enumerate(gpu_cells)]
        assert gpu_cells == row[:8]
        nics = [paths["device_nic"][i][column[f"mlx5_{k}"]] for k in range(len(row[8:20]))]
        assert nics == row[8:20]
        if len(row) <= 20:
            continue  # the cut row: no more cells to compare
        assert list(desc.devices[i].cpus) == _cpus(row[20])
        # The nearest NIC: the capture's best class in the row, and the NIC that has it.
        best = min(row[8:20], key=["PIX", "PXB", "PHB", "NODE", "SYS"].index)
        assert [(p.nic, p.path) for p in desc.devices[i].nics] == [(f"mlx5_{row[8:20].index(best)}", best)]


def test_b200_golden_is_the_captures_published_view():
    """The golden says what the capture shows: NVLink among the other seven GPUs, none at GPU 2,
    and so a degraded node with one device of degraded links."""
    expected = json.loads((B200 / "expected.json").read_text())
    (desc,) = expected["descriptions"]
    linked = {(l["a"], l["b"]) for l in desc["links"]}
    assert not any(2 in pair for pair in linked) and len(linked) == 21  # C(7, 2): GPU2 has none
    assert expected["ray"]["labels"]["rayaccel.io/discovery"] == "degraded"
    assert expected["ray"]["labels"]["rayaccel.io/degraded-links"] == "1"


def test_b200_gpu_with_every_nvlink_down_is_a_problem():
    """The capture's GPU 2 shows every NVLink down: a coded link-down problem naming it, the node
    degraded and the per-node count of devices with degraded links (SKU database: 18 on a B200)."""
    from ray_accel_ext.node.adapter import to_ray_node

    inventory = discover(open_host(str(B200)))
    assert inventory.degraded
    down = [p for p in inventory.all_problems() if p.code == "link-down"]
    assert len(down) == 1 and "GPU 2" in down[0].message and "0 of its 18 NVLinks" in down[0].message
    labels = to_ray_node(inventory).labels
    assert labels["rayaccel.io/discovery"] == "degraded" and labels["rayaccel.io/degraded-links"] == "1"
