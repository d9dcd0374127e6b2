"""``ray-accel health``: watch accelerators and RDMA NICs after the nodes started.

``start`` launches, per alive node and pinned to it, a device-health watcher (NVML events and
counters, or a snapshot's recorded events: Xids, double-bit ECC, retired pages, NVLink state; a
device fault drains the node through Ray) and, with pyudev (the ``[udev]`` extra), a monitor of
devices that disappear or appear. Both report to a registry actor, from which ``ray-accel
cluster``, ``ray-accel dashboard`` and the ``ray_rayaccel_device_health`` metric mark the node. ``status`` prints the
marks. ``watch`` runs this node's device watcher in the foreground until the node's raylet exits:
the start hook spawns it by itself; run it by hand (``ray-accel health watch &`` before
``ray start``) where nodes start without the hook. See :mod:`ray_accel_ext.cluster.health` and
:mod:`ray_accel_ext.cluster.node_watch`.
"""

from __future__ import annotations

import argparse

from ._common import add_format_option, print_json, table


def register(sub) -> None:
    p = sub.add_parser("health", help="start or show the per-node device health monitors", description=__doc__)
    p.add_argument("action", choices=("start", "status", "watch"),
                   help="start the monitors, show their marks, or run this node's device watcher")
    p.add_argument("--address", metavar="ADDR", help="Ray cluster address (default: $RAY_ADDRESS, else auto)")
    p.add_argument("--source", choices=("udev", "kernel"), default="udev",
                   help="udev netlink source: 'udev' needs udevd on the host, 'kernel' reads raw uevents")
    add_format_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "watch":
        from ...cluster.node_watch import main

        return main()
    from ...cluster.collect import _ensure_ray
    from ...cluster.device_watch import start_device_watchers
    from ...cluster.health import registry_marks, start_node_monitors

    _ensure_ray(args.address)
    if args.action == "start":
        handles = start_device_watchers()
        print(f"device health watchers running on {len(handles)} nodes")
        try:
            handles = start_node_monitors(source=args.source)
            print(f"udev monitors running on {len(handles)} nodes")
        except ImportError:
            print("udev monitors not started: pyudev is not installed (`pip install 'ray-accel-ext[udev]'`)")
    marks = registry_marks()
    if args.format == "json":
        print_json(marks)
        return 0
    rows = [(nid, "failed" if m.get("device_status") == "failed" else m.get("status"),
             m.get("baseline", {}).get("accelerators"), m.get("baseline", {}).get("rdma_nics"),
             "; ".join(m.get("reasons", [])) or "-") for nid, m in sorted(marks.items())]
    print(table(rows, ("node", "status", "accelerators", "rdma nics", "reasons")) if rows else "no monitor has reported yet")
    return 0
