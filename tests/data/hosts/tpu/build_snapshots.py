"""Build the TPU host snapshots in this folder (the generated trees are committed too).

Each snapshot is a synthetic but rule-consistent machine: PCI ids, device nodes, VFIO/IOMMU
layout, GKE variables and GCE metadata formats from the team reference ``reference/hardware.md``
sections 1.4, 2.7, 4.1-4.3, 8.2, 8.3. Only the files discovery (ours and Ray 2.60's TPU manager)
reads are written. Run ``python tests/data/hosts/tpu/build_snapshots.py`` then review and
``python -m ray_accel_ext.testing.snapshots --update tests/data/hosts/tpu``.

:func:`slice_worker` also derives per-worker snapshots (another ``TPU_WORKER_ID``/``TPU_NAME``)
from a GKE one; the simulated-cluster test uses it to build two 4-host slices.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).parent
GOOGLE = "0x1ae0"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(os.path.relpath(target, link.parent), link)


class Tree:
    """A snapshot under construction."""

    def __init__(self, name: str, base: Path = HERE) -> None:
        self.dir = Path(base) / name
        if self.dir.exists():
            keep = (self.dir / "expected.json").read_text() if (self.dir / "expected.json").exists() else None
            shutil.rmtree(self.dir)
        else:
            keep = None
        self.root = self.dir / "rootfs"
        self.root.mkdir(parents=True)
        if keep is not None:
            _write(self.dir / "expected.json", keep)

    def gce(self, hostname: str) -> "Tree":
        _write(self.root / "sys/class/dmi/id/product_name", "Google Compute Engine\n")
        _write(self.root / "sys/class/dmi/id/sys_vendor", "Google\n")
        _write(self.root / "proc/sys/kernel/hostname", hostname + "\n")
        return self

    def pci(self, bdf: str, vendor: str, device: str, cls: str, *, numa: int = -1, cpus: str = "",
            subsystem: tuple[str, str] = (GOOGLE, "0x0000"), iommu_group: int | None = None,
            vfio: bool = False) -> "Tree":
        """One PCI function under its root complex; ``vfio`` adds ``/dev/vfio/<group>``."""
        rc = f"pci{bdf[:7]}"  # 0000:c0 -> pci0000:c0
        dev = self.root / "sys/devices" / rc / bdf
        for name, value in (("vendor", vendor), ("device", device), ("class", cls),
                            ("subsystem_vendor", subsystem[0]), ("subsystem_device", subsystem[1]),
                            ("numa_node", str(numa))):
            _write(dev / name, value + "\n")
        if cpus:
            _write(dev / "local_cpulist", cpus + "\n")
        _link(self.root / "sys/bus/pci/devices" / bdf, dev)
        if iommu_group is not None:
            group = self.root / "sys/kernel/iommu_groups" / str(iommu_group)
            (group / "devices").mkdir(parents=True, exist_ok=True)
            _link(dev / "iommu_group", group)
            _link(group / "devices" / bdf, dev)
            if vfio:
                _write(self.root / "dev/vfio" / str(iommu_group), "")
                _write(self.root / "dev/vfio/vfio", "")
        return self

    def accel(self, n: int) -> "Tree":
        for i in range(n):
            _write(self.root / f"dev/accel{i}", "")
        return self

    def files(self, *, env: dict | None = None, metadata: dict | None = None, readme: str) -> "Tree":
        _write(self.dir / "env.json", json.dumps(env or {}, indent=2, sort_keys=True) + "\n")
        if metadata is not None:
            _write(self.dir / "metadata.json", json.dumps(metadata, indent=2, sort_keys=True) + "\n")
        _write(self.dir / "README.md", readme.strip() + "\n")
        return self


def _tpu_env(**values: str) -> str:
    """``tpu-env`` as a TPU VM serves it: sorted ``KEY: 'value'`` lines."""
    return "".join(f"{k}: '{v}'\n" for k, v in sorted(values.items()))


def _gce_location(zone: str, machine: str, topo: dict | None = None) -> dict[str, str]:
    out = {
        "instance/zone": f"projects/123456789012/zones/{zone}",
        "instance/machine-type": f"projects/123456789012/machineTypes/{machine}",
    }
    if topo:
        out["instance/attributes/physical_host_topology"] = json.dumps(topo, separators=(",", ":"))
    return out


def _topology(block: str, sub: str, host: str) -> dict[str, str]:
    return {"cluster": "us-east5-cluster-tpuv6", "block": block, "subBlock": sub, "host": host}


def _v6e_host(tree: Tree, hostname: str) -> Tree:
    # ct6e-standard-4t: four v6e chips (0x006f), each its own IOMMU group -> /dev/vfio/0..3;
    # chips 0-1 on NUMA node 0, chips 2-3 on node 1 (illustrative split of the 180 vCPUs); gVNIC.
    tree.gce(hostname)
    for i in range(4):
        numa = i // 2
        cpus = "0-44,90-134" if numa == 0 else "45-89,135-179"
        tree.pci(f"0000:00:0{4 + i}.0", GOOGLE, "0x006f", "0x120000", numa=numa, cpus=cpus, iommu_group=i, vfio=True)
    tree.pci("0000:00:08.0", GOOGLE, "0x0042", "0x020000", numa=0, cpus="0-44,90-134")  # gVNIC
    return tree


GKE_V6E_HOSTNAMES = ",".join(f"slice-a-w-{i}.slice-a-svc" for i in range(4))


def gke_v6e_env(worker: int, name: str = "slice-a", hostnames: str = GKE_V6E_HOSTNAMES) -> dict[str, str]:
    """What GKE's TPU plugin and the KubeRay TPU webhook put into a v6e 4x4 worker pod."""
    return {
        "TPU_ACCELERATOR_TYPE": "v6e-16",
        "TPU_TOPOLOGY": "4x4",
        "TPU_WORKER_ID": str(worker),
        "TPU_WORKER_HOSTNAMES": hostnames,
        "TPU_NAME": name,
        "TPU_SKIP_MDS_QUERY": "true",
        "TPU_HOST_BOUNDS": "2,2,1",
        "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
        "TPU_TOPOLOGY_WRAP": "false,false,false",
        "TPU_RUNTIME_METRICS_PORTS": "8431,8432,8433,8434",
    }


