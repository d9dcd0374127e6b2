"""TPU processes on a slice: TPU7x pods with one TPU container per NUMA node, and KubeRay's indices.

GKE runs a TPU7x host (4 chips, 2 NUMA nodes) as one pod with two TPU containers, each bound to
one NUMA node's 2 chips; every container is its own TPU process and its own Ray node. The GKE TPU
webhook (``ai-on-gke/kuberay-tpu-webhook`` ``main.go``, reference partitions-health-tpu.md 3.3)
then sets, per container ``c`` of host ``h``:

* ``TPU_WORKER_ID = h * containers + c`` (the process's index, 0 .. hosts x containers - 1);
* ``TPU_PROCESS_ADDRESSES``: every process of the slice, host by host, container by container,
  ``<host>:<8471 + c>``, and ``TPU_PROCESS_PORT = 8471 + c``;
* ``TPU_WORKER_HOSTNAMES``: the slice's hosts (one per pod, not per process);
* ``MEGASCALE_PORT = 8081 + c`` where the container asks for multi-slice.

So the slice's workers (Ray's ``ray.io/tpu-worker-id``, ``rayaccel.io/fabric-hosts``) are its
processes, and ``TPU_PROCESS_ADDRESSES`` lists them; ``TPU_WORKER_HOSTNAMES`` lists the pods.

KubeRay (``RayMultiHostIndexing``, on by default from v1.6; kuberay#3902, PR #4163) labels each
worker pod ``ray.io/worker-group-replica-index`` (the slice within the group),
``ray.io/replica-host-index`` (the pod within the slice) and ``ray.io/worker-group-replica-name``.
They are pod labels only; a container sees them through the downward API: as variables named
:data:`KUBERAY_ENV` (``fieldRef: metadata.labels['ray.io/replica-host-index']``), or in a
downward-API volume's ``labels`` file (``key="value"`` lines; :data:`POD_LABELS_FILE`, or the
path in ``RAY_ACCEL_POD_LABELS_FILE``; see ``docs/tpu.md``). Where they are given they are checked against the TPU variables the webhook
derived from them: host index = ``TPU_WORKER_ID // containers``; ``TPU_NAME`` is
``<group>-<replica index>``; ``MEGASCALE_SLICE_ID`` is the replica index.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ...model import Problem
from ...problems import KUBERAY_INDEX_INVALID, KUBERAY_INDEX_MISMATCH, TPU_PROCESS_LAYOUT

__all__ = ["KUBERAY_ENV", "POD_LABELS_FILE", "ProcessLayout", "kuberay_indices", "parse_pod_labels", "process_layout",
           "check_kuberay"]

# The Kubernetes documentation's downward-API volume example mounts the pod's labels here.
POD_LABELS_FILE = "/etc/podinfo/labels"

# Downward-API variables carrying KubeRay's pod labels (label -> variable).
KUBERAY_ENV = {
    "ray.io/worker-group-replica-index": "KUBERAY_WORKER_GROUP_REPLICA_INDEX",
    "ray.io/replica-host-index": "KUBERAY_REPLICA_HOST_INDEX",
    "ray.io/worker-group-replica-name": "KUBERAY_WORKER_GROUP_REPLICA_NAME",
}


@dataclass(frozen=True, slots=True)
class ProcessLayout:
    """The slice's TPU processes from ``TPU_PROCESS_ADDRESSES``: in worker order, and how many
    share one host (the TPU containers of one pod)."""

    addresses: tuple[str, ...]
    hosts: tuple[str, ...]
    per_host: int


def process_layout(env: Mapping[str, str], problems: list[Problem | str]) -> ProcessLayout | None:
    """The layout of a multi-container TPU7x slice, None where no process list is given."""
    addresses = tuple(a.strip() for a in env.get("TPU_PROCESS_ADDRESSES", "").split(",") if a.strip())
    if not addresses or all(a.split(":")[0] == "localhost" for a in addresses):
        return None
    hosts: list[str] = []
    for address in addresses:
        name = address.rsplit(":", 1)[0]
        if name not in hosts:
            hosts.append(name)
    per_host = len(addresses) // len(hosts)
    if per_host * len(hosts) != len(addresses):
        problems.append(Problem(code=TPU_PROCESS_LAYOUT, message=(
            f"TPU_PROCESS_ADDRESSES lists {len(addresses)} processes on {len(hosts)} hosts, not the same "
            "number on each; processes per host unknown")))
        per_host = 1
    named = tuple(h.strip() for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip())
    if named and named != ("localhost",) and named != tuple(hosts):
        problems.append(Problem(code=TPU_PROCESS_LAYOUT, message=(
            f"TPU_PROCESS_ADDRESSES names the hosts {', '.join(hosts)[:120]} but TPU_WORKER_HOSTNAMES "
            f"{', '.join(named)[:120]}")))
    return ProcessLayout(addresses, tuple(hosts), per_host)


def parse_pod_labels(text: str | None) -> dict[str, str]:
    """A downward-API ``labels`` file (``key="value"`` per line) as a dict."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            out[key.strip()] = value.strip().strip('"')
    return out


