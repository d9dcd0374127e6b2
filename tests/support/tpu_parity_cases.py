"""Inputs for the Ray parity test: TPU hosts built on the fly, one per input class Ray 2.60's own
``python/ray/tests/accelerators/test_tpu.py`` covers, and more.

* every generation's pod types on 1-, 4- and 8-chip hosts, through GKE variables and through GCE
  metadata (Ray's ``test_autodetect_tpu_accelerator_type``, ``test_worker_count``,
  ``test_tpu_pod_detect_and_configure_worker``);
* partial identity: a worker id alone (``test_get_current_node_tpu_worker_id``), a slice name alone
  (``test_get_tpu_unique_id``), a type alone, a type without worker id or without name;
* malformed identity: Ray's ``test_autodetect_invalid_type`` strings, an upper-case type, a half
  chip, an unknown generation, a worker id that is no number, a topology that does not parse;
* VFIO layouts: a BlueField function on vfio-pci (``test_autodetect_num_tpus_vfio_ignores_non_tpu_vendor``),
  mixed groups (``..._mixed_groups``), a group without its sysfs directory
  (``..._missing_sysfs_fails_closed``), a gVNIC on vfio-pci, TPU7x's two functions per chip, and the
  DRM ``/dev/accel/`` directory (``test_autodetect_num_tpus_accel_ignores_blackwell_directory``).

Machines follow hardware.md 1.4, 2.7, 4.1-4.4 (PCI ids, device nodes, GKE variables, metadata
formats). Each case is (id, facts, build(dir)); ``facts`` says what the machine is, for the
difference rules of the test.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.paths import HOSTS

GOOGLE = "0x1ae0"


def _builder():
    spec = importlib.util.spec_from_file_location("tpu_build_snapshots", HOSTS / "tpu" / "build_snapshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD = _builder()

# generation -> (PCI device, subsystem device, device nodes, PCI functions per chip, cores per chip)
GENS: dict[str, tuple[str, str | None, str, int, int]] = {
    "v2": ("0x0027", "0x004e", "accel", 1, 2),
    "v3": ("0x0027", "0x004f", "accel", 1, 2),
    "v4": ("0x005e", None, "accel", 1, 2),
    "v5p": ("0x0062", None, "vfio", 1, 2),
    "v5litepod": ("0x0063", None, "vfio", 1, 1),
    "v6e": ("0x006f", None, "vfio", 1, 1),
    "tpu7x": ("0x0076", None, "vfio", 2, 2),
}
# (pod type, topology) per generation: single-host and multi-host shapes (hardware.md 4.3/4.4).
POD_TYPES: dict[str, list[tuple[str, str]]] = {
    "v2": [("v2-8", "2x2"), ("v2-32", "4x4")],
    "v3": [("v3-8", "2x2"), ("v3-32", "4x4")],
    "v4": [("v4-8", "2x2x1"), ("v4-16", "2x2x2"), ("v4-32", "2x2x4")],
    "v5p": [("v5p-8", "2x2x1"), ("v5p-16", "2x2x2"), ("v5p-128", "4x4x4")],
    "v5litepod": [("v5litepod-1", "1x1"), ("v5litepod-4", "2x2"), ("v5litepod-8", "2x4"), ("v5litepod-16", "4x4"),
                  ("v5litepod-32", "4x8")],
    "v6e": [("v6e-1", "1x1"), ("v6e-4", "2x2"), ("v6e-8", "2x4"), ("v6e-16", "4x4"), ("v6e-256", "16x16")],
    "tpu7x": [("tpu7x-2", "1x1x1"), ("tpu7x-8", "2x2x1"), ("tpu7x-16", "2x2x2")],
}


@dataclass
class Case:
    id: str
    gen: str | None              # generation of the chips on the host (None: no TPU)
    chips: int                   # TPU chips on the host
    hostname: str
    env: dict[str, str] = field(default_factory=dict)
    attributes: dict[str, str] = field(default_factory=dict)   # GCE instance attributes
    extra_google_vfio: int = 0   # non-TPU Google functions bound to vfio-pci (gVNIC for DPDK)
    other_vfio: int = 0          # other vendors' functions on vfio-pci (BlueField SoC)
    groups_without_sysfs: int = 0  # TPU functions whose IOMMU group has no sysfs directory
    drm_accel_dir: bool = False

    def build(self, base: Path) -> Path:
        tree = BUILD.Tree(self.id, base=base).gce(self.hostname)
        group = 0
        if self.gen is not None:
            device, subsystem, nodes, fns, _ = GENS[self.gen]
            sub = (GOOGLE, subsystem or "0x0000")
            for chip in range(self.chips):
                numa = 0 if chip < max(1, self.chips // 2) else 1
                for fn in range(fns):
                    vfio = nodes == "vfio"
                    bdf = f"0000:{0xc0 + chip:02x}:02.{fn}" if fns > 1 else f"0000:00:{4 + chip:02x}.0"
                    tree.pci(bdf, GOOGLE, device, "0x120000", numa=numa, cpus="0-15" if numa == 0 else "16-31",
                             subsystem=sub, iommu_group=group if vfio else None, vfio=vfio)
                    if vfio and chip < self.groups_without_sysfs:
                        _drop_group_dir(tree.root, group)
                    group += 1
            if nodes == "accel":
                tree.accel(self.chips)
        for i in range(self.extra_google_vfio):
            tree.pci(f"0000:01:{i:02x}.0", GOOGLE, "0x0042", "0x020000", numa=0, iommu_group=100 + i, vfio=True)
        for i in range(self.other_vfio):
            tree.pci(f"0000:02:{i:02x}.2", "0x15b3", "0xc2d5", "0x088000", numa=0, subsystem=("0x15b3", "0x0051"),
                     iommu_group=200 + i, vfio=True)
        if self.drm_accel_dir:
            BUILD._write(tree.root / "dev/accel/accel0", "")
        gce = {f"instance/attributes/{k}": v for k, v in self.attributes.items()}
        gce["instance/zone"] = "projects/1/zones/us-east5-b"
        tree.files(env=self.env, metadata={"gce": gce}, readme=f"parity case {self.id}")
        return tree.dir

    def type_chips(self) -> int | None:
        text = self.env.get("TPU_ACCELERATOR_TYPE") or self.attributes.get("accelerator-type") or ""
        name, _, n = text.partition("-")
        gen = name.replace("tpu", "v", 1) if name.startswith("tpu") else name
        gen = {"v7x": "tpu7x"}.get(gen, gen)
        key = next((g for g in GENS if g == gen or (g == "tpu7x" and gen == "v7x")), None)
        if key is None or not n.isdigit():
            return None
        return int(n) // GENS[key][4]


def _drop_group_dir(root: Path, group: int) -> None:
    import shutil

    shutil.rmtree(root / "sys/kernel/iommu_groups" / str(group))


def _tpu_env(**values: str) -> str:
    return "".join(f"{k}: '{v}'\n" for k, v in sorted(values.items()))


def _identity(path: str, acc: str | None, topo: str | None, worker: str | None, name: str | None,
              hostnames: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(env, metadata attributes) carrying this identity through GKE variables or GCE metadata."""
    if path == "gke":
        env = {k: v for k, v in (("TPU_ACCELERATOR_TYPE", acc), ("TPU_TOPOLOGY", topo), ("TPU_WORKER_ID", worker),
                                 ("TPU_NAME", name), ("TPU_WORKER_HOSTNAMES", hostnames)) if v is not None}
        return env, {}
    attrs = {k: v for k, v in (("accelerator-type", acc), ("agent-worker-number", worker), ("instance-id", name)) if v is not None}
    if topo is not None:
        attrs["tpu-env"] = _tpu_env(TOPOLOGY=topo, **({"ACCELERATOR_TYPE": acc} if acc else {}))
    if hostnames is not None:
        attrs["worker-network-endpoints"] = ",".join(f"w-{i}:uid:{h}" for i, h in enumerate(hostnames.split(",")))
    return {}, attrs