def gke_v6e(worker: int) -> None:
    name = f"gke-v6e-4x4-worker{worker}"
    tree = _v6e_host(Tree(name), f"gke-tpu-v6e-pool-{worker}")
    tree.files(
        env=gke_v6e_env(worker),
        metadata={"gce": _gce_location("us-east5-b", "ct6e-standard-4t",
                                       _topology("b1", f"sb{worker // 2}", f"h{worker}"))},
        readme=f"""
# GKE TPU v6e 4x4 slice, worker {worker} (4 chips)

A KubeRay worker pod on a `ct6e-standard-4t` node of a GKE `tpu-v6e-slice` node pool with
topology `4x4` (16 chips, 4 hosts of 2x2 chips), worker {worker}.

- PCI: four TPU v6e functions (vendor `0x1ae0`, device `0x006f`, hardware.md 1.4), IOMMU groups
  0-3 bound to vfio-pci (`/dev/vfio/0..3`, hardware.md 2.7, 8.2); one gVNIC (`0x0042`) that must
  not count. Chips 0-1 on NUMA node 0, 2-3 on node 1 (illustrative CPU split).
- env: the variables GKE's TPU device plugin injects (`TPU_ACCELERATOR_TYPE=v6e-16`,
  `TPU_TOPOLOGY=4x4`, bounds, `TPU_SKIP_MDS_QUERY`, hardware.md 4.3 test vector
  `tpu-v6e-slice 4x4`) plus `TPU_WORKER_ID`, `TPU_WORKER_HOSTNAMES` and `TPU_NAME=slice-a` as the
  KubeRay TPU webhook sets them.
- metadata: only the node's zone, machine type and `physical_host_topology` (hardware.md 4.1).
  With GKE's variables (`TPU_SKIP_MDS_QUERY`) discovery asks the metadata server nothing, so
  these are served but unread (no location labels); Ray does not ask either (all four of its
  variables are set).

Synthetic, built by `build_snapshots.py`.
""",
    )


