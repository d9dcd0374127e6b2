"""Google TPU backend: chips on this host, the slice it belongs to, and where it sits.

Chips (``reference/hardware.md`` 1.4, 2.7): PCI functions of vendor ``0x1ae0`` whose device id is
a TPU's (v2/v3 share ``0x0027`` and differ in ``subsystem_device``); gVNIC (``0x0042``) and NVMe
(``0x001f``) are other Google functions and are ignored. A chip counts when its device node
exists: ``/dev/accelN`` (v2, v3, v4; plain files, never the ``/dev/accel/`` directory NVIDIA
drivers create) or ``/dev/vfio/<iommu group>`` of its functions (v5e, v5p, v6e, TPU7x). A TPU7x
chip is one PCI slot with two functions, each in its own IOMMU group, and counts once. Chips are
indexed like ``TPU_VISIBLE_CHIPS``: by accel number, or by the IOMMU group of the chip's first
function (tpu-info's order).

Slice (``hardware.md`` 4.1-4.3): GKE variables (``TPU_ACCELERATOR_TYPE``, ``TPU_TOPOLOGY``,
``TPU_WORKER_ID``, ``TPU_WORKER_HOSTNAMES``, ``TPU_NAME``) first, field by field, as Ray does;
then, on GCE, one metadata call per missing key, four at a time (``accelerator-type``, ``instance-id``,
``agent-worker-number``, ``tpu-env``, ``worker-network-endpoints``), each bounded by the host's
timeout and discovery budget; then, with the ``[gcp]`` extra, the Cloud TPU API
(:mod:`.tpu_api`) for what metadata left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ...backend import AcceleratorBackend, Capabilities, PciId
from ...errors import (
    HostReadError,
    MetadataRateLimited,
    MetadataTimeout,
    ProviderError,
    TopologyStringError,
)
from ...host import Host
from ...hw.cloud import cloud_provider, gcp_location, hostname
from ...hw.pci import PCI_DEVICES, PciFunction, list_functions, read_function, read_ids
from ...labels import ray_tpu_pod_type, sanitize_value
from ...model import Device, Fabric, Location, NodeDescription, Sku
from ...values import ascii_uint
from . import api as tpu_api
from .topology import (
    GENERATIONS,
    TPU_PCI_VENDOR,
    AcceleratorType,
    Generation,
    SliceShape,
    generation_from_pci,
    parse_accelerator_type,
    parse_topology,
    slice_shape,
)

__all__ = ["TPUBackend", "TpuChip", "SliceInfo", "find_chips", "slice_info", "prefetch_metadata", "parse_tpu_env", "LABEL_PREFIX"]

LABEL_PREFIX = "tpu.rayaccel.io"
_ACCEL_RE = re.compile(r"^accel(\d+)$", re.ASCII)
_TPU_ENV_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):\s*'([^']*)'\s*$")


# -- chips ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TpuChip:
    """One TPU chip: its generation, PCI functions (two for TPU7x) and device node."""

    generation: Generation | None
    functions: tuple[PciFunction, ...]
    device_node: str
    sort_key: int

    @property
    def address(self) -> str | None:
        """PCI address of the chip's first function (None for a chip known only by its node)."""
        return self.functions[0].address if self.functions else None


def _accel_nodes(host: Host) -> list[tuple[int, str]]:
    out = []
    for name in host.listdir("/dev"):
        m = _ACCEL_RE.match(name)
        if m and not host.is_dir(f"/dev/{name}"):
            out.append((int(m.group(1)), f"/dev/{name}"))
    return sorted(out)


def _iommu_group(host: Host, address: str) -> int | None:
    link = f"{PCI_DEVICES}/{address}/iommu_group"
    if not host.exists(link):
        return None
    name = host.realpath(link).rstrip("/").rpartition("/")[2]
    return int(name) if name.isascii() and name.isdigit() else None