def cases() -> Iterator[Case]:
    for gen, types in POD_TYPES.items():
        for acc, topo in types:
            for chips in (1, 4, 8):
                for path in ("gke", "gce"):
                    env, attrs = _identity(path, acc, topo, "0", f"{acc}-slice")
                    yield Case(f"{path}-{acc}-on-{chips}chip-host", gen, chips, f"host-{acc}-{chips}", env, attrs)
    # A worker that is not worker 0, on a multi-host slice.
    for path in ("gke", "gce"):
        env, attrs = _identity(path, "v6e-16", "4x4", "3", "slice-w3")
        yield Case(f"{path}-v6e-16-worker3", "v6e", 4, "host-w3", env, attrs)
    yield from _partial()
    yield from _malformed()
    yield from _vfio()


def _partial() -> Iterator[Case]:
    variants = {
        "worker-id-only": (None, None, "0", None, None),
        "worker-id-1-only": (None, None, "1", None, None),
        "name-only": (None, None, None, "my-tpu", None),
        "type-only-single-host": ("v6e-4", None, None, None, None),
        "type-only-multi-host": ("v6e-16", None, None, None, None),
        "topology-only": (None, "4x4", None, None, None),
        "type-and-name-no-worker": ("v6e-16", "4x4", None, "slice-b", None),
        "type-and-worker-no-name-single-host": ("v6e-4", "2x2", "0", None, None),
        "type-and-worker-no-name-multi-host": ("v6e-16", "4x4", "2", None, None),
        "type-worker-hostnames-no-name": ("v6e-16", "4x4", "0", None, "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4"),
    }
    for label, (acc, topo, worker, name, hostnames) in variants.items():
        for path in ("gke", "gce"):
            env, attrs = _identity(path, acc, topo, worker, name, hostnames)
            yield Case(f"{path}-partial-{label}", "v6e", 4, f"host-{label}", env, attrs)
    # GKE's single-host TPU7x pod: type and topology, no TPU_NAME, no TPU_WORKER_ID (hardware.md 4.3).
    yield Case("gke-partial-tpu7x-single-host", "tpu7x", 4, "gke-tpu7x-0",
               {"TPU_ACCELERATOR_TYPE": "tpu7x-8", "TPU_TOPOLOGY": "2x2x1", "TPU_SKIP_MDS_QUERY": "true"})


