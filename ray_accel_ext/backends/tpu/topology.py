"""Google TPU generations, accelerator-type strings and topologies. Pure: no I/O, no Ray.

Rules (``reference/hardware.md`` 4.4, Ray 2.60 ``_private/accelerators/tpu.py``, GKE TPU device
plugin ``pkg/tpu/util``):

* An accelerator type is ``<generation>-<N>``. For v2, v3, v4, v5p and TPU7x ``N`` counts
  TensorCores (2 per chip); for v5e (``v5litepod``) and v6e it counts chips. So ``v4-16`` is 8
  chips, ``v6e-16`` 16 chips, ``tpu7x-8`` 4 chips.
* A host holds 4 chips, except single-host v5e/v6e slices, which hold 1, 4 or 8 chips on one host;
  a slice smaller than 4 chips is one (sub-)host.
* Topologies are ``AxB`` (v2, v3, v5e, v6e) or ``AxBxC`` (v4, v5p, TPU7x). Chips per host form the
  block ``2x2x1`` (``2x4x1`` for an 8-chip v5e/v6e host, ``1x1x1`` for one chip); host bounds are
  the topology (padded with ``x1``) divided by that block, e.g. ``4x4`` -> ``2,2,1`` = 4 hosts.
* Worker ids run x fastest over the host bounds, as the TPU runtime numbers them
  (``TPU_WORKER_ID``, ``agent-worker-number``); chips within a host likewise.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ...errors import TopologyStringError
from ...labels import normalize_tpu_type

__all__ = [
    "Generation",
    "GENERATIONS",
    "TPU_PCI_VENDOR",
    "AcceleratorType",
    "Topology",
    "SliceShape",
    "generation_for",
    "generation_from_pci",
    "parse_accelerator_type",
    "parse_topology",
    "slice_shape",
    "DEFAULT_CHIPS_PER_HOST",
]

TPU_PCI_VENDOR = "0x1ae0"
DEFAULT_CHIPS_PER_HOST = 4
_GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Generation:
    """One TPU generation.

    Attributes:
        name: canonical prefix of its accelerator types (``v4``, ``v5litepod``, ``tpu7x``).
        sku: canonical SKU id (``tpu-v6e``, ``tpu-v5e``, ``tpu7x``).
        generation: short generation name (``v5e``, ``tpu7x``).
        ray_version: Ray's spelling (``v5litepod``, ``v7x``); ``TPU-<upper>`` is Ray's type.
        pci_device: PCI device id under vendor 0x1ae0.
        pci_subsystem: subsystem device id, where it is what tells generations apart (v2/v3).
        cores_per_chip: TensorCores per chip; the accelerator-type suffix counts these.
        dims: topology dimensions (2 or 3).
        hbm_gib: HBM per chip.
        functions_per_chip: PCI functions per chip (TPU7x: 2, ``.0`` and ``.1`` of one slot).
        device_nodes: ``accel`` (``/dev/accelN``) or ``vfio`` (``/dev/vfio/<group>``).
        single_host_chips: chip counts a whole slice may have on one host (v5e/v6e: 1, 4, 8).
    """

    name: str
    sku: str
    generation: str
    ray_version: str
    pci_device: str
    pci_subsystem: str | None
    cores_per_chip: int
    dims: int
    hbm_gib: int
    functions_per_chip: int = 1
    device_nodes: str = "vfio"
    single_host_chips: tuple[int, ...] = (1, 2, 4)

    @property
    def ray_accelerator_type(self) -> str:
        """Ray's accelerator type (``TPU-V6E``, ``TPU-V5LITEPOD``, ``TPU-V7X``)."""
        return f"TPU-{self.ray_version.upper()}"

    @property
    def memory_bytes(self) -> int:
        """HBM per chip in bytes."""
        return self.hbm_gib * _GIB

    @property
    def max_single_host_chips(self) -> int:
        """The largest slice that fits on one host."""
        return max(self.single_host_chips)


# PCI ids: hardware.md 1.4 (tpu-info device.py, JAX hardware_utils.py); HBM: tpu-info TpuChip.
GENERATIONS: tuple[Generation, ...] = (
    Generation("v2", "tpu-v2", "v2", "v2", "0x0027", "0x004e", 2, 2, 8, device_nodes="accel"),
    Generation("v3", "tpu-v3", "v3", "v3", "0x0027", "0x004f", 2, 2, 16, device_nodes="accel"),
    Generation("v4", "tpu-v4", "v4", "v4", "0x005e", None, 2, 3, 32, device_nodes="accel"),
    Generation("v5p", "tpu-v5p", "v5p", "v5p", "0x0062", None, 2, 3, 95),
    Generation("v5litepod", "tpu-v5e", "v5e", "v5litepod", "0x0063", None, 1, 2, 16, single_host_chips=(1, 4, 8)),
    Generation("v6e", "tpu-v6e", "v6e", "v6e", "0x006f", None, 1, 2, 32, single_host_chips=(1, 4, 8)),
    Generation("tpu7x", "tpu7x", "tpu7x", "v7x", "0x0076", None, 2, 3, 192, functions_per_chip=2),
)