def find_chips(host: Host, problems: list[str]) -> list[TpuChip]:
    """The TPU chips of ``host`` a process could open, in ``TPU_VISIBLE_CHIPS`` order."""
    tpu_functions: list[tuple[PciFunction, Generation]] = []
    unknown_accelerators = False
    for address in list_functions(host):
        try:
            vendor, device, pci_class = read_ids(host, address)
        except HostReadError as exc:
            problems.append(str(exc))
            continue
        if vendor != TPU_PCI_VENDOR:
            continue
        func = read_function(host, address, problems)
        gen = generation_from_pci(func.device, func.subsystem_device)
        if gen is None:
            if pci_class.startswith("0x12"):  # processing accelerator, but an id we do not know
                unknown_accelerators = True
                problems.append(f"{PCI_DEVICES}/{address}: Google accelerator device {device} is not a known TPU; not counted")
            continue
        tpu_functions.append((func, gen))

    # Group functions into chips: TPU7x is one slot (0000:c0:02) with functions .0 and .1.
    chips_fns: dict[str, list[tuple[PciFunction, Generation]]] = {}
    for func, gen in tpu_functions:
        key = func.address.rpartition(".")[0] if gen.functions_per_chip > 1 else func.address
        chips_fns.setdefault(key, []).append((func, gen))

    accel = _accel_nodes(host)
    chips: list[TpuChip] = []
    accel_chips = [k for k, fns in sorted(chips_fns.items()) if fns[0][1].device_nodes == "accel"]
    if accel_chips and len(accel) not in (0, len(accel_chips)):
        problems.append(f"{len(accel_chips)} TPU chips on PCI but {len(accel)} /dev/accel* nodes; counting the nodes that match")
    no_node: list[str] = []
    for key, fns in sorted(chips_fns.items()):
        gen = fns[0][1]
        funcs = tuple(sorted((f for f, _ in fns), key=lambda f: f.address))
        if len(funcs) != gen.functions_per_chip:
            problems.append(f"TPU chip at {key}: {len(funcs)} PCI function(s), expected {gen.functions_per_chip}")
        if gen.device_nodes == "accel":
            pos = accel_chips.index(key)
            if pos < len(accel):
                number, node = accel[pos]
                chips.append(TpuChip(gen, funcs, node, number))
            else:
                no_node.append(key)
            continue
        try:
            groups = [_iommu_group(host, f.address) for f in funcs]
        except HostReadError as exc:
            problems.append(str(exc))
            continue
        if groups[0] is not None and all(g is not None and host.exists(f"/dev/vfio/{g}") for g in groups):
            chips.append(TpuChip(gen, funcs, f"/dev/vfio/{groups[0]}", groups[0]))
        else:
            no_node.append(key)
    if no_node and not chips:
        # Partly visible chips are normal in a container given a subset; none at all is not.
        problems.append(f"TPU chips {', '.join(no_node)} have no /dev/accel* or /dev/vfio node (driver not bound?)")
    if not chips_fns and not unknown_accelerators and accel:
        # /dev/accel* without visible PCI functions (a container without /sys/bus/pci): trust the nodes.
        chips = [TpuChip(None, (), node, number) for number, node in accel]
    gens = {c.generation.name for c in chips if c.generation is not None}
    if len(gens) > 1:
        problems.append(f"mixed TPU generations on one host: {sorted(gens)}")
    return sorted(chips, key=lambda c: c.sort_key)


# -- slice identity ---------------------------------------------------------------------------


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
    state: str | None = None
    health: str | None = None
    metadata_failed: bool = False  # the metadata server timed out or rate-limited: do not ask again

    def set(self, attr: str, value: str | None, source: str) -> None:
        """Set ``attr`` from ``source`` unless an earlier source already gave it."""
        if value and getattr(self, attr) in (None, (), ""):
            setattr(self, attr, value)
            self.sources[attr] = source