def _malformed() -> Iterator[Case]:
    # Ray's test_autodetect_invalid_type strings, then ours.
    types = ["not-a-valid-version", "vNOTVALID-8", "230498230948230948", "", "V4-8", "v4-7", "v6e-2", "v9-8"]
    for i, acc in enumerate(types):
        for path in ("gke", "gce"):
            env, attrs = _identity(path, acc, None, "0", "bad-type")
            if path == "gce" and acc == "":
                attrs["accelerator-type"] = ""  # issue #39913: an empty answer
            yield Case(f"{path}-bad-type-{i}", "v4" if acc.lower().startswith("v4") else "v6e", 4, f"host-bad-{i}", env, attrs)
    for path in ("gke", "gce"):
        env, attrs = _identity(path, "v6e-16", "4x4", "x1", "slice-c")
        yield Case(f"{path}-worker-id-not-a-number", "v6e", 4, "host-x1", env, attrs)
        env, attrs = _identity(path, "v6e-16", "4x4x", "0", "slice-d")
        yield Case(f"{path}-topology-does-not-parse", "v6e", 4, "host-topo", env, attrs)
        env, attrs = _identity(path, "v6e-16", "2x2x4", "0", "slice-e")
        yield Case(f"{path}-topology-of-another-generation", "v6e", 4, "host-topo3", env, attrs)


def _vfio() -> Iterator[Case]:
    full = _identity("gke", "v6e-4", "2x2", "0", "vfio-slice")[0]
    yield Case("vfio-bluefield-only", None, 0, "host-bf", {}, other_vfio=1)
    yield Case("vfio-bluefield-and-v6e", "v6e", 4, "host-bf-tpu", full, other_vfio=1)
    yield Case("vfio-gvnic-only", None, 0, "host-gvnic", {}, extra_google_vfio=1)
    yield Case("vfio-gvnic-and-v6e", "v6e", 4, "host-gvnic-tpu", full, extra_google_vfio=1)
    yield Case("vfio-group-without-sysfs", "v6e", 4, "host-nosysfs", full, groups_without_sysfs=1)
    yield Case("vfio-tpu7x-two-functions-per-chip", "tpu7x", 4, "host-7x",
               _identity("gke", "tpu7x-8", "2x2x1", "0", "7x-slice")[0])
    yield Case("drm-accel-directory-only", None, 0, "host-drm", {}, drm_accel_dir=True)
    yield Case("drm-accel-directory-and-v6e", "v6e", 4, "host-drm-tpu", full, drm_accel_dir=True)


def write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


Build = Callable[[Path], Path]