def _value(env: Mapping[str, str], pod_labels: Mapping[str, str], label: str) -> str:
    return (env.get(KUBERAY_ENV[label], "") or pod_labels.get(label, "")).strip()


def _index(text: str, label: str, problems: list[Problem | str]) -> int | None:
    if not text:
        return None
    if not (text.isascii() and text.isdecimal() and len(text) < 10):
        problems.append(Problem(code=KUBERAY_INDEX_INVALID, message=(
            f"{KUBERAY_ENV[label]} ({label}) is not an index: {text[:20]!r}")))
        return None
    return int(text)


def kuberay_indices(env: Mapping[str, str], pod_labels: Mapping[str, str],
                    problems: list[Problem | str]) -> tuple[int | None, int | None, str | None]:
    """(replica index, host index, replica name) from KubeRay's labels, each None when not given;
    the variables win over the labels file."""
    name = _value(env, pod_labels, "ray.io/worker-group-replica-name") or None
    return (_index(_value(env, pod_labels, "ray.io/worker-group-replica-index"), "ray.io/worker-group-replica-index",
                   problems),
            _index(_value(env, pod_labels, "ray.io/replica-host-index"), "ray.io/replica-host-index", problems), name)


def check_kuberay(env: Mapping[str, str], indices: tuple[int | None, int | None], worker: int | None, per_host: int,
                  slice_name: str | None, name_source: str | None, problems: list[Problem | str]) -> None:
    """Problems where KubeRay's indices disagree with the TPU variables the webhook set from them."""
    replica, host_index = indices
    if host_index is not None and worker is not None and worker // per_host != host_index:
        problems.append(Problem(code=KUBERAY_INDEX_MISMATCH, message=(
            f"KubeRay index mismatch: ray.io/replica-host-index={host_index} but TPU_WORKER_ID={worker} "
            f"is host {worker // per_host} ({per_host} TPU process(es) per host)")))
    if replica is None:
        return
    if slice_name and name_source == "env" and not slice_name.endswith(f"-{replica}"):
        problems.append(Problem(code=KUBERAY_INDEX_MISMATCH, message=(
            f"KubeRay index mismatch: ray.io/worker-group-replica-index={replica} but TPU_NAME={slice_name!r} "
            f"does not end in -{replica} (the webhook names a slice <group>-<replica index>)")))
    megascale = env.get("MEGASCALE_SLICE_ID", "").strip()
    if megascale and megascale != str(replica):
        problems.append(Problem(code=KUBERAY_INDEX_MISMATCH, message=(
            f"KubeRay index mismatch: ray.io/worker-group-replica-index={replica} but "
            f"MEGASCALE_SLICE_ID={megascale}")))