def slice_worker(source: Path, dest: Path, *, worker: int, name: str, hostnames: str | None = None) -> Path:
    """Copy GKE snapshot ``source`` to ``dest`` as worker ``worker`` of slice ``name``."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest, symlinks=True, ignore=shutil.ignore_patterns("expected.json"))
    hosts = hostnames or ",".join(f"{name}-w-{i}.{name}-svc" for i in range(4))
    env = gke_v6e_env(worker, name, hosts)
    (dest / "env.json").write_text(json.dumps(env, indent=2, sort_keys=True) + "\n")
    (dest / "rootfs/proc/sys/kernel/hostname").write_text(f"{name}-w-{worker}\n")
    return dest


def gce_v5p_16_worker1() -> None:
    tree = Tree("gce-v5p-16-worker1").gce("t1v-n-5b8a1c2d-w-1")
    # ct5p-hightpu-4t: four v5p chips (0x0062) on VFIO groups 0-3, two per NUMA node.
    for i in range(4):
        numa = i // 2
        cpus = "0-51,104-155" if numa == 0 else "52-103,156-207"
        tree.pci(f"0000:00:0{4 + i}.0", GOOGLE, "0x0062", "0x120000", numa=numa, cpus=cpus, iommu_group=i, vfio=True)
    tree.pci("0000:00:08.0", GOOGLE, "0x0042", "0x020000")
    endpoints = ",".join(f"t1v-n-5b8a1c2d-w-{i}:unknown:10.130.0.{12 + i}" for i in range(2))
    tpu_env = _tpu_env(
        ACCELERATOR_TYPE="v5p-16", CHIPS_PER_HOST_BOUNDS="2,2,1", CONSUMER_PROJECT_ID="example-project",
        HOST_BOUNDS="1,1,2", NODE_ID="v5p-slice-b", TOPOLOGY="2x2x2", TPU_CHIPS_PER_PROCESS_BOUNDS="2,2,1",
        TPU_PROCESS_BOUNDS="1,1,2", TPU_TOPOLOGY_WRAP="false,false,false", TYPE="V5P", WORKER_ID="1",
        ZONE="us-east5-a",
    )
    tree.files(
        env={},
        metadata={"gce": {
            "instance/attributes/accelerator-type": "v5p-16",
            "instance/attributes/instance-id": "4723019483750192837",
            "instance/attributes/agent-worker-number": "1",
            "instance/attributes/tpu-env": tpu_env,
            "instance/attributes/worker-network-endpoints": endpoints,
            "instance/network-interfaces/0/ip": "10.130.0.13",
            "project/project-id": "example-project",
            **_gce_location("us-east5-a", "ct5p-hightpu-4t", _topology("b7", "sb3", "h1")),
        }},
        readme="""
# GCE TPU VM v5p-16, worker 1 (metadata path, topology 2x2x2)

Worker 1 of a `v5p-16` TPU VM slice (8 chips = 16 TensorCores, 2 hosts, topology `2x2x2`)
created with `gcloud compute tpus tpu-vm create`; no GKE variables, so the slice comes from the
GCE metadata server.

- PCI: four TPU v5p functions (`0x1ae0:0x0062`), IOMMU groups 0-3 on `/dev/vfio/0..3`; gVNIC.
- metadata (hardware.md 4.1, 4.2): `accelerator-type=v5p-16`, `agent-worker-number=1`,
  `instance-id` (format unconfirmed; a GCE-style numeric id here, which Ray uses as the slice
  name), `tpu-env` in the real TPU VM format (`NODE_ID: 'v5p-slice-b'`, `TOPOLOGY: '2x2x2'`,
  `HOST_BOUNDS: '1,1,2'`), `worker-network-endpoints` (`hostname:uid:ip` per worker), zone,
  machine type `ct5p-hightpu-4t`, `physical_host_topology`.

Synthetic, built by `build_snapshots.py`.
""",
    )


def gce_v5litepod_8() -> None:
    tree = Tree("gce-v5litepod-8-single-host").gce("t1v-n-0c9e7f31-w-0")
    # ct5lp-hightpu-8t: eight v5e chips (0x0063), four per NUMA node, VFIO groups 0-7.
    for i in range(8):
        numa = i // 4
        cpus = "0-55,112-167" if numa == 0 else "56-111,168-223"
        tree.pci(f"0000:00:{4 + i:02x}.0", GOOGLE, "0x0063", "0x120000", numa=numa, cpus=cpus, iommu_group=i, vfio=True)
    tree.pci("0000:00:0c.0", GOOGLE, "0x0042", "0x020000")
    tree.pci("0000:00:0d.0", GOOGLE, "0x001f", "0x010802")  # NVMe
    tree.files(
        env={},
        metadata={"gce": {
            "instance/attributes/accelerator-type": "v5litepod-8",
            "instance/attributes/instance-id": "v5e-single-c",
            "instance/attributes/agent-worker-number": "0",
            "instance/attributes/tpu-env": _tpu_env(
                ACCELERATOR_TYPE="v5litepod-8", CHIPS_PER_HOST_BOUNDS="2,4,1", HOST_BOUNDS="1,1,1",
                NODE_ID="v5e-single-c", TOPOLOGY="2x4", TYPE="V5LITE_POD", WORKER_ID="0", ZONE="us-west4-a"),
            "instance/attributes/worker-network-endpoints": "t1v-n-0c9e7f31-w-0:unknown:10.164.0.5",
            **_gce_location("us-west4-a", "ct5lp-hightpu-8t"),
        }},
        readme="""
