"""AMD Instinct PCI device ids -> SKU (pci.ids; Ray's names from ray/_private/accelerators/amd_gpu.py)."""

from __future__ import annotations

from ray_accel_ext.model import Sku

_GIB = 1 << 30

# device id: (sku name, generation, Ray accelerator type, product, memory per device)
_TABLE: dict[str, tuple[str, str, str, str, int | None]] = {
    "0x738c": ("mi100-32gb", "cdna1", "AMD-Instinct-MI100", "AMD Instinct MI100", 32 * _GIB),
    "0x7408": ("mi250x", "cdna2", "AMD-Instinct-MI250X", "AMD Instinct MI250X", None),
    "0x740c": ("mi250x-mi250", "cdna2", "AMD-Instinct-MI250X-MI250", "AMD Instinct MI250X / MI250", None),
    "0x740f": ("mi210-64gb", "cdna2", "AMD-Instinct-MI210", "AMD Instinct MI210", 64 * _GIB),
    "0x74a0": ("mi300a", "cdna3", "AMD-Instinct-MI300A", "AMD Instinct MI300A", None),
    "0x74a1": ("mi300x-oam-192gb", "cdna3", "AMD-Instinct-MI300X-OAM", "AMD Instinct MI300X", 192 * _GIB),
    "0x74a2": ("mi308x-oam", "cdna3", "AMD-Instinct-MI308X-OAM", "AMD Instinct MI308X", None),
    "0x74a5": ("mi325x-oam-256gb", "cdna3", "AMD-Instinct-MI325X-OAM", "AMD Instinct MI325X", 256 * _GIB),
    "0x74a9": ("mi300x-hf", "cdna3", "AMD-Instinct-MI300X-HF", "AMD Instinct MI300X HF", None),
    "0x75a0": ("mi350x-oam-288gb", "cdna4", "AMD-Instinct-MI350X-OAM", "AMD Instinct MI350X", 288 * _GIB),
    "0x75a3": ("mi355x-oam-288gb", "cdna4", "AMD-Instinct-MI355X-OAM", "AMD Instinct MI355X", 288 * _GIB),
}


def sku_for(device_id: str) -> Sku:
    """The SKU of PCI device ``0x74a1``; an ``amd-unknown-<id>`` SKU for ids not in the table."""
    entry = _TABLE.get(device_id)
    if entry is None:
        return Sku(vendor="amd", name=f"amd-unknown-{device_id}", generation="unknown", pci_device_id=device_id, known=False)
    name, generation, ray_type, product, memory = entry
    return Sku(
        vendor="amd", name=name, generation=generation, ray_accelerator_type=ray_type,
        product=product, memory_bytes=memory, pci_device_id=device_id,
    )