# Spellings seen in the wild for the same generation: Ray's normalised ``v7x``, GKE's ``v5e``.
_ALIASES = {"v7x": "tpu7x", "v5e": "v5litepod", "v5lite": "v5litepod"}
_BY_NAME = {g.name: g for g in GENERATIONS}
# Counts of at most 9 digits: longer ones are no TPU and would hit int()'s 4300-digit limit.
_TYPE_RE = re.compile(r"^(?P<gen>(?:v|tpu)\d{1,4}[a-z]*)-(?P<n>\d{1,9})$", re.ASCII)  # \d: ASCII digits only
_TOPO_RE = re.compile(r"^\d{1,9}(x\d{1,9}){1,2}$", re.ASCII)


def generation_for(name: str) -> Generation:
    """The generation named ``name`` (``v6e``, ``V5P``, ``tpu7x``, ``v7x``, ``TPU-V6E``)."""
    key = name.strip().lower()
    if key.startswith("tpu-"):
        key = key[4:]
    key = _ALIASES.get(key, key)
    gen = _BY_NAME.get(key)
    if gen is None:
        raise TopologyStringError(name, f"unknown TPU generation (known: {', '.join(_BY_NAME)})")
    return gen


def generation_from_pci(device: str, subsystem_device: str | None) -> Generation | None:
    """The generation of a vendor-0x1ae0 PCI function, None when it is not a TPU (gVNIC, NVMe)."""
    device = device.lower()
    for gen in GENERATIONS:
        if gen.pci_device != device:
            continue
        if gen.pci_subsystem is None or (subsystem_device or "").lower() == gen.pci_subsystem:
            return gen
    return None


@dataclass(frozen=True, slots=True)
class Topology:
    """A chip grid: ``4x4`` -> dims (4, 4)."""

    text: str
    dims: tuple[int, ...]

    @property
    def chips(self) -> int:
        """Chips in the grid."""
        return math.prod(self.dims)

    @property
    def bounds3(self) -> tuple[int, int, int]:
        """The dims padded to three (``4x4`` -> (4, 4, 1))."""
        d = self.dims + (1,) * (3 - len(self.dims))
        return (d[0], d[1], d[2])

    def __str__(self) -> str:
        return self.text


def parse_topology(text: str) -> Topology:
    """``4x4`` or ``2x2x2``; raises :class:`TopologyStringError` naming a malformed string."""
    if not isinstance(text, str):
        raise TopologyStringError(repr(text), "not a string")
    norm = text.strip().lower()
    if not _TOPO_RE.match(norm):
        raise TopologyStringError(text, "expected AxB or AxBxC with positive integers")
    dims = tuple(int(d) for d in norm.split("x"))
    if any(d < 1 for d in dims):
        raise TopologyStringError(text, "every dimension must be at least 1")
    return Topology("x".join(str(d) for d in dims), dims)


@dataclass(frozen=True, slots=True)
class AcceleratorType:
    """A parsed accelerator-type string (``v6e-16``).

    Attributes:
        text: the string as given (``tpu7x-8``).
        generation: its :class:`Generation`.
        suffix: the number after the dash (cores or chips, see ``generation.cores_per_chip``).
        chips: chips in the whole slice.
        chips_per_host: chips on each host of the slice.
        hosts: hosts (VMs) in the slice.
    """

    text: str
    generation: Generation
    suffix: int
    chips: int
    chips_per_host: int
    hosts: int

    @property
    def cores(self) -> int:
        """TensorCores in the slice."""
        return self.chips * self.generation.cores_per_chip

    @property
    def ray_pod_type(self) -> str:
        """Ray's pod type: the string as Ray normalises it (``v7x-8``)."""
        return normalize_tpu_type(self.text)