# GCE TPU VM v5litepod-8, single host (8 chips)

A single-host v5e slice (`v5litepod-8`: 8 chips, the suffix counts chips; topology `2x4`;
chips-per-host bounds `2,4,1`, hardware.md 4.3 vector `tpu-v5-lite-podslice 2x4`).

- PCI: eight TPU v5e functions (`0x1ae0:0x0063`), IOMMU groups 0-7 on `/dev/vfio/0..7`, four per
  NUMA node; a gVNIC (`0x0042`) and an NVMe disk (`0x001f`) that must not count.
- metadata: `accelerator-type=v5litepod-8`, `instance-id=v5e-single-c`, `agent-worker-number=0`,
  `tpu-env` (`TOPOLOGY: '2x4'`), one worker endpoint, zone, machine type `ct5lp-hightpu-8t`; no
  `physical_host_topology`.

Synthetic, built by `build_snapshots.py`.
""",
    )


def tpu7x_4chip() -> None:
    tree = Tree("gke-tpu7x-4chip-single-host").gce("gke-tpu7x-pool-0")
    # hardware.md 8.3: each chip is one slot with functions .0 and .1, each its own IOMMU group.
    group = 0
    for slot, numa in (("0000:c0:02", 0), ("0000:c0:03", 0), ("0000:e0:02", 1), ("0000:e0:03", 1)):
        cpus = "0-71,144-215" if numa == 0 else "72-143,216-287"
        for fn in (0, 1):
            tree.pci(f"{slot}.{fn}", GOOGLE, "0x0076", "0x120000", numa=numa, cpus=cpus, iommu_group=group, vfio=True)
            group += 1
    tree.pci("0000:00:04.0", GOOGLE, "0x0042", "0x020000")
    tree.files(
        env={
            "TPU_ACCELERATOR_TYPE": "tpu7x-8",
            "TPU_TOPOLOGY": "2x2x1",
            "TPU_SKIP_MDS_QUERY": "true",
            "TPU_HOST_BOUNDS": "1,1,1",
            "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
            "TPU_TOPOLOGY_WRAP": "false,false,false",
        },
        metadata={"gce": _gce_location("us-central1-c", "tpu7x-standard-4t")},
        readme="""
# GKE TPU7x (Ironwood) host with 4 chips = 8 VFIO groups, single-host slice

A GKE pod on a `tpu7x-standard-4t` node (machine type unconfirmed, hardware.md 4.6) of a
single-host `tpu7x` slice: `TPU_ACCELERATOR_TYPE=tpu7x-8` (8 TensorCores = 4 chips),
`TPU_TOPOLOGY=2x2x1` (hardware.md 4.3 vector `tpu7x 2x2x1`).

- PCI (hardware.md 2.7, 8.3): four chips, each one slot with two functions (`.0`, `.1`,
  `0x1ae0:0x0076`), each function in its own IOMMU group: 8 groups on `/dev/vfio/0..7`. Slots
  `c0:02`, `c0:03` on NUMA node 0, `e0:02`, `e0:03` on node 1. One gVNIC.
- env: for single-host TPU7x the GKE plugin sets no `TPU_WORKER_ID`/`TPU_WORKER_HOSTNAMES`
  (only pre-tpu7x single hosts get them, hardware.md 4.3), and there is no `TPU_NAME`.
- metadata: the GKE node's zone and machine type only; the TPU attributes (`instance-id`,
  `agent-worker-number`, `tpu-env`) answer 404. With `TPU_SKIP_MDS_QUERY` discovery asks the
  metadata server nothing; Ray asks it for the slice name and worker id it lacks.

Ray 2.60 counts 8 TPUs here (one per VFIO group) and, with no slice name or worker id, gives the
node no slice resources; we count 4 chips and name the single-host slice after the host.

