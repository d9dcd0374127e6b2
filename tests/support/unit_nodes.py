"""The hosts of the one simulated cluster that the Ray modules of ``tests/unit`` share
(``tests/unit/conftest.py``), each a copy or variant of a recorded snapshot:

- ``h100`` (the head, 2 CPUs): the 8x H100 DGX snapshot;
- ``damaged``: a copy of it with corrupt, missing and unreadable sysfs files and a broken symlink
  (:func:`damaged_copy`);
- ``seed4``, ``seed3``: the H100 snapshot with Ray's own Gaudi and Ascend managers finding devices
  through the vendor runtimes' Python calls (``ray_vendor_libs``), on two hash seeds
  (:func:`vendor_env`);
- ``mixed`` (2 CPUs): the H100 snapshot with the Acme snapshot's four NPUs added (:func:`with_acme`);
- ``acme``: the Acme snapshot alone (``tests/downstream/ray_accel_ext_acme``).

Tests pin their work to their own node with the ``sim.rayaccel.io/node`` label
(:data:`ray_accel_ext.testing.cluster.NODE_NAME_LABEL`), so what another module's node offers never
changes where a task lands.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .paths import HOSTS, REPO, TESTS

H100 = HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
ACME = TESTS / "downstream" / "ray_accel_ext_acme" / "tests" / "hosts" / "acme-4npu"
VENDOR_LIBS = REPO / "tests" / "support" / "ray_vendor_libs"
SEED_NODES = ("4", "3")  # 4 puts GPU before HPU and NPU in Ray's set, 3 puts it before HPU (Ray 2.60, CPython 3.11)
DAMAGED_FILES = {
    # GPU 2's NUMA node holds garbage, GPU 3 lost its local_cpulist, GPU 5's sysfs link dangles.
    "corrupt": "0000:3c:00.0/numa_node",
    "missing": "0000:40:00.0/local_cpulist",
    "broken_link": "0000:a0:00.0",
}


def damaged_copy(dest: Path) -> Path:
    """A copy of the H100 snapshot at ``dest`` with :data:`DAMAGED_FILES` damaged."""
    shutil.copytree(H100, dest, symlinks=True)
    devices = dest / "rootfs/sys/bus/pci/devices"
    with open(os.path.realpath(devices / DAMAGED_FILES["corrupt"]), "w") as fh:
        fh.write("zero\n")
    os.remove(os.path.realpath(devices / DAMAGED_FILES["missing"]))
    link = devices / DAMAGED_FILES["broken_link"]
    os.remove(link)
    os.symlink("../../../devices/pci0000:97/gone/0000:a0:00.0", link)
    (dest / "expected.json").unlink(missing_ok=True)
    return dest


def with_acme(base: Path, dest: Path) -> Path:
    """``base`` copied to ``dest`` with the Acme snapshot's four NPUs added under /sys/class/acme_npu."""
    shutil.copytree(base, dest, symlinks=True)
    shutil.copytree(ACME / "rootfs" / "sys" / "class" / "acme_npu", dest / "rootfs" / "sys" / "class" / "acme_npu")
    (dest / "expected.json").unlink(missing_ok=True)
    return dest


def vendor_env(seed: str) -> dict[str, str]:
    """This process's environment with the vendor runtimes' stand-ins importable, 4 HPUs and 8 NPUs
    for them to report, and ``PYTHONHASHSEED=seed``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_ACCEL"))}
    paths = [str(VENDOR_LIBS), str(REPO), env.get("PYTHONPATH", "")]
    env.update({"PYTHONPATH": os.pathsep.join(p for p in paths if p), "PYTHONHASHSEED": seed,
                "RAY_ACCEL_TEST_HPU_COUNT": "4", "RAY_ACCEL_TEST_NPU_COUNT": "8"})
    return env


def node_specs(scratch: Path) -> list[tuple[Path, dict]]:
    """``SimulatedCluster.add_nodes`` specs of the shared cluster, the head first; copies go under
    ``scratch``."""
    specs = [(H100, {"name": "h100", "num_cpus": 2}),
             (damaged_copy(scratch / "h100-damaged"), {"name": "damaged"})]
    for seed in SEED_NODES:
        env = {k: v for k, v in vendor_env(seed).items()
               if k in ("PYTHONPATH", "PYTHONHASHSEED") or k.startswith("RAY_ACCEL_TEST")}
        specs.append((H100, {"name": f"seed{seed}", "env": env}))
    specs.append((with_acme(H100, scratch / "h100-acme"), {"name": "mixed", "num_cpus": 2}))
    specs.append((ACME, {"name": "acme"}))
    return specs
