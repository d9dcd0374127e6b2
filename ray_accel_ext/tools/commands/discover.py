"""``ray-accel discover``: the node inventory."""

from __future__ import annotations

import argparse

from ...hw.pci import format_cpulist
from ...model import reason_line
from ...node.discovery import discover
from ._common import add_format_option, add_root_option, host_for, print_json, table


def register(sub) -> None:
    p = sub.add_parser("discover", help="describe this node's accelerators", description=__doc__)
    add_root_option(p)
    add_format_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inventory = discover(host_for(args, serve_metadata=True))
    if args.format == "json":
        print_json(inventory.to_dict())
        return 0
    if not inventory.descriptions:
        print("no accelerators found")
    for desc in inventory.descriptions:
        sku = desc.sku
        fabric = desc.fabric
        print(f"{desc.backend}: {len(desc.devices)} x {sku.name} ({sku.product or sku.generation}), "
              f"{desc.resource_name}={desc.resource_quantity:g}, interconnect {desc.interconnect}")
        if fabric is not None:
            worker = "?" if fabric.worker is None else fabric.worker  # the hardware does not number its hosts
            print(f"  fabric: {fabric.kind} {fabric.id} (worker {worker} of {fabric.hosts}"
                  f"{', topology ' + fabric.topology if fabric.topology else ''})")
        loc = desc.location
        if any((loc.zone, loc.cluster, loc.block, loc.rack)):
            print(f"  location: zone={loc.zone} cluster={loc.cluster} block={loc.block} rack={loc.rack}")
        placed = any(d.coords or d.host_coords for d in desc.devices)
        rows = [
            (d.index, d.pci_address, d.numa_node, format_cpulist(d.cpus), d.pcie_switch,
             ",".join(f"{n.nic}:{n.path}" for n in d.nics), d.id)
            + ((_coords(d.coords), _coords(d.host_coords)) if placed else ())
            for d in desc.devices
        ]
        print(table(rows, ("idx", "pci", "numa", "cpus", "switch", "nearest nics", "id")
                    + (("coords", "in host") if placed else ())))
        if desc.links:
            kinds = sorted({f"{l.kind}x{l.lanes}" for l in desc.links})
            remote = sum(1 for l in desc.links if l.peer_worker is not None)
            wraps = sum(1 for l in desc.links if l.wrap)
            extra = f"; {remote} to other hosts, {wraps} wrap-around" if remote or wraps else ""
            print(f"  links: {len(desc.links)} ({', '.join(kinds)}{extra})")
            for d in desc.devices:
                to = _link_ends(desc.links, d.index)
                if to and (remote or len(desc.devices) <= 16):
                    print(f"    {d.index}: {', '.join(to)}")
        if desc.nics:
            print(table([(n.name, n.kind, n.pci_address, n.numa_node, n.netdev, n.rate_gbps) for n in desc.nics],
                        ("nic", "kind", "pci", "numa", "netdev", "Gb/s")))
        print()
    problems = inventory.all_problems()
    print(f"discovery: {'degraded' if problems else 'ok'} in {inventory.elapsed_s * 1000:.1f} ms")
    for p in problems:
        print(f"  - [{p.code}] {reason_line(p)}")
    return 0


def _coords(c) -> str:
    return ",".join(map(str, c)) if c else ""


def _link_ends(links, index: int) -> list[str]:
    """Where device ``index``'s links go: ``1``, ``w3:0`` (chip 0 of worker 3), ``~`` = wrap-around."""
    out = []
    for link in links:
        wrap = "~" if link.wrap else ""
        if link.peer_worker is not None:
            if link.a == index:
                out.append(f"w{link.peer_worker}:{link.b}{wrap}")
        elif index in (link.a, link.b):
            out.append(f"{link.b if link.a == index else link.a}{wrap}")
    return out
