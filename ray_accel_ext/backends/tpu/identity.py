"""Which TPU slice this host belongs to: accelerator type, topology, worker id, slice name, worker
hostnames, and the layout facts of the TPU runtime (bounds, wrap).

Field by field, as Ray 2.60 does (``_private/accelerators/tpu.py``): GKE variables first
(``TPU_ACCELERATOR_TYPE``, ``TPU_TOPOLOGY``, ``TPU_WORKER_ID``, ``TPU_NAME``, plus
``TPU_WORKER_HOSTNAMES``, hardware.md 4.3), then the GCE metadata server. With GKE's variables
(``TPU_SKIP_MDS_QUERY``, which GKE's TPU plugin sets because the facts are in the environment, or
all four of Ray's variables) the metadata server is not asked at all. Otherwise it is asked once:
the ``instance/`` directory read recursively (:meth:`MetadataClient.gce` serves every
``instance/`` key from one ``?recursive=true`` answer), which holds
every attribute Ray reads (``accelerator-type``, ``instance-id``, ``agent-worker-number``,
``tpu-env``), ``worker-network-endpoints``, the machine type and the location keys. Then, with the
``[gcp]`` extra, the Cloud TPU API (:mod:`.api`) for what metadata left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...errors import HostReadError, ProviderError
from ...host import Host
from ...host.protocol import GCE_METADATA_HOST_ENV, GCE_METADATA_IP_ENV
from ...hw.cloud import cloud_provider
from ...model import Location, Problem
from ...problems import METADATA_ERROR
from . import api as tpu_api
from .processes import POD_LABELS_FILE, kuberay_indices, parse_pod_labels, process_layout

__all__ = ["RAY_TPU_ENV", "SliceInfo", "gke_environment", "parse_tpu_env", "provider_lookup", "slice_info"]

_TPU_ENV_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):\s*'([^']*)'\s*$")
# Ray 2.60's own variables, read before its metadata calls (GKE_TPU_*_ENV_VAR in tpu.py).
RAY_TPU_ENV = ("TPU_ACCELERATOR_TYPE", "TPU_TOPOLOGY", "TPU_WORKER_ID", "TPU_NAME")


def parse_tpu_env(text: str) -> tuple[dict[str, str], list[str]]:
    """``tpu-env`` (``KEY: 'value'`` per line) -> (values, unparsable-line messages)."""
    values: dict[str, str] = {}
    bad: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _TPU_ENV_LINE.match(line.strip())
        if m:
            values[m.group(1)] = m.group(2)
        else:
            bad.append(f"line {n} unparsable ({line.strip()[:60]!r}; truncated?)")
    return values, bad


@dataclass
class SliceInfo:
    """What is known of this host's slice, and where each field came from."""

    accelerator_type: str | None = None
    topology: str | None = None
    worker_id: str | None = None
    name: str | None = None
    hostnames: tuple[str, ...] = ()
    tpu_env: Mapping[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    machine_type: str | None = None
    ip: str | None = None
    state: str | None = None
    health: str | None = None
    metadata_failed: bool = False  # the one metadata read failed: nothing else is asked of it
    processes_per_host: int = 1  # TPU processes (GKE TPU7x containers) on one host (.processes)
    kuberay: tuple[int | None, int | None] = (None, None)  # KubeRay's (replica index, host index)

    def set(self, attr: str, value: str | None, source: str) -> None:
        """Set ``attr`` from ``source`` unless an earlier source already gave it."""
        if value and getattr(self, attr) in (None, (), ""):
            setattr(self, attr, value)
            self.sources[attr] = source


def gke_environment(env: Mapping[str, str]) -> bool:
    """True when the TPU facts are in the environment and the metadata server is not to be asked:
    GKE's ``TPU_SKIP_MDS_QUERY``, or all four of Ray's variables set."""
    if env.get("TPU_SKIP_MDS_QUERY", "").strip().lower() in ("1", "true", "yes"):
        return True
    return all(env.get(k) for k in RAY_TPU_ENV)


def _metadata_allowed(host: Host) -> bool:
    return cloud_provider(host) == "gcp" or bool(host.env.get(GCE_METADATA_HOST_ENV) or host.env.get(GCE_METADATA_IP_ENV))


def _from_env(env: Mapping[str, str]) -> SliceInfo:
    info = SliceInfo()
    info.set("accelerator_type", env.get("TPU_ACCELERATOR_TYPE"), "env")
    info.set("topology", env.get("TPU_TOPOLOGY"), "env")
    info.set("worker_id", env.get("TPU_WORKER_ID"), "env")
    info.set("name", env.get("TPU_NAME"), "env")
    names = tuple(h.strip() for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip())
    if names:
        info.hostnames = names
        info.sources["hostnames"] = "env"
    return info


def _pod_labels(host: Host, problems: list[str]) -> dict[str, str]:
    path = host.env.get("RAY_ACCEL_POD_LABELS_FILE") or POD_LABELS_FILE
    try:
        return parse_pod_labels(host.read_optional(path, max_bytes=65536))
    except HostReadError as exc:
        problems.append(f"pod labels: {exc}")
        return {}


def _from_webhook(info: SliceInfo, host: Host, problems: list[str]) -> None:
    """The multi-container process list (TPU7x) and KubeRay's indices (:mod:`.processes`)."""
    env = host.env
    layout = process_layout(env, problems)
    if layout is not None:
        # The slice's workers are its TPU processes; TPU_WORKER_HOSTNAMES lists only the pods.
        info.hostnames = layout.addresses
        info.sources["hostnames"] = "env TPU_PROCESS_ADDRESSES"
        info.processes_per_host = layout.per_host
    replica, host_index, replica_name = kuberay_indices(env, _pod_labels(host, problems), problems)
    info.kuberay = (replica, host_index)
    if info.processes_per_host == 1 and host_index is not None:
        info.set("worker_id", str(host_index), "kuberay")
    info.set("name", replica_name, "kuberay")


# The instance keys read; all come from the one recursive read (MetadataClient.gce serves them).
METADATA_KEYS = tuple(f"instance/attributes/{k}" for k in (
    "accelerator-type", "instance-id", "agent-worker-number", "tpu-env", "worker-network-endpoints",
)) + ("instance/machine-type", "instance/network-interfaces/0/ip")


def _apply(info: SliceInfo, values: Mapping[str, str | None], problems: list[Problem | str]) -> None:
    def attr(key: str) -> str | None:
        value = values.get(f"instance/attributes/{key}")
        return value.strip() if value and value.strip() else None
    info.set("accelerator_type", attr("accelerator-type"), "metadata")
    info.set("name", attr("instance-id"), "metadata")
    info.set("worker_id", attr("agent-worker-number"), "metadata")
    tpu_env_text = attr("tpu-env")
    if tpu_env_text:
        parsed, bad = parse_tpu_env(tpu_env_text)
        info.tpu_env = parsed
        problems.extend(Problem(code=METADATA_ERROR, message=f"GCE metadata tpu-env: {b}") for b in bad)
        info.set("topology", parsed.get("TOPOLOGY"), "tpu-env")
        # Keys Ray does not read: fill gaps only.
        info.set("accelerator_type", parsed.get("ACCELERATOR_TYPE"), "tpu-env")
        info.set("worker_id", parsed.get("WORKER_ID"), "tpu-env")
        info.set("name", parsed.get("NODE_ID"), "tpu-env")
    endpoints = attr("worker-network-endpoints")
    if endpoints and not info.hostnames:
        # "<hostname>:<uid>:<ip>,..." in worker order; the IP is what workers reach each other by.
        ips = tuple(part.split(":")[-1].strip() for part in endpoints.split(",") if part.strip())
        if ips:
            info.hostnames = ips
            info.sources["hostnames"] = "metadata"
    info.machine_type = (values.get("instance/machine-type") or "").strip() or None
    info.ip = (values.get("instance/network-interfaces/0/ip") or "").strip() or None


def slice_info(host: Host, problems: list[Problem | str]) -> SliceInfo:
    """Slice identity from GKE variables, then (not on GKE) the one recursive metadata read."""
    info = _from_env(host.env)
    _from_webhook(info, host, problems)
    if gke_environment(host.env):
        info.sources["metadata"] = "not asked (GKE variables)"
        return info
    if not _metadata_allowed(host):
        return info
    try:
        values = {path: host.metadata.gce(path) for path in METADATA_KEYS}
    except ProviderError as exc:
        info.metadata_failed = True
        problems.append(Problem.of(exc, f"GCE metadata: {exc.reason(request=False)}"))
        return info
    _apply(info, values, problems)
    return info


def provider_lookup(host: Host, info: SliceInfo, location: Location, problems: list[Problem | str]) -> None:
    """Fill gaps from the Cloud TPU API (``[gcp]`` extra) when metadata lacked them.

    The node is looked up by its TPU node name (``TPU_NAME`` or tpu-env ``NODE_ID``; Ray's
    ``instance-id`` may be a numeric id the API does not know) or, failing that, found among the
    zone's nodes by this host's IP, which also gives the worker id.
    """
    missing = not (info.accelerator_type and info.topology and info.name and info.hostnames)
    if not missing or info.metadata_failed or not tpu_api.enabled(host.env, live=host.live):
        return
    project = info.tpu_env.get("CONSUMER_PROJECT_ID")
    zone = info.tpu_env.get("ZONE") or location.zone
    node_name = info.tpu_env.get("NODE_ID") or (info.name if info.sources.get("name") == "env" else None)
    ip = info.ip if (not node_name or not info.worker_id) else None
    try:
        if not project and _metadata_allowed(host) and not gke_environment(host.env):
            project = (host.metadata.gce("project/project-id") or "").strip() or None
        if not (project and zone and (node_name or ip)):
            problems.append("Cloud TPU API: project, zone or node name unknown; not asked")
            return
        node = tpu_api.find_node(host.env, host.deadline, project=project, zone=zone, name=node_name, ip=ip)
        if node is None and node_name and ip:
            node = tpu_api.find_node(host.env, host.deadline, project=project, zone=zone, ip=ip)
    except ProviderError as exc:
        problems.append(Problem.of(exc, f"Cloud TPU API: {exc.reason(request=False)}"))
        return
    if node is None:
        problems.append(f"Cloud TPU API: no TPU node {'named ' + node_name if node_name else 'with IP ' + str(ip)} in {project}/{zone}")
        return
    info.set("name", node.name, "cloud-tpu-api")
    info.set("accelerator_type", node.accelerator_type, "cloud-tpu-api")
    info.set("topology", node.topology, "cloud-tpu-api")
    if not info.hostnames and node.endpoints:
        info.hostnames = node.endpoints
        info.sources["hostnames"] = "cloud-tpu-api"
    if not info.worker_id and ip and ip in node.endpoints:
        info.set("worker_id", str(node.endpoints.index(ip)), "cloud-tpu-api")
    info.state, info.health = node.state, node.health