def _metadata_allowed(host: Host) -> bool:
    return cloud_provider(host) == "gcp" or bool(host.env.get("GCE_METADATA_HOST") or host.env.get("GCE_METADATA_IP"))


# Ray's keys (Ray's precedence: env first, then these), then what Ray does not read.
TPU_METADATA_KEYS = ("accelerator-type", "instance-id", "agent-worker-number", "tpu-env", "worker-network-endpoints")
# What location.gcp_location asks; fetched together with the TPU keys so they share one wait.
LOCATION_PATHS = ("instance/zone", "instance/machine-type", "instance/attributes/physical_host_topology")
# Requests in flight at once: a handful keeps well under a listener's default backlog (5 in
# Python's socketserver; more concurrent connects there were dropped and retried after 1 s).
METADATA_CONCURRENCY = 4


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


def _metadata_keys(host: Host, info: SliceInfo) -> list[str]:
    """The attribute keys this host still needs from the metadata server (none on full GKE env)."""
    if all((info.accelerator_type, info.topology, info.worker_id, info.name)) or not _metadata_allowed(host):
        return []
    if host.env.get("TPU_SKIP_MDS_QUERY", "").strip().lower() in ("1", "true", "yes"):
        # GKE's TPU plugin sets this: the TPU facts are in the environment, not the metadata server.
        info.sources["metadata"] = "skipped (TPU_SKIP_MDS_QUERY)"
        return []
    wanted = {
        "accelerator-type": not info.accelerator_type,
        "instance-id": not info.name,
        "agent-worker-number": not info.worker_id,
        "tpu-env": True,
        "worker-network-endpoints": not info.hostnames,
    }
    return [k for k in TPU_METADATA_KEYS if wanted[k]]


def prefetch_metadata(host: Host, paths: list[str]) -> dict[str, str | None | ProviderError]:
    """GET ``paths`` from the GCE metadata server, up to ``METADATA_CONCURRENCY`` at a time (one
    call each, answers cached in ``host.metadata``): a node start waits two or three round trips
    instead of one per key. Each call keeps its own timeout and the shared deadline, so this
    returns within the budget."""
    md = host.metadata

    def one(path: str) -> str | None | ProviderError:
        try:
            return md.gce(path)
        except ProviderError as exc:
            return exc

    if not paths:
        return {}
    with ThreadPoolExecutor(max_workers=min(len(paths), METADATA_CONCURRENCY), thread_name_prefix="ray-accel-tpu-metadata") as pool:
        return dict(zip(paths, pool.map(one, paths)))


def _apply_metadata(info: SliceInfo, fetched: Mapping[str, str | None | ProviderError], keys: list[str],
                    problems: list[str]) -> None:
    failures: dict[str, list[str]] = {}
    values: dict[str, str | None] = {}
    for key in keys:
        got = fetched.get(f"instance/attributes/{key}")
        if isinstance(got, ProviderError):
            failures.setdefault(got.reason(request=False), []).append(key)
            # A server that does not answer or asks us to back off is not asked again this run.
            info.metadata_failed = info.metadata_failed or isinstance(got, (MetadataTimeout, MetadataRateLimited))
            values[key] = None
        else:
            values[key] = got.strip() if got else None
    for reason, failed in failures.items():
        problems.append(f"GCE metadata {', '.join(failed)}: {reason}")

    info.set("accelerator_type", values.get("accelerator-type"), "metadata")
    info.set("name", values.get("instance-id"), "metadata")
    info.set("worker_id", values.get("agent-worker-number"), "metadata")
    tpu_env_text = values.get("tpu-env")
    if tpu_env_text:
        parsed, bad = parse_tpu_env(tpu_env_text)
        info.tpu_env = parsed
        problems.extend(f"GCE metadata tpu-env: {b}" for b in bad)
        info.set("topology", parsed.get("TOPOLOGY"), "tpu-env")
        # Keys Ray does not read: fill gaps only.
        info.set("accelerator_type", parsed.get("ACCELERATOR_TYPE"), "tpu-env")
        info.set("worker_id", parsed.get("WORKER_ID"), "tpu-env")
        info.set("name", parsed.get("NODE_ID"), "tpu-env")
    endpoints = values.get("worker-network-endpoints")
    if endpoints and not info.hostnames:
        # "<hostname>:<uid>:<ip>,..." in worker order; the IP is what workers reach each other by.
        ips = tuple(part.split(":")[-1].strip() for part in endpoints.split(",") if part.strip())
        if ips:
            info.hostnames = ips
            info.sources["hostnames"] = "metadata"


