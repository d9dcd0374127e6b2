"""Run under ``umockdev-wrapper``: hot-plug scenario for ray_accel_ext.cluster.health; prints one JSON result.

Started by tests/cluster/test_health.py. ``GI_PATH`` names the system site-packages that hold ``gi``
(python3-gi), appended (not prepended) to sys.path so the venv's packages win.
"""

import json
import logging
import os
import sys

sys.path.append(os.environ["GI_PATH"])

import gi  # noqa: E402

gi.require_version("UMockdev", "1.0")
from gi.repository import UMockdev  # noqa: E402

from ray_accel_ext.cluster.health import HealthMonitor  # noqa: E402
from ray_accel_ext.telemetry import TELEMETRY_LOGGER  # noqa: E402

telemetry = []


class Capture(logging.Handler):
    def emit(self, record):
        telemetry.append(json.loads(record.getMessage()))


logging.getLogger(TELEMETRY_LOGGER).addHandler(Capture())
logging.getLogger(TELEMETRY_LOGGER).setLevel(logging.INFO)


def pci(tb, parent, bdf, vendor, device, cls):
    # What the kernel's uevent carries for a PCI function (drivers/pci/pci-driver.c pci_uevent).
    props = ["PCI_SLOT_NAME", bdf, "PCI_ID", f"{vendor[2:].upper()}:{device[2:].upper()}", "PCI_CLASS", cls[2:].upper().lstrip("0")]
    return tb.add_device("pci", bdf, parent, ["vendor", vendor + "\n", "device", device + "\n", "class", cls + "\n"], props)


def wait(monitor, n, timeout=5.0):
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end and len(monitor.events) < n:
        time.sleep(0.02)


tb = UMockdev.Testbed.new()
bridge = tb.add_device("pci", "pci0000:00", None, [], [])
gpu0 = pci(tb, bridge, "0000:01:00.0", "0x10de", "0x2330", "0x030200")
gpu1 = pci(tb, bridge, "0000:02:00.0", "0x10de", "0x2330", "0x030200")
nic = pci(tb, bridge, "0000:03:00.0", "0x15b3", "0x101b", "0x020700")
ib = tb.add_device("infiniband", "mlx5_0", nic, ["node_type", "1: CA\n"], [])
netdev = tb.add_device("net", "ibp3s0", nic, ["type", "32\n"], ["INTERFACE", "ibp3s0"])
plain_nic = pci(tb, bridge, "0000:04:00.0", "0x8086", "0x1521", "0x020000")
eth = tb.add_device("net", "eth0", plain_nic, ["type", "1\n"], ["INTERFACE", "eth0"])

marks = []
mon = HealthMonitor(node_id="node-under-test", on_change=marks.append).start()
result = {"baseline": mon.state()}

# 1. GPU 1 falls off the bus: a kernel remove uevent, then the device is gone.
tb.uevent(gpu1, "remove")
tb.remove_device(gpu1)
wait(mon, 1)
result["after_gpu_removed"] = mon.state()
# 2. An unrelated Ethernet function comes and goes: ignored.
tb.uevent(eth, "remove")
tb.uevent(plain_nic, "remove")
extra = pci(tb, bridge, "0000:05:00.0", "0x8086", "0x10fb", "0x020000")
# 3. The RDMA NIC resets: infiniband device and netdev go away and come back.
tb.uevent(netdev, "remove")
tb.uevent(ib, "remove")
wait(mon, 3)
result["during_nic_reset"] = mon.state()
tb.uevent(ib, "add")
tb.uevent(netdev, "add")
wait(mon, 5)
# 4. GPU 1 comes back (rescan), then a GPU that was never there appears.
gpu1 = pci(tb, bridge, "0000:02:00.0", "0x10de", "0x2330", "0x030200")
wait(mon, 6)
result["after_gpu_restored"] = mon.state()
pci(tb, bridge, "0000:06:00.0", "0x10de", "0x2901", "0x030200")
wait(mon, 7)
result["after_new_gpu"] = mon.state()
mon.stop()
result["telemetry"] = telemetry
result["marks"] = [m["status"] for m in marks]
print("RESULT " + json.dumps(result, default=str))
