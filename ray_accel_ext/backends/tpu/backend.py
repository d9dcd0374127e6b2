"""Google TPU backend: chips on this host, the slice it belongs to, and where it sits.

Chips (``reference/hardware.md`` 1.4, 2.7): PCI functions of vendor ``0x1ae0`` whose device id is
a TPU's (v2/v3 share ``0x0027`` and differ in ``subsystem_device``); gVNIC (``0x0042``) and NVMe
(``0x001f``) are other Google functions and are ignored. A chip counts when its device node
exists: ``/dev/accelN`` (v2, v3, v4; plain files, never the ``/dev/accel/`` directory NVIDIA
drivers create) or ``/dev/vfio/<iommu group>`` of its functions (v5e, v5p, v6e, TPU7x). A TPU7x
chip is one PCI slot with two functions, each in its own IOMMU group, and counts once. Chips are
indexed like ``TPU_VISIBLE_CHIPS``: by accel number, or by the IOMMU group of the chip's first
function (tpu-info's order).

Slice identity: :mod:`.identity` (GKE variables, else one recursive metadata read). Hosts and
chip layout from facts: :mod:`.layout`. Chip coordinates and ICI links: :mod:`.ici`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from ...backend import AcceleratorBackend, Capabilities, PciId
from ...bounds import ascii_uint
from ...errors import TopologyStringError
from ...host import Host
from ...hw.cloud import cloud_provider, hostname
from ...hw.cloud import location as provider_location
from ...labels import (
    TPU_ATTR_ACCELERATOR_TYPE,
    TPU_ATTR_CHIP_BLOCK,
    TPU_ATTR_HOST_BOUNDS,
    TPU_ATTR_PREFIX,
    TPU_ATTR_SLICE_NAME,
    TPU_ATTR_TOPOLOGY,
    TPU_ATTR_WORKER_ID,
    ray_tpu_pod_type,
    sanitize_value,
)
from ...model import Device, Fabric, Location, NodeDescription, Problem, Sku
from .._reading import never_raises
from .chips import TpuChip, find_chips, unknown_chip_name, unknown_chip_problem
from .ici import IciLayout, chip_block_for, host_links
from .identity import (
    SliceInfo,
    gke_environment,
    parse_tpu_env,
    provider_lookup,
    slice_info,
)
from .layout import SliceLayout, host_facts, slice_layout
from .processes import check_kuberay
from .topology import (
    TPU_PCI_VENDOR,
    AcceleratorType,
    Generation,
    Topology,
    parse_accelerator_type,
    parse_topology,
    tpu_entry,
)

__all__ = ["LABEL_PREFIX", "SliceInfo", "TPUBackend", "TpuChip", "find_chips", "parse_tpu_env", "slice_info"]

LABEL_PREFIX = TPU_ATTR_PREFIX


# -- the backend ------------------------------------------------------------------------------


class TPUBackend(AcceleratorBackend):
    """Google Cloud TPU (v2 to TPU7x), on GKE and on GCE TPU VMs."""

    name = "tpu"
    resource_name = "TPU"
    label_prefix = LABEL_PREFIX
    visible_devices_env_var = "TPU_VISIBLE_CHIPS"
    family = "Google TPU"
    # Every TPU chip is a Google processing accelerator (class 0x12, as Ray's TPU manager and
    # tpu-info see them); which ids are which generation is the SKU database's (skus/data/tpu.json).
    pci_ids = (PciId(TPU_PCI_VENDOR, classes=("0x12",)),)
    driver_paths = ("/dev/vfio", "/dev/accel0")
    driver_hint = (
        "TPU chips are on the PCI bus but neither /dev/vfio nor /dev/accel* exists: the TPU VM image's "
        "vfio-pci binding (v5e and later) or the accel driver (v2-v4) is missing; use a TPU VM image or "
        "GKE TPU node pool"
    )
    capabilities = Capabilities(numa_affinity=True, fabric_domains=True, provider_location=True, device_visibility=True,
                                uses_network=True, topology_links=True)

    def detect(self, host: Host) -> bool:
        """True when the host has at least one TPU chip a process could open."""
        return never_raises(lambda: find_chips(host, []))

    def describe(self, host: Host) -> NodeDescription:
        """Chips, slice, layout, links, location; what could not be read goes into ``problems``."""
        problems: list[Problem | str] = []
        chips = find_chips(host, problems)
        info = slice_info(host, problems)
        location = _tpu_location(host, info, problems)
        provider_lookup(host, info, location, problems)

        acc, topo, fits = _parse_identity(info, problems)
        gen = next((c.generation for c in chips if c.generation is not None), None)
        if acc is not None:
            if gen is not None and gen.name != acc.generation.name:
                problems.append(f"chips are {gen.generation} but the accelerator type says {acc.text}")
            gen = gen or acc.generation
        unknown = unknown_chip_problem(chips, gen, acc.text if acc is not None else None)
        if unknown:
            problems.append(unknown)
        facts = host_facts(len(chips), host.env, info.tpu_env, info.machine_type, problems)
        layout = slice_layout(acc, topo if fits else None, facts, problems) if acc is not None else None
        worker = _worker(info, layout, problems)
        check_kuberay(host.env, info.kuberay, worker, info.processes_per_host, info.name, info.sources.get("name"),
                      problems)
        hosts = layout.hosts if layout else None
        if hosts and info.hostnames and len(info.hostnames) != hosts and info.hostnames != ("localhost",):
            problems.append(f"{len(info.hostnames)} worker hostnames for a {hosts}-host slice ({acc.text if acc else '?'})")

        fabric = _fabric(host, info, acc, topo, worker, hosts, problems)
        ici = layout.ici if layout is not None and fabric is not None else None
        on_slice = ici is not None and worker is not None
        if ici is None:
            # Slice unknown or inconsistent: this host's own chip block still gives each chip's
            # place in the host and the links between them.
            block = facts.chip_block or chip_block_for(min(len(chips), acc.chips) if acc else len(chips))
            ici = IciLayout.host_only(block, gen.dims if gen else 3) if block else None
        sku = _sku(gen, info.accelerator_type, chips)
        devices = tuple(
            Device(
                index=i,
                id=chip.address or chip.device_node,
                pci_address=chip.address,
                numa_node=chip.functions[0].numa_node if chip.functions else None,
                cpus=chip.functions[0].cpus if chip.functions else (),
                memory_bytes=sku.memory_bytes,
                cores=gen.cores_per_chip if gen else None,
                coords=ici.slice_coords(worker, i) if on_slice and i < ici.chips_per_host else None,
                host_coords=ici.host_coords(i) if ici is not None and i < ici.chips_per_host else None,
            )
            for i, chip in enumerate(chips)
        )
        links = host_links(ici, worker if on_slice else 0, len(chips), twisted=facts.twisted) if ici else ()
        quantity = len(devices) * _resource_per_chip(host.env, problems)
        return NodeDescription(
            backend=self.name,
            sku=sku,
            resource_name=self.resource_name,
            resource_quantity=quantity,
            devices=devices,
            interconnect="ici",
            links=links,
            fabric=fabric,
            location=location,
            attributes=_attributes(info, layout, fabric, topo),
            problems=tuple(problems),
        )


def _tpu_location(host: Host, info: SliceInfo, problems: list[Problem | str]) -> Location:
    """The provider's location (:func:`ray_accel_ext.hw.cloud.location`), unless on GKE (the facts
    are in the environment and no metadata request is made) or after a failed metadata read (not
    repeated for the location keys: its reason is already in ``problems``)."""
    if gke_environment(host.env) or info.metadata_failed:
        return Location(provider="gcp") if cloud_provider(host) == "gcp" else Location()
    return provider_location(host, problems)  # on GCE, answered from the same recursive read


_T = TypeVar("_T")


def _parsed(parse: Callable[[str], _T], info: SliceInfo, field: str, what: str, problems: list[Problem | str]) -> _T | None:
    """``parse`` of the slice fact ``field``, None when unknown or malformed (then a problem names its source)."""
    text = getattr(info, field)
    if not text:
        return None
    try:
        return parse(text)
    except TopologyStringError as exc:
        problems.append(f"{what} from {info.sources[field]}: {exc.message}")
        return None


def _parse_identity(info: SliceInfo, problems: list[Problem | str]) -> tuple[AcceleratorType | None, Topology | None, bool]:
    """(type, topology, whether the topology fits the type); a topology that does not fit is
    still published (as Ray does) but not laid out."""
    acc = _parsed(parse_accelerator_type, info, "accelerator_type", "accelerator type", problems)
    topo = _parsed(parse_topology, info, "topology", "topology", problems)
    if acc is not None and topo is not None:
        if len(topo.dims) != acc.generation.dims:
            problems.append(f"topology does not fit {acc.text}: {topo.text!r}: {acc.generation.name} topologies have "
                            f"{acc.generation.dims} dimensions")
            return acc, topo, False
        if topo.chips != acc.chips:
            problems.append(f"topology does not fit {acc.text}: {topo.text!r}: {topo.chips} chips, but accelerator type "
                            f"{acc.text} has {acc.chips}")
            return acc, topo, False
    return acc, topo, True


def _resource_per_chip(env: Mapping[str, str], problems: list[Problem | str]) -> int:
    """``RAY_TPU_RESOURCE_PER_CHIP`` (Ray 2.60: logical TPU units per chip, e.g. 2 for TPU7x's two
    devices), 1 when unset; Ray then hands out unit ids ``chip * n + k``."""
    text = env.get("RAY_TPU_RESOURCE_PER_CHIP")
    if text is None:
        return 1
    if not (text.strip().isascii() and text.strip().isdecimal()) or int(text) < 1:
        problems.append(f"RAY_TPU_RESOURCE_PER_CHIP must be a positive integer, got {text[:20]!r}; using 1")
        return 1
    return int(text)


def _worker(info: SliceInfo, layout: SliceLayout | None, problems: list[Problem | str]) -> int | None:
    if info.worker_id is not None:
        try:
            return ascii_uint(info.worker_id)
        except ValueError:
            problems.append(f"worker id from {info.sources['worker_id']} is not a number: {info.worker_id[:40]!r}")
    if layout is not None and layout.hosts == 1:
        return 0  # a single-host slice has only worker 0
    return None


def _sku(gen: Generation | None, accelerator_type: str | None, chips: list[TpuChip]) -> Sku:
    ray_type = gen.ray_accelerator_type if gen else None
    pod_type = ray_tpu_pod_type(accelerator_type)
    if pod_type:
        # Ray derives its type from the pod type string: "TPU-" + normalised version.
        ray_type = "TPU-" + pod_type.split("-")[0].upper()
    first = chips[0].functions[0] if chips and chips[0].functions else None
    device_id = first.device if first is not None else None
    if gen is None:
        entry = tpu_entry(first.device, first.subsystem_device, first.subsystem_vendor) if first is not None else None
        if entry is not None:  # the database knows the chip, this release not its generation's layout
            return Sku(vendor="google", name=entry.sku, generation=entry.generation, product=entry.product,
                       ray_accelerator_type=ray_type, memory_bytes=entry.memory_bytes,
                       pci_device_id=device_id)
        return Sku(vendor="google", name=unknown_chip_name(device_id), generation="unknown", ray_accelerator_type=ray_type,
                   pci_device_id=device_id, known=False)
    display = "TPU7x" if gen.name == "tpu7x" else f"TPU {gen.generation}"
    return Sku(vendor="google", name=gen.sku, generation=gen.generation, ray_accelerator_type=ray_type,
               product=display, memory_bytes=gen.memory_bytes, pci_device_id=device_id or gen.pci_device)


def _fabric(host: Host, info: SliceInfo, acc: AcceleratorType | None, topo: Topology | None,
            worker: int | None, hosts: int | None, problems: list[Problem | str]) -> Fabric | None:
    if acc is None:
        if info.accelerator_type is None:
            problems.append("slice unknown: no TPU_ACCELERATOR_TYPE and no accelerator-type from metadata")
        return None
    if worker is None:
        problems.append(f"worker id unknown on a {hosts}-host {acc.text} slice; slice labels left out")
        return None
    hosts = hosts or 1
    if not 0 <= worker < hosts:
        problems.append(f"worker id {worker} is outside 0..{hosts - 1} for a {hosts}-host {acc.text} slice")
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
    return Fabric(kind="tpu-slice", id=name, hosts=hosts, worker=worker, topology=topo.text if topo else None,
                  product=info.accelerator_type, hostnames=tuple(hostnames))


def _attributes(info: SliceInfo, layout: SliceLayout | None, fabric: Fabric | None,
                topo: Topology | None) -> dict[str, str]:
    out: dict[str, str] = {}
    if info.accelerator_type:
        out[TPU_ATTR_ACCELERATOR_TYPE] = sanitize_value(info.accelerator_type)
    if fabric is None:
        # Part of the slice only: what Ray's manager would label from it, field by field.
        if info.name and info.sources.get("name") in ("env", "metadata"):
            out[TPU_ATTR_SLICE_NAME] = sanitize_value(info.name)
        worker = (info.worker_id or "").strip().removeprefix("+")
        if worker.isascii() and worker.isdecimal() and len(worker) < 10:
            out[TPU_ATTR_WORKER_ID] = str(int(worker))
        if topo is not None:
            out[TPU_ATTR_TOPOLOGY] = topo.text
    if layout is not None:
        out[f"{LABEL_PREFIX}/chips-per-host"] = str(layout.chips_per_host)
        if layout.ici is not None:
            ici = layout.ici
            out[TPU_ATTR_HOST_BOUNDS] = "x".join(map(str, ici.host_bounds))
            out[TPU_ATTR_CHIP_BLOCK] = "x".join(map(str, ici.chip_block))
            axes = "".join(a for a, w in zip("xyz", ici.wrap) if w)
            out[f"{LABEL_PREFIX}/ici-wrap"] = ("twisted-" if layout.twisted and axes else "") + (axes or "none")
    if info.sources.get("name"):
        out[f"{LABEL_PREFIX}/slice-name-source"] = info.sources["name"]
    if info.processes_per_host > 1:
        # GKE TPU7x: one TPU process (container) per NUMA node; workers count processes.
        out[f"{LABEL_PREFIX}/processes-per-host"] = str(info.processes_per_host)
        if fabric is not None and fabric.worker is not None:
            out[f"{LABEL_PREFIX}/process-index"] = str(fabric.worker % info.processes_per_host)
    if info.state:
        out[f"{LABEL_PREFIX}/slice-state"] = sanitize_value(info.state)
    if info.health:
        out[f"{LABEL_PREFIX}/slice-health"] = sanitize_value(info.health)
    return {k: v for k, v in out.items() if v}