def slice_info(host: Host, problems: list[str], *, with_location: bool = False) -> SliceInfo:
    """Slice identity from GKE variables, then GCE metadata (one call per missing key, all at once).

    ``with_location`` also prefetches the keys :func:`location.gcp_location` reads.
    """
    info = _from_env(host.env)
    keys = _metadata_keys(host, info)
    paths = [f"instance/attributes/{k}" for k in keys] + (list(LOCATION_PATHS) if with_location else [])
    fetched = prefetch_metadata(host, paths)
    if keys:
        _apply_metadata(info, fetched, keys, problems)
    elif with_location and any(isinstance(v, (MetadataTimeout, MetadataRateLimited)) for v in fetched.values()):
        info.metadata_failed = True
        reason = next(v.reason(request=False) for v in fetched.values() if isinstance(v, ProviderError))
        problems.append(f"GCE metadata: {reason}")
    return info


def _provider_lookup(host: Host, info: SliceInfo, location: Location, problems: list[str]) -> None:
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
    ip = None
    try:
        if _metadata_allowed(host):
            if not project:
                project = (host.metadata.gce("project/project-id") or "").strip() or None
            if not node_name or not info.worker_id:
                ip = (host.metadata.gce("instance/network-interfaces/0/ip") or "").strip() or None
        if not (project and zone and (node_name or ip)):
            problems.append("Cloud TPU API: project, zone or node name unknown; not asked")
            return
        node = tpu_api.find_node(host.env, host.deadline, project=project, zone=zone, name=node_name, ip=ip)
        if node is None and node_name and ip:
            node = tpu_api.find_node(host.env, host.deadline, project=project, zone=zone, ip=ip)
    except ProviderError as exc:
        problems.append(f"Cloud TPU API: {exc.reason(request=False)}")
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


# -- the backend ------------------------------------------------------------------------------


