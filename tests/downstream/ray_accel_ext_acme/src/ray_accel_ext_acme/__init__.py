"""Acme NPUs for ray_accel_ext."""
from ray_accel_ext.backend import AcceleratorBackend, Capabilities
from ray_accel_ext.errors import HostReadError
from ray_accel_ext.model import Device, NodeDescription, Sku

NPUS = "/sys/class/acme_npu"


class AcmeNPUBackend(AcceleratorBackend):
    name = "acme_npu"  # equals the entry-point name
    resource_name = "acme_npu"  # what Ray tasks ask for: resources={"acme_npu": 1}
    label_prefix = "acme.ai"  # a domain Acme owns
    visible_devices_env_var = "ACME_VISIBLE_DEVICES"
    capabilities = Capabilities(device_visibility=True)

    def detect(self, host):
        try:
            return any(n.startswith("npu") for n in host.listdir(NPUS))
        except HostReadError:
            return False

    def describe(self, host):
        names = sorted((n for n in host.listdir(NPUS) if n.startswith("npu")), key=lambda n: int(n[3:]))
        devices = tuple(
            Device(index=i, id=host.read_text(f"{NPUS}/{n}/serial").strip()) for i, n in enumerate(names)
        )
        return NodeDescription(
            backend=self.name,
            sku=Sku(vendor="acme", name="acme-npu-2", generation="gen2"),
            resource_name=self.resource_name,
            resource_quantity=len(devices),
            devices=devices,
            attributes={f"{self.label_prefix}/npu.firmware": host.read_text(f"{NPUS}/{names[0]}/firmware").strip()},
        )

    def watch_faults(self, host, devices, on_event, stop):  # optional: device faults after start
        from .faults import watch_uncorrectable

        return watch_uncorrectable(NPUS, host, devices, on_event, stop)
