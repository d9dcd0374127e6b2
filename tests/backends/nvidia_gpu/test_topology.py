"""8x H100 snapshot: the GPU x NIC path classes match the DGX H100 ``nvidia-smi topo -m`` matrix in
its README, and the NVLink/NUMA facts match the machine it stands for."""

from __future__ import annotations

import re

import pytest

from ray_accel_ext.host import open_host
from ray_accel_ext.hw.nics import path_class
from ray_accel_ext.hw.pci import format_cpulist, read_function
from ray_accel_ext.model import PATH_CLASSES
from ray_accel_ext.node.discovery import discover
from tests.support.paths import HOSTS

SNAPSHOT = HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx"


def readme_matrix() -> tuple[list[str], dict[str, list[str]], dict[str, str]]:
    """(NIC columns, GPU rows of path classes + CPU/NUMA cells, NIC legend) from the README."""
    text = (SNAPSHOT / "README.md").read_text()
    block = text.split("<!-- topo-matrix -->", 1)[1].split("```", 2)[1]
    lines = block.strip("\n").splitlines()
    header = lines[0].split("\t")[1:]
    rows = {}
    for line in lines[1:]:
        if line.startswith("GPU"):
            cells = line.split("\t")
            rows[cells[0]] = cells[1:]
    legend = dict(re.findall(r"^\s+(NIC\d+): (\S+)$", block, re.M))
    return header, rows, legend


@pytest.fixture(scope="module")
def description():
    inventory = discover(open_host(SNAPSHOT))
    assert not inventory.degraded, inventory.reasons()
    (desc,) = inventory.descriptions
    return desc


def test_gpu_nic_matrix_matches_readme(description):
    header, rows, legend = readme_matrix()
    nic_cols = [c for c in header if c.startswith("NIC")]
    host = open_host(SNAPSHOT)
    nic_by_name = {n.name: n for n in description.nics}
    assert sorted(nic_by_name) == sorted(legend[c] for c in nic_cols)
    computed = {}
    for dev in description.devices:
        gpu_fn = read_function(host, dev.pci_address)
        computed[f"GPU{dev.index}"] = [
            path_class(gpu_fn, read_function(host, nic_by_name[legend[c]].pci_address)) for c in nic_cols
        ]
    expected = {gpu: cells[: len(nic_cols)] for gpu, cells in rows.items()}
    assert computed == expected


def test_nearest_nics_numa_and_cpus_follow_the_matrix(description):
    header, rows, legend = readme_matrix()
    nic_cols = [c for c in header if c.startswith("NIC")]
    for dev in description.devices:
        cells = rows[f"GPU{dev.index}"]
        classes = cells[: len(nic_cols)]
        best = min(classes, key=PATH_CLASSES.index)
        want = [(legend[c], best) for c, cls in zip(nic_cols, classes) if cls == best]
        assert [(n.nic, n.path) for n in dev.nics] == want
        cpu_cell, numa_cell = cells[len(nic_cols)], cells[len(nic_cols) + 1]
        assert format_cpulist(dev.cpus) == cpu_cell
        assert dev.numa_node == int(numa_cell)


def test_nvlink_all_to_all_through_nvswitch(description):
    n = len(description.devices)
    assert n == 8  # the four NVSwitch functions (class 0x068000) are not GPUs
    pairs = {(l.a, l.b) for l in description.links}
    assert pairs == {(a, b) for a in range(n) for b in range(a + 1, n)}
    assert {(l.kind, l.lanes) for l in description.links} == {("nvlink4", 18)}
    assert description.interconnect == "nvlink4"


def test_devices_in_pci_order_with_switch_groups(description):
    addresses = [d.pci_address for d in description.devices]
    assert addresses == sorted(addresses)
    switches = [d.pcie_switch for d in description.devices]
    # GPU pairs (0,1), (2,3), ... share a parent PEX switch, different pairs do not.
    assert all(switches[2 * k] == switches[2 * k + 1] for k in range(4))
    assert len(set(switches)) == 4
    assert all(d.id.startswith("GPU-") for d in description.devices)
