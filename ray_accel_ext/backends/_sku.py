"""The SKU of accelerator PCI functions, from the SKU database (:mod:`ray_accel_ext.skus`).

Shared by the backends whose devices are PCI functions (NVIDIA, AMD, Gaudi): one lookup per
function (device id, then subsystem id), the driver's name and the host's ``pci.ids`` as
fallbacks, one node SKU (the most common one), and a problem line for every device id the
database lacks, so an unknown device is counted, named ``<vendor>-unknown-<id>`` (or by its
driver/pci.ids name) and explained by ``ray-accel doctor`` instead of passing unnoticed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from .. import skus
from ..host import Host
from ..hw.pci import PciFunction
from ..model import Device, NodeDescription, Problem, Sku
from ..problems import SKU_UNKNOWN

__all__ = ["NO_LAYOUT_MARK", "UNKNOWN_SKU_MARK", "identify_function", "node_identity", "to_sku", "pci_description"]

_GIB = 1 << 30
# The words of a problem about a device id the database lacks (code ``sku-unknown``)...
UNKNOWN_SKU_MARK = "not in the SKU database"
# ... and of one about a device the database knows whose generation this release cannot lay out
# (code ``generation-unsupported``). Readers decide from the codes, never from these words.
NO_LAYOUT_MARK = "of a generation this release has no layout for"


def identify_function(
    host: Host, fn: PciFunction, *, driver_name: str | None = None, memory_bytes: int | None = None
) -> skus.Identity:
    """What ``fn`` is: the database entry for its ids, else ``driver_name`` (NVML), else the host's
    ``pci.ids`` (read under the host's root), else ``<vendor>-unknown-<device id>``."""
    sub = (fn.subsystem_vendor, fn.subsystem_device) if fn.subsystem_vendor and fn.subsystem_device else None
    try:
        return skus.identify(fn.vendor, fn.device, sub, nvml_name=driver_name, memory_bytes=memory_bytes, root=host.root)
    except ValueError:  # not a 16-bit id (read_ids accepts up to 6 hex digits): nothing to look up
        vendor = skus.VENDORS.get(fn.vendor, f"pci-{fn.vendor[2:]}")
        return skus.Identity(vendor, fn.vendor, fn.device, f"{vendor}-unknown-{fn.device}", driver_name, "unknown",
                             skus.memory_gib_from_bytes(memory_bytes), None, "none")


def to_sku(identity: skus.Identity, ray_accelerator_type: str | None) -> Sku:
    """The model's :class:`~ray_accel_ext.model.Sku` for ``identity``, with the Ray type the caller
    derived the way Ray 2.60 does on that host (it depends on what Ray can read there)."""
    return Sku(
        vendor=identity.vendor,
        name=identity.sku,
        generation=identity.generation,
        ray_accelerator_type=ray_accelerator_type,
        product=identity.product,
        memory_bytes=identity.memory_gib * _GIB if identity.memory_gib else None,
        pci_device_id=identity.device_id,
        known=identity.known,
    )


def pci_description(backend: Any, sku: Sku, devices: Sequence[Device], problems: Sequence[Problem | str],
                    **fields: Any) -> NodeDescription:
    """The description of ``backend`` (its name and resource) with one resource unit a device, and
    each problem once."""
    return NodeDescription(backend=backend.name, sku=sku, resource_name=backend.resource_name,
                           resource_quantity=len(devices), devices=tuple(devices),
                           problems=tuple(dict.fromkeys(problems)), **fields)


def node_identity(
    identities: Sequence[skus.Identity], addresses: Sequence[str], problems: list[Problem | str], noun: str = "device"
) -> skus.Identity | None:
    """The node's SKU (the most common one, ties to the first device's) and a problem for mixed
    models and for every device id the database does not know; None without devices."""
    if not identities:
        return None
    counts = Counter(i.sku for i in identities)
    if len(counts) > 1:
        mix = ", ".join(f"{n} x {name}" for name, n in counts.most_common())
        problems.append(f"mixed {noun} models on one node ({mix}); Ray supports one accelerator type per node")
    unknown: dict[tuple[str, str], list[int]] = {}
    for i, ident in enumerate(identities):
        if not ident.known:
            unknown.setdefault((ident.vendor_id, ident.device_id), []).append(i)
    for (vendor_id, device_id), where in unknown.items():
        ident = identities[where[0]]
        shown = ", ".join(addresses[i] for i in where[:4]) + (" ..." if len(where) > 4 else "")
        named = {"nvml": "the driver's name", "pci.ids": "the host's pci.ids"}.get(ident.source)
        how = f"named {ident.sku} from {named}" if named else f"named {ident.sku}"
        problems.append(Problem(
            code=SKU_UNKNOWN,
            message=f"{len(where)} {noun}(s) with PCI id {vendor_id[2:]}:{device_id[2:]} ({shown}) {UNKNOWN_SKU_MARK}: "
                    f"counted, {how}, generation unknown; describe it in an extra SKU file ({skus.ENV_VAR}, "
                    f"see `ray-accel skus`)",
        ))
    top = counts.most_common(1)[0][0]
    return next(i for i in identities if i.sku == top)