class TPUBackend(AcceleratorBackend):
    """Google Cloud TPU (v2 to TPU7x), on GKE and on GCE TPU VMs."""

    name = "tpu"
    resource_name = "TPU"
    label_prefix = LABEL_PREFIX
    visible_devices_env_var = "TPU_VISIBLE_CHIPS"
    family = "Google TPU"
    # The chip ids of every known generation, and any other Google processing accelerator
    # (class 0x12): a chip of a generation this release does not know is still a TPU.
    pci_ids = (
        PciId(TPU_PCI_VENDOR, devices=frozenset(g.pci_device for g in GENERATIONS)),
        PciId(TPU_PCI_VENDOR, classes=("0x12",)),
    )
    driver_paths = ("/dev/vfio", "/dev/accel0")
    driver_hint = (
        "TPU chips are on the PCI bus but neither /dev/vfio nor /dev/accel* exists: the TPU VM image's "
        "vfio-pci binding (v5e and later) or the accel driver (v2-v4) is missing; use a TPU VM image or "
        "GKE TPU node pool"
    )
    capabilities = Capabilities(
        numa_affinity=True,
        fabric_domains=True,
        provider_location=True,
        device_visibility=True,
        uses_network=True,
    )

    def detect(self, host: Host) -> bool:
        """True when the host has at least one TPU chip a process could open."""
        try:
            return bool(find_chips(host, []))
        except Exception:  # noqa: BLE001 - detect never raises
            return False

    def describe(self, host: Host) -> NodeDescription:
        """Chips, slice, location; what could not be read goes into ``problems``."""
        problems: list[str] = []
        chips = find_chips(host, problems)
        on_gcp = cloud_provider(host) == "gcp"
        info = slice_info(host, problems, with_location=on_gcp)
        location = Location()
        if on_gcp:
            if info.metadata_failed:
                location = Location(provider="gcp")
                problems.append("GCE metadata: location not asked, the server did not answer or rate-limited")
            else:
                location = gcp_location(host, problems)
        _provider_lookup(host, info, location, problems)

        acc: AcceleratorType | None = None
        if info.accelerator_type:
            try:
                acc = parse_accelerator_type(info.accelerator_type)
            except TopologyStringError as exc:
                problems.append(f"accelerator type from {info.sources['accelerator_type']}: {exc.message}")
        topo_text: str | None = None
        if info.topology:
            try:
                topo_text = parse_topology(info.topology).text
            except TopologyStringError as exc:
                problems.append(f"topology from {info.sources['topology']}: {exc.message}")
        shape: SliceShape | None = None
        if acc is not None and topo_text is not None:
            try:
                shape = slice_shape(acc, topo_text)
            except TopologyStringError as exc:
                problems.append(f"topology does not fit {acc.text}: {exc.message}")

        gen = next((c.generation for c in chips if c.generation is not None), None)
        if acc is not None:
            if gen is not None and gen.name != acc.generation.name:
                problems.append(f"chips are {gen.generation} but the accelerator type says {acc.text}")
            gen = gen or acc.generation
        worker = _worker(info, acc, problems)
        hosts = shape.hosts if shape else (acc.hosts if acc else None)
        if hosts and info.hostnames and len(info.hostnames) != hosts and info.hostnames != ("localhost",):
            problems.append(f"{len(info.hostnames)} worker hostnames for a {hosts}-host slice ({acc.text if acc else '?'})")
        if acc is not None and chips and len(chips) > acc.chips_per_host:
            problems.append(f"{len(chips)} chips on this host, but a {acc.text} host has {acc.chips_per_host}")

        devices = tuple(
            Device(
                index=i,
                id=chip.address or chip.device_node,
                pci_address=chip.address,
                numa_node=chip.functions[0].numa_node if chip.functions else None,
                cpus=chip.functions[0].cpus if chip.functions else (),
                memory_bytes=gen.memory_bytes if gen else None,
                cores=gen.cores_per_chip if gen else None,
                coords=_coords(shape, worker, i, len(chips)),
            )
            for i, chip in enumerate(chips)
        )
        fabric = _fabric(host, info, acc, topo_text, worker, hosts, problems)
        quantity = len(devices) * _resource_per_chip(host.env, problems)
        return NodeDescription(
            backend=self.name,
            sku=_sku(gen, info.accelerator_type, chips),
            resource_name=self.resource_name,
            resource_quantity=quantity,
            devices=devices,
            interconnect="ici",
            fabric=fabric,
            location=location,
            attributes=_attributes(info, shape),
            problems=tuple(problems),
        )


def _resource_per_chip(env: Mapping[str, str], problems: list[str]) -> int:
    """``RAY_TPU_RESOURCE_PER_CHIP`` (Ray 2.60: logical TPU units per chip, e.g. 2 for TPU7x's two
    devices), 1 when unset; Ray then hands out unit ids ``chip * n + k``."""
    text = env.get("RAY_TPU_RESOURCE_PER_CHIP")
    if text is None:
        return 1
    if not (text.strip().isascii() and text.strip().isdecimal()) or int(text) < 1:
        problems.append(f"RAY_TPU_RESOURCE_PER_CHIP must be a positive integer, got {text[:20]!r}; using 1")
        return 1
    return int(text)