Synthetic, built by `build_snapshots.py`.
""",
    )


TPU7X_GROUP, TPU7X_CLUSTER = "tpu7x-group", "rc-tpu7x"


def tpu7x_container_env(host: int, container: int, *, replica: int = 0, hosts: int = 2,
                        kuberay: dict[str, str] | None = None) -> dict[str, str]:
    """What GKE's TPU device plugin and the KubeRay TPU webhook give TPU container ``container``
    (one NUMA node's 2 chips) of host ``host`` of a ``tpu7x-16`` slice (2 hosts x 2 containers)."""
    name = f"{TPU7X_GROUP}-{replica}"
    dns = [f"{name}-{h}.{TPU7X_CLUSTER}-headless-worker-svc.default.svc" for h in range(hosts)]
    env = {
        # device plugin (InitEnvs): the container's own 2-chip block is its "host"
        "TPU_ACCELERATOR_TYPE": "tpu7x-16", "TPU_TOPOLOGY": "2x2x2", "TPU_SKIP_MDS_QUERY": "true",
        "TPU_HOST_BOUNDS": "2,1,2", "TPU_CHIPS_PER_HOST_BOUNDS": "1,2,1",
        "WORKLOAD_NIC_PREFERRED_NUMA": str(container),
        # webhook (mutatePod, tpu7x): process index, process list, port
        "TPU_WORKER_ID": str(host * 2 + container), "TPU_NAME": name,
        "TPU_WORKER_HOSTNAMES": ",".join(dns),
        "TPU_PROCESS_ADDRESSES": ",".join(f"{d}:{8471 + c}" for d in dns for c in range(2)),
        "TPU_PROCESS_PORT": str(8471 + container),
        # KubeRay's multi-host labels, through the downward API
        "KUBERAY_WORKER_GROUP_REPLICA_INDEX": str(replica), "KUBERAY_REPLICA_HOST_INDEX": str(host),
    }
    env.update(kuberay or {})
    return env


def _tpu7x_container_tree(tree: Tree, hostname: str, container: int) -> Tree:
    """A TPU7x host as one of its TPU containers sees it: all 4 chips on PCI (sysfs is not
    namespaced), the VFIO nodes of its own NUMA node's 2 chips only."""
    tree.gce(hostname)
    group = 0
    for slot, numa in (("0000:c0:02", 0), ("0000:c0:03", 0), ("0000:e0:02", 1), ("0000:e0:03", 1)):
        cpus = "0-71,144-215" if numa == 0 else "72-143,216-287"
        for fn in (0, 1):
            tree.pci(f"{slot}.{fn}", GOOGLE, "0x0076", "0x120000", numa=numa, cpus=cpus, iommu_group=group,
                     vfio=numa == container)
            group += 1
    tree.pci("0000:00:04.0", GOOGLE, "0x0042", "0x020000")
    return tree


def tpu7x_two_container(container: int) -> None:
    name = f"gke-tpu7x-16-two-container-c{container}"
    tree = _tpu7x_container_tree(Tree(name), f"{TPU7X_GROUP}-0-0", container)
    tree.files(
        env=tpu7x_container_env(0, container),
        metadata={"gce": _gce_location("us-central1-c", "tpu7x-standard-4t")},
        readme=f"""
# GKE TPU7x pod with two TPU containers: container {container} of host 0 of a tpu7x-16 slice

A KubeRay worker pod on a `tpu7x-standard-4t` node (4 chips, 2 NUMA nodes; GKE runs one TPU
container per NUMA node, https://docs.cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood)
of a 2-host `tpu7x-16` slice (8 chips, topology `2x2x2`): container {container}, bound to NUMA node
{container}'s two chips. Its sibling is `gke-tpu7x-16-two-container-c{1 - container}`; host 1's two
containers are derived by `slice_container` for the `ray start` test.

- PCI: the host's four chips (`0x1ae0:0x0076`, two functions each, one IOMMU group per function;
  sysfs is not namespaced); `/dev/vfio` holds only this container's four groups (its two chips).
- env, from GKE's TPU device plugin (`InitEnvs`, a 2-chip container is its own "host"):
  `TPU_ACCELERATOR_TYPE=tpu7x-16`, `TPU_TOPOLOGY=2x2x2`, `TPU_HOST_BOUNDS=2,1,2`,
  `TPU_CHIPS_PER_HOST_BOUNDS=1,2,1`, `WORKLOAD_NIC_PREFERRED_NUMA={container}`; and from the KubeRay TPU
  webhook (`ai-on-gke/kuberay-tpu-webhook` `main.go`, tpu7x): `TPU_WORKER_ID` = host x 2 +
  container = {container}, `TPU_NAME=tpu7x-group-0`, `TPU_WORKER_HOSTNAMES` (the 2 pods),
  `TPU_PROCESS_ADDRESSES` (the 4 processes, `<pod>:<8471 + container>`), `TPU_PROCESS_PORT={8471 + container}`.
  KubeRay's pod labels `ray.io/worker-group-replica-index=0` and `ray.io/replica-host-index=0`
  reach the container through the downward API (`KUBERAY_WORKER_GROUP_REPLICA_INDEX`,
  `KUBERAY_REPLICA_HOST_INDEX`).

Ray's manager (2.60, and its newest `tpu.py`) makes each container a worker of the slice:
`ray.io/tpu-worker-id={container}`, `ray.io/tpu-slice-name=tpu7x-group-0`, pod type `v7x-16`, a
4-worker slice (`get_num_workers_in_current_tpu_pod`, 16 cores over 2 chips x 2 cores); it counts
`TPU: 4` here (one per VFIO group), we count the 2 chips. The slice has 4 workers (processes),
as `TPU_PROCESS_ADDRESSES` lists them; `TPU_WORKER_HOSTNAMES` lists only the 2 pods.

Synthetic, built by `build_snapshots.py`.
""",
    )


def slice_container(dest: Path, *, host: int, container: int, replica: int = 0,
                    kuberay: dict[str, str] | None = None) -> Path:
    """A tpu7x-16 container snapshot at ``dest``: container ``container`` of host ``host``."""
    if dest.exists():
        shutil.rmtree(dest)
    tree = _tpu7x_container_tree(Tree(dest.name, base=dest.parent), f"{TPU7X_GROUP}-{replica}-{host}", container)
    tree.files(env=tpu7x_container_env(host, container, replica=replica, kuberay=kuberay), readme="derived")
    return dest


def gce_v4_8_accel() -> None:
    tree = Tree("gce-v4-8-dev-accel").gce("t1v-n-91ab22cd-w-0")
    # v4 uses the legacy driver: /dev/accel0..3 character devices (hardware.md 2.7), no VFIO.
    for i in range(4):
        tree.pci(f"0000:00:0{4 + i}.0", GOOGLE, "0x005e", "0x120000", numa=0, cpus="0-239")
    tree.pci("0000:00:08.0", GOOGLE, "0x0042", "0x020000")
    tree.accel(4)
    tree.files(
        env={},
        metadata={"gce": {
            "instance/attributes/accelerator-type": "v4-8",
            "instance/attributes/instance-id": "v4-single-d",
            "instance/attributes/agent-worker-number": "0",
            "instance/attributes/tpu-env": _tpu_env(
                ACCELERATOR_TYPE="v4-8", CHIPS_PER_HOST_BOUNDS="2,2,1", HOST_BOUNDS="1,1,1", NODE_ID="v4-single-d",
                TOPOLOGY="2x2x1", TYPE="V4", WORKER_ID="0", ZONE="us-central2-b"),
            "instance/attributes/worker-network-endpoints": "t1v-n-91ab22cd-w-0:unknown:10.128.0.9",
            **_gce_location("us-central2-b", "ct4p-hightpu-4t"),
        }},
        readme="""
# GCE TPU VM v4-8 with /dev/accel* device nodes

A single-host `v4-8` TPU VM (8 TensorCores = 4 chips, topology `2x2x1`). v4 chips use the
legacy TPU driver: `/dev/accel0..3` character devices (plain files here), no VFIO
(hardware.md 2.7).

- PCI: four TPU v4 functions (`0x1ae0:0x005e`) on NUMA node 0; one gVNIC.
- metadata: `accelerator-type=v4-8`, `instance-id=v4-single-d`, `agent-worker-number=0`,
  `tpu-env` (`TOPOLOGY: '2x2x1'`), zone `us-central2-b`, machine type.

Synthetic, built by `build_snapshots.py`.
""",
    )


def gvnic_nvme_only() -> None:
    tree = Tree("gce-gvnic-nvme-no-tpu").gce("n2-dpdk-host")
    tree.pci("0000:00:04.0", GOOGLE, "0x0042", "0x020000", numa=0)  # gVNIC, kernel driver
    tree.pci("0000:00:05.0", GOOGLE, "0x0042", "0x020000", numa=0, iommu_group=5, vfio=True)  # gVNIC for DPDK
    tree.pci("0000:00:06.0", GOOGLE, "0x001f", "0x010802", numa=0)  # NVMe local SSD
    # A BlueField-3 SoC management interface bound to vfio-pci (hardware.md 0.4, 8.3).
    tree.pci("0000:00:07.0", "0x15b3", "0xc2d5", "0x088000", numa=0, subsystem=("0x15b3", "0x0051"),
             iommu_group=7, vfio=True)
    _write(tree.root / "dev/accel/accel0", "")  # the DRM accel class directory, not a TPU node
    tree.files(
        env={},
        metadata={"gce": _gce_location("europe-west4-a", "n2-standard-16")},
        readme="""
# GCE VM whose only Google PCI functions are gVNIC and NVMe (no TPU)

An `n2-standard-16` VM running a DPDK app: one gVNIC (`0x1ae0:0x0042`) on the kernel driver, a
second gVNIC bound to vfio-pci for DPDK (IOMMU group 5, `/dev/vfio/5`), a local NVMe SSD
(`0x1ae0:0x001f`), and a BlueField-3 SoC management function (`0x15b3`) bound to vfio-pci
(group 7). `/dev/accel/` is the kernel DRM accel *directory* (created by e.g. NVIDIA 570+ or
Intel NPU drivers), not a TPU node. Metadata: zone and machine type; no TPU attributes (404).

No TPU must be found. Ray 2.60 counts the DPDK gVNIC's VFIO group as a TPU (its check is only
"some function in the IOMMU group has vendor 0x1ae0") and so publishes `TPU: 1`; it correctly
ignores the BlueField group and the `/dev/accel/` directory.

Synthetic, built by `build_snapshots.py`.
""",
    )


def amd_ipu_dev_accel() -> None:
    tree = Tree("amd-ipu-dev-accel-no-tpu")
    _write(tree.root / "sys/class/dmi/id/sys_vendor", "LENOVO\n")
    _write(tree.root / "sys/class/dmi/id/product_name", "21K5CTO1WW\n")
    _write(tree.root / "proc/sys/kernel/hostname", "ryzen-ai-laptop\n")
    # AMD Ryzen AI (Phoenix) IPU: 1022:1502, class 0x118000 (signal processing controller), as
    # pci.ids and the amdxdna driver's device table list it; a bare /dev/accel0 node beside it.
    tree.pci("0000:c4:00.1", "0x1022", "0x1502", "0x118000", numa=-1, cpus="0-15", subsystem=("0x17aa", "0x50c1"))
    tree.pci("0000:c3:00.0", "0x1002", "0x15bf", "0x030000", numa=-1, cpus="0-15", subsystem=("0x17aa", "0x50c1"))
    tree.accel(1)
    tree.files(
        env={},
        metadata={"gce": {}},  # served, so that a test can count that nothing asks it
        readme="""
# A laptop whose /dev/accel0 is an AMD IPU, not a TPU

Reproduces https://github.com/ray-project/ray/issues/45302 (comment of 2025-12-16: "Ray's TPU
detector incorrectly identifies `/dev/accel0` (an AMD IPU Device) as a TPU because it matches
`/dev/accel*`"; the issue itself is the same false TPU on a Gaudi HPU-only node). Ray's TPU
manager counts `glob("/dev/accel*")`, publishes `TPU: 1`, and then asks the GCE metadata server
for the accelerator type.

- DMI: `LENOVO` (not Google Compute Engine), so no metadata server is asked (the snapshot serves
  an empty GCE metadata server only so that a test can count that nothing asks it).
- PCI (visible): an AMD Ryzen AI IPU (`1022:1502`, class `0x118000`) and the integrated Radeon
  (`1002:15bf`); no Google (`0x1ae0`) function.
- `/dev/accel0`: a bare node (the IPU's accel device).

No TPU must be found: `/dev/accel*` counts as TPU chips only where sysfs shows no PCI function
at all (a container without `/sys/bus/pci`).

Synthetic, built by `build_snapshots.py`.
""",
    )


def gce_metadata_timeout() -> None:
    tree = Tree("gce-v6e-4-metadata-timeout")
    _v6e_host(tree, "t1v-n-77aa0e11-w-0")
    tree.files(
        env={},
        metadata={
            "gce": {
                "instance/attributes/accelerator-type": "v6e-4",
                "instance/attributes/instance-id": "v6e-single-e",
                "instance/attributes/agent-worker-number": "0",
                "instance/attributes/tpu-env": _tpu_env(ACCELERATOR_TYPE="v6e-4", TOPOLOGY="2x2", WORKER_ID="0"),
                **_gce_location("us-east5-b", "ct6e-standard-4t"),
            },
            "gce_faults": {"*": {"hang": True}},
        },
        readme="""
# GCE TPU VM v6e-4 whose metadata server never answers

The v6e host of the GKE snapshots (four `0x006f` chips on VFIO groups 0-3, gVNIC) as a single-host
`v6e-4` TPU VM, but the metadata server accepts connections and never answers (`gce_faults`
`{"*": {"hang": true}}`): the values in `metadata.json` are what it would have said.

Discovery must end within its budget: the first metadata call times out
(`RAY_ACCEL_METADATA_TIMEOUT_S`, default 0.5 s), later keys fail fast, and the node comes up
`degraded` with its 4 chips and generation (from PCI) but no slice. Ray 2.60's TPU manager makes
its calls without a timeout and blocks until the server goes away.

Synthetic, built by `build_snapshots.py`.
""",
    )


def _unknown_id_host(tree: Tree, hostname: str) -> Tree:
    # Four Google processing accelerators (class 0x12) with a device id no public list has (0x0080,
    # made up: a chip newer than the SKU database), on VFIO groups 0-3 as v5e and later are; gVNIC.
    tree.gce(hostname)
    for i in range(4):
        tree.pci(f"0000:00:0{4 + i}.0", GOOGLE, "0x0080", "0x120000", numa=0, cpus="0-63", iommu_group=i, vfio=True)
    tree.pci("0000:00:08.0", GOOGLE, "0x0042", "0x020000", numa=0, cpus="0-63")  # gVNIC
    return tree


def gce_unknown_id() -> None:
    tree = _unknown_id_host(Tree("gce-tpu-unknown-id"), "t1v-n-0b1d2e3f-w-0")
    tree.files(
        env={},
        metadata={"gce": _gce_location("us-central1-a", "ct9-standard-4t")},
        readme="""
# GCE VM with four TPU chips of a device id the SKU database lacks, and no accelerator type

Four Google processing-accelerator functions (vendor `0x1ae0`, class `0x120000`) with device id
`0x0080`, which no public list has (made up: a generation newer than `skus/data/tpu.json`), each
in its own IOMMU group bound to vfio-pci (`/dev/vfio/0..3`); one gVNIC. The metadata server knows
the zone and an unknown machine type (`ct9-standard-4t`) but no TPU attributes (404), and no
`TPU_*` variable is set.

Ray 2.60's TPU manager counts the four VFIO groups (vendor `0x1ae0`): `TPU: 4`, and no
accelerator type (none is given). Discovery must count them the same, name the SKU
`google-unknown-0x0080` with generation `unknown`, and report the unknown id (`ray-accel doctor`:
`sku-unknown`); the node starts `degraded`, never without its chips.

Synthetic, built by `build_snapshots.py`.
""",
    )


def gke_unknown_id_typed() -> None:
    tree = _unknown_id_host(Tree("gke-tpu-unknown-id-typed"), "gke-tpu-next-pool-0")
    tree.files(
        env={"TPU_ACCELERATOR_TYPE": "v6e-4", "TPU_TOPOLOGY": "2x2", "TPU_WORKER_ID": "0",
             "TPU_WORKER_HOSTNAMES": "localhost", "TPU_SKIP_MDS_QUERY": "true", "TPU_NAME": "next-a"},
        metadata={"gce": _gce_location("us-east5-b", "ct6e-standard-4t")},
        readme="""
# GKE TPU pod whose chips' device id the SKU database lacks, typed by GKE as v6e-4

The chips of `gce-tpu-unknown-id` (device `0x0080`, unknown to the database; VFIO groups 0-3) in a
GKE pod whose TPU device plugin says what they are: `TPU_ACCELERATOR_TYPE=v6e-4`,
`TPU_TOPOLOGY=2x2`, single host (the variables of hardware.md 4.3).

The chips are counted (`TPU: 4`, as Ray 2.60 counts the VFIO groups), typed from the accelerator
type (SKU `tpu-v6e`, generation `v6e`, 32 GiB per chip from the database, Ray type `TPU-V6E`),
and the unknown id is still reported so that the database can learn it.

Synthetic, built by `build_snapshots.py`.
""",
    )


def main() -> int:
    gke_v6e(0)
    gke_v6e(3)
    gce_v5p_16_worker1()
    gce_v5litepod_8()
    tpu7x_4chip()
    tpu7x_two_container(0)
    tpu7x_two_container(1)
    gce_v4_8_accel()
    gvnic_nvme_only()
    amd_ipu_dev_accel()
    gce_metadata_timeout()
    gce_unknown_id()
    gke_unknown_id_typed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