def parse_accelerator_type(text: str) -> AcceleratorType:
    """Parse ``v4-16``, ``v5litepod-8``, ``tpu7x-8`` ...; raises :class:`TopologyStringError`."""
    if not isinstance(text, str):
        raise TopologyStringError(repr(text), "not a string")
    m = _TYPE_RE.match(text.strip().lower())
    if not m:
        raise TopologyStringError(text, "expected <generation>-<count> such as v6e-16 or tpu7x-8")
    try:
        gen = generation_for(m.group("gen"))
    except TopologyStringError as exc:
        raise TopologyStringError(text, exc.data["reason"]) from None
    suffix = int(m.group("n"))
    if suffix < 1:
        raise TopologyStringError(text, "the count after the dash must be at least 1")
    if suffix % gen.cores_per_chip:
        raise TopologyStringError(
            text, f"{gen.name} counts {gen.cores_per_chip} TensorCores per chip; {suffix} is not a whole number of chips"
        )
    chips = suffix // gen.cores_per_chip
    if chips <= gen.max_single_host_chips:
        if chips not in gen.single_host_chips:
            allowed = ", ".join(map(str, gen.single_host_chips))
            raise TopologyStringError(text, f"a single-host {gen.name} slice has {allowed} chips, not {chips}")
        chips_per_host = chips
    else:
        if chips % DEFAULT_CHIPS_PER_HOST:
            raise TopologyStringError(
                text, f"{chips} chips do not fill whole {DEFAULT_CHIPS_PER_HOST}-chip hosts"
            )
        chips_per_host = DEFAULT_CHIPS_PER_HOST
    return AcceleratorType(text.strip(), gen, suffix, chips, chips_per_host, chips // chips_per_host)


@dataclass(frozen=True, slots=True)
class SliceShape:
    """How a slice's chips are laid out over its hosts.

    Attributes:
        accelerator_type: the parsed type.
        topology: the chip grid.
        chips_per_host_bounds: chip block of one host (``(2, 2, 1)``).
        host_bounds: grid of hosts (``(2, 2, 1)`` for ``4x4``).
    """

    accelerator_type: AcceleratorType
    topology: Topology
    chips_per_host_bounds: tuple[int, int, int]
    host_bounds: tuple[int, int, int]

    @property
    def hosts(self) -> int:
        """Hosts in the slice."""
        return math.prod(self.host_bounds)

    def host_origin(self, worker: int) -> tuple[int, int, int]:
        """Chip coordinates of the first chip of host ``worker`` (x fastest)."""
        hx, hy, _ = self.host_bounds
        cx, cy, cz = self.chips_per_host_bounds
        return ((worker % hx) * cx, ((worker // hx) % hy) * cy, (worker // (hx * hy)) * cz)

    def chip_coords(self, worker: int, chip: int) -> tuple[int, ...]:
        """Coordinates of chip ``chip`` (0-based on its host) of host ``worker``, in the
        topology's own number of dimensions."""
        if not 0 <= worker < self.hosts:
            raise ValueError(f"worker {worker} is outside 0..{self.hosts - 1}")
        cx, cy, _ = self.chips_per_host_bounds
        if not 0 <= chip < math.prod(self.chips_per_host_bounds):
            raise ValueError(f"chip {chip} is outside 0..{math.prod(self.chips_per_host_bounds) - 1}")
        ox, oy, oz = self.host_origin(worker)
        coords = (ox + chip % cx, oy + (chip // cx) % cy, oz + chip // (cx * cy))
        return coords[: len(self.topology.dims)]


def _chips_per_host_bounds(chips: int) -> tuple[int, int, int]:
    # GKE tpu-device-plugin chipsPerHostBounds: 1 -> 1,1,1; 2 -> 1,2,1; 4 -> 2,2,1; 8 -> 2,4,1.
    return {1: (1, 1, 1), 2: (1, 2, 1), 4: (2, 2, 1), 8: (2, 4, 1)}[chips]


def slice_shape(accelerator_type: str | AcceleratorType, topology: str | Topology) -> SliceShape:
    """Check that ``topology`` fits ``accelerator_type`` and lay the slice out over hosts.

    Raises :class:`TopologyStringError` when either string is malformed, the topology has the
    wrong number of dimensions for the generation, or the two disagree on the chip count.
    """
    acc = accelerator_type if isinstance(accelerator_type, AcceleratorType) else parse_accelerator_type(accelerator_type)
    topo = topology if isinstance(topology, Topology) else parse_topology(topology)
    gen = acc.generation
    if len(topo.dims) != gen.dims:
        raise TopologyStringError(topo.text, f"{gen.name} topologies have {gen.dims} dimensions")
    if topo.chips != acc.chips:
        raise TopologyStringError(
            topo.text, f"{topo.chips} chips, but accelerator type {acc.text} has {acc.chips}"
        )
    block = _chips_per_host_bounds(acc.chips_per_host)
    t = topo.bounds3
    if len(topo.dims) == 2 and acc.chips_per_host == 8 and t[0] > t[1]:
        block = (4, 2, 1)  # an 8-chip host laid out 4x2
    if any(t[i] % block[i] for i in range(3)):
        raise TopologyStringError(topo.text, f"does not divide into hosts of {block[0]}x{block[1]}x{block[2]} chips")
    hosts = (t[0] // block[0], t[1] // block[1], t[2] // block[2])
    return SliceShape(acc, topo, block, hosts)