def _worker(info: SliceInfo, acc: AcceleratorType | None, problems: list[str]) -> int | None:
    if info.worker_id is not None:
        try:
            return ascii_uint(info.worker_id)
        except ValueError:
            problems.append(f"worker id from {info.sources['worker_id']} is not a number: {info.worker_id[:40]!r}")
    if acc is not None and acc.hosts == 1:
        return 0  # a single-host slice has only worker 0
    return None


def _coords(shape: SliceShape | None, worker: int | None, chip: int, count: int) -> tuple[int, ...] | None:
    if shape is None or worker is None or count != shape.accelerator_type.chips_per_host:
        return None
    try:
        return shape.chip_coords(worker, chip)
    except ValueError:
        return None


def _sku(gen: Generation | None, accelerator_type: str | None, chips: list[TpuChip]) -> Sku:
    ray_type = gen.ray_accelerator_type if gen else None
    pod_type = ray_tpu_pod_type(accelerator_type)
    if pod_type:
        # Ray derives its type from the pod type string: "TPU-" + normalised version.
        ray_type = "TPU-" + pod_type.split("-")[0].upper()
    device_id = chips[0].functions[0].device if chips and chips[0].functions else None
    if gen is None:
        return Sku(vendor="google", name="tpu-unknown", generation="unknown", ray_accelerator_type=ray_type,
                   pci_device_id=device_id, known=False)
    display = "TPU7x" if gen.name == "tpu7x" else f"TPU {gen.generation}"
    return Sku(vendor="google", name=gen.sku, generation=gen.generation, ray_accelerator_type=ray_type,
               product=display, memory_bytes=gen.memory_bytes, pci_device_id=device_id or gen.pci_device)


def _fabric(host: Host, info: SliceInfo, acc: AcceleratorType | None, topology: str | None,
            worker: int | None, hosts: int | None, problems: list[str]) -> Fabric | None:
    if acc is None:
        if info.accelerator_type is None:
            problems.append("slice unknown: no TPU_ACCELERATOR_TYPE and no accelerator-type from metadata")
        return None
    if worker is None:
        problems.append(f"worker id unknown on a {acc.hosts}-host {acc.text} slice; slice labels left out")
        return None
    hosts = hosts or acc.hosts
    if not 0 <= worker < hosts:
        problems.append(f"worker id {worker} is outside 0..{hosts - 1} for {acc.text}")
        return None
    name = info.name
    if not name:
        # Ray publishes no slice name here; a name shared by every host of the slice is still better.
        name = info.hostnames[0] if hosts > 1 and info.hostnames else (hostname(host) if hosts == 1 else None)
        if not name:
            problems.append(f"slice name unknown for a {hosts}-host {acc.text} slice (no TPU_NAME, instance-id or NODE_ID)")
            return None
        info.sources["name"] = "hostnames" if hosts > 1 else "hostname"
    hostnames = info.hostnames if info.hostnames != ("localhost",) else ()
    return Fabric(kind="tpu-slice", id=name, hosts=hosts, worker=worker, topology=topology,
                  product=info.accelerator_type, hostnames=tuple(hostnames))


def _attributes(info: SliceInfo, shape: SliceShape | None) -> dict[str, str]:
    out: dict[str, str] = {}
    if info.accelerator_type:
        out[f"{LABEL_PREFIX}/accelerator-type"] = sanitize_value(info.accelerator_type)
    if shape is not None:
        out[f"{LABEL_PREFIX}/host-bounds"] = "x".join(map(str, shape.host_bounds))
        out[f"{LABEL_PREFIX}/chips-per-host-bounds"] = "x".join(map(str, shape.chips_per_host_bounds))
    if info.sources.get("name"):
        out[f"{LABEL_PREFIX}/slice-name-source"] = info.sources["name"]
    if info.state:
        out[f"{LABEL_PREFIX}/slice-state"] = sanitize_value(info.state)
    if info.health:
        out[f"{LABEL_PREFIX}/slice-health"] = sanitize_value(info.health)
    return {k: v for k, v in out.items() if v}

