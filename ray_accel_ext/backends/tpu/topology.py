"""Google TPU generations, accelerator-type strings and topologies. Pure: no I/O, no Ray.

Rules (``reference/hardware.md`` 4.4, Ray 2.60 ``_private/accelerators/tpu.py``, GKE TPU device
plugin ``pkg/tpu/util``):

* An accelerator type is ``<generation>-<N>``. For v2, v3, v4, v5p and TPU7x ``N`` counts
  TensorCores (2 per chip); for v5e (``v5litepod``) and v6e it counts chips. So ``v4-16`` is 8
  chips, ``v6e-16`` 16 chips, ``tpu7x-8`` 4 chips.
* A slice of a single-host size has 1, 2 or 4 chips (v5e/v6e: 1, 4 or 8); larger slices are
  whole 4-chip multiples. How many hosts a slice has is not a property of the type: it is the
  slice's chips divided by the chips of *this* host (:mod:`.layout`).
* Topologies are ``AxB`` (v2, v3, v5e, v6e) or ``AxBxC`` (v4, v5p, TPU7x).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import TopologyStringError
from ...labels import normalize_tpu_type

if TYPE_CHECKING:
    from ...skus import Entry

__all__ = [
    "Generation",
    "GENERATIONS",
    "TPU_PCI_VENDOR",
    "AcceleratorType",
    "Topology",
    "generation_for",
    "generation_from_pci",
    "tpu_entry",
    "parse_accelerator_type",
    "parse_topology",
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
    functions_per_chip: int = 1
    device_nodes: str = "vfio"
    single_host_chips: tuple[int, ...] = (1, 2, 4)

    @property
    def ray_accelerator_type(self) -> str:
        """Ray's accelerator type (``TPU-V6E``, ``TPU-V5LITEPOD``, ``TPU-V7X``)."""
        return f"TPU-{self.ray_version.upper()}"

    @property
    def memory_bytes(self) -> int | None:
        """HBM per chip in bytes: the SKU database's figure (``skus/data/tpu.json``, or an extra SKU
        file's), None where it has none."""
        from ...skus import lookup  # the database loads on first use, not at import

        entry = lookup(TPU_PCI_VENDOR, self.pci_device, (TPU_PCI_VENDOR, self.pci_subsystem) if self.pci_subsystem else None)
        return entry.memory_gib * _GIB if entry is not None and entry.memory_gib else None

    @property
    def max_single_host_chips(self) -> int:
        """The largest slice that fits on one host."""
        return max(self.single_host_chips)


# PCI ids: hardware.md 1.4 (tpu-info device.py, JAX hardware_utils.py). HBM per chip is the SKU
# database's (skus/data/tpu.json), not this table's.
GENERATIONS: tuple[Generation, ...] = (
    Generation("v2", "tpu-v2", "v2", "v2", "0x0027", "0x004e", 2, 2, device_nodes="accel"),
    Generation("v3", "tpu-v3", "v3", "v3", "0x0027", "0x004f", 2, 2, device_nodes="accel"),
    Generation("v4", "tpu-v4", "v4", "v4", "0x005e", None, 2, 3, device_nodes="accel"),
    Generation("v5p", "tpu-v5p", "v5p", "v5p", "0x0062", None, 2, 3),
    Generation("v5litepod", "tpu-v5e", "v5e", "v5litepod", "0x0063", None, 1, 2, single_host_chips=(1, 4, 8)),
    Generation("v6e", "tpu-v6e", "v6e", "v6e", "0x006f", None, 1, 2, single_host_chips=(1, 4, 8)),
    Generation("tpu7x", "tpu7x", "tpu7x", "v7x", "0x0076", None, 2, 3, functions_per_chip=2),
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


def tpu_entry(device: str, subsystem_device: str | None, subsystem_vendor: str | None = None) -> Entry | None:
    """The SKU database's TPU entry for a vendor-0x1ae0 PCI function, None when the database has
    no TPU of those ids."""
    from ...skus import lookup  # the database loads on first use, not at import

    # any subsystem vendor matches the database's `*:<subsystem device>` entries (v2 and v3 share 0x0027)
    subsystem = (subsystem_vendor or TPU_PCI_VENDOR, subsystem_device) if subsystem_device else None
    entry = lookup(TPU_PCI_VENDOR, device, subsystem)
    return entry if entry is not None and entry.family == "tpu" else None


def generation_from_pci(device: str, subsystem_device: str | None, subsystem_vendor: str | None = None) -> Generation | None:
    """The generation of a vendor-0x1ae0 PCI function, None when it is not a TPU (gVNIC, NVMe)
    or its generation is one this release has no layout for (:func:`tpu_entry` tells those apart).

    The SKU database (``ray_accel_ext/skus/data/tpu.json``) says which ids are TPU chips of which
    generation, so a new id of a known generation is a change to that file alone; the table here
    holds what the database has no fields for (cores, torus dimensions, device nodes).
    """
    entry = tpu_entry(device, subsystem_device, subsystem_vendor)
    if entry is None:
        return None
    try:
        return generation_for(entry.generation)
    except TopologyStringError:
        return None  # a generation this release has no layout for: counted as an unknown chip


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
    """

    text: str
    generation: Generation
    suffix: int
    chips: int

    @property
    def nominal_chips_per_host(self) -> int:
        """Ray 2.60's guess of a host's chips from the type alone (``get_num_tpu_visible_chips_per_host``:
        the whole slice up to 8 chips for v5e/v6e, else 4); used only when the host says nothing."""
        if self.generation.max_single_host_chips == 8 and self.chips <= 8:
            return self.chips
        return min(self.chips, DEFAULT_CHIPS_PER_HOST)

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
    elif chips % DEFAULT_CHIPS_PER_HOST:
        raise TopologyStringError(text, f"{chips} chips are no whole number of {DEFAULT_CHIPS_PER_HOST}-chip groups")
    return AcceleratorType(text.strip(), gen, suffix, chips)
