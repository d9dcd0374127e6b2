"""The TPU chips of a host: Google processing-accelerator PCI functions and their device nodes.

A chip is one PCI function (two for TPU7x) with a ``/dev/accel*`` or ``/dev/vfio/<group>`` node,
counted as Ray 2.60's TPU manager counts them (``ray/_private/accelerators/tpu.py``,
``get_current_node_num_accelerators``: ``/dev/accel*`` first, else VFIO groups of vendor 0x1ae0).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ... import skus
from ...errors import HostReadError
from ...host import Host
from ...hw.pci import PCI_DEVICES, PciFunction, read_function
from ...hw.pci_index import functions_of, pci_index
from ...model import Problem
from ...problems import GENERATION_UNSUPPORTED, SKU_UNKNOWN
from .._sku import NO_LAYOUT_MARK, UNKNOWN_SKU_MARK
from .topology import TPU_PCI_VENDOR, Generation, generation_from_pci, tpu_entry

__all__ = ["TpuChip", "find_chips", "unknown_chip_name", "unknown_chip_problem"]

_ACCEL_RE = re.compile(r"^accel(\d+)$", re.ASCII)  # \d: ASCII digits only


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


def find_chips(host: Host, problems: list[Problem | str]) -> list[TpuChip]:
    """The TPU chips of ``host`` a process could open, in ``TPU_VISIBLE_CHIPS`` order.

    Every Google processing accelerator (vendor 0x1ae0, class 0x12) with a device node is a chip,
    as Ray's TPU manager counts them: one the SKU database does not know is counted with
    generation None (:func:`unknown_chip_problem` explains it).
    """
    tpu_functions: list[tuple[PciFunction, Generation | None]] = []
    addresses = pci_index(host).addresses()  # empty: sysfs PCI is not visible here
    for address in functions_of(host, (TPU_PCI_VENDOR,)):
        try:
            vendor, device, pci_class = pci_index(host).ids(address)
        except HostReadError as exc:
            problems.append(Problem.of(exc))
            continue
        if vendor != TPU_PCI_VENDOR:
            continue
        func = read_function(host, address, problems)
        gen = generation_from_pci(func.device, func.subsystem_device, func.subsystem_vendor)
        if gen is None and not pci_class.startswith("0x12"):
            continue  # gVNIC, NVMe: Google functions that are no accelerator
        tpu_functions.append((func, gen))

    # Group functions into chips: TPU7x is one slot (0000:c0:02) with functions .0 and .1.
    chips_fns: dict[str, list[tuple[PciFunction, Generation | None]]] = {}
    for func, gen in tpu_functions:
        key = func.address.rpartition(".")[0] if gen is not None and gen.functions_per_chip > 1 else func.address
        chips_fns.setdefault(key, []).append((func, gen))

    accel = _accel_nodes(host)
    # An unknown chip uses /dev/accel* when the host has such nodes, as Ray's manager prefers them.
    def on_accel(gen: Generation | None) -> bool:
        return gen.device_nodes == "accel" if gen is not None else bool(accel)

    chips: list[TpuChip] = []
    accel_chips = [k for k, fns in sorted(chips_fns.items()) if on_accel(fns[0][1])]
    if accel_chips and len(accel) not in (0, len(accel_chips)):
        problems.append(f"{len(accel_chips)} TPU chips on PCI but {len(accel)} /dev/accel* nodes; counting the nodes that match")
    no_node: list[str] = []
    for key, fns in sorted(chips_fns.items()):
        gen = fns[0][1]
        funcs = tuple(sorted((f for f, _ in fns), key=lambda f: f.address))
        if gen is not None and len(funcs) != gen.functions_per_chip:
            problems.append(f"TPU chip at {key}: {len(funcs)} PCI function(s), expected {gen.functions_per_chip}")
        if on_accel(gen):
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
            problems.append(Problem.of(exc))
            continue
        if groups[0] is not None and all(g is not None and host.exists(f"/dev/vfio/{g}") for g in groups):
            chips.append(TpuChip(gen, funcs, f"/dev/vfio/{groups[0]}", groups[0]))
        else:
            no_node.append(key)
    if no_node and not chips:
        # Partly visible chips are normal in a container given a subset; none at all is not.
        problems.append(f"TPU chips {', '.join(no_node)} have no /dev/accel* or /dev/vfio node (driver not bound?)")
    if not addresses and accel:
        # /dev/accel* where sysfs shows no PCI function at all (a container without /sys/bus/pci):
        # trust the nodes. Where PCI is visible and holds no Google accelerator, /dev/accel0 is
        # another vendor's (AMD IPU, Gaudi; https://github.com/ray-project/ray/issues/45302).
        chips = [TpuChip(None, (), node, number) for number, node in accel]
    gens = {c.generation.name for c in chips if c.generation is not None}
    if len(gens) > 1:
        problems.append(f"mixed TPU generations on one host: {sorted(gens)}")
    return sorted(chips, key=lambda c: c.sort_key)


def unknown_chip_problem(chips: list[TpuChip], typed_as: Generation | None, accelerator_type: str | None) -> Problem | None:
    """The problem line for chips counted without a known generation, None when there are none:
    their PCI id is not in the SKU database, or it is (an extra SKU file's entry, say) with a
    generation this release has no layout for (cores, torus, device nodes)."""
    unknown = [c for c in chips if c.generation is None and c.functions]
    if not unknown:
        return None
    ids = sorted({c.functions[0].device for c in unknown})
    shown = ", ".join(c.address or c.device_node for c in unknown[:4]) + (" ..." if len(unknown) > 4 else "")
    fn = unknown[0].functions[0]
    entry = tpu_entry(fn.device, fn.subsystem_device, fn.subsystem_vendor)
    if typed_as is not None:
        how = f"generation {typed_as.generation} from the accelerator type {accelerator_type}"
    elif entry is not None:
        how = f"as {entry.sku}, without cores per chip, torus or device-node layout"
    else:
        how = (f"named {unknown_chip_name(ids[0])}, generation unknown (no TPU_ACCELERATOR_TYPE and no metadata "
               "accelerator-type)")
    pci_ids = ", ".join(TPU_PCI_VENDOR[2:] + ":" + i[2:] for i in ids)
    if entry is not None:
        return Problem(code=GENERATION_UNSUPPORTED, message=(
            f"{len(unknown)} TPU chip(s) with PCI id {pci_ids} ({shown}) are {entry.sku} {NO_LAYOUT_MARK} "
            f"(generation {entry.generation!r}, from {entry.origin}): counted, {how}; upgrade ray-accel-ext, "
            "or correct the generation if the entry is an extra SKU file's"))
    return Problem(code=SKU_UNKNOWN, message=(
        f"{len(unknown)} TPU chip(s) with PCI id {pci_ids} ({shown}) {UNKNOWN_SKU_MARK}: counted, {how}; describe "
        f"it in an extra SKU file ({skus.ENV_VAR}, see `ray-accel skus`)"))


def unknown_chip_name(device_id: str | None) -> str:
    """The SKU name of a chip the database lacks: ``google-unknown-<device id>``."""
    return f"google-unknown-{device_id}" if device_id else "tpu-unknown"
