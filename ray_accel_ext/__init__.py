"""ray_accel_ext: accelerator discovery for Ray.

Finds what accelerators a node has and how they are wired (SKU, device links, NUMA and NIC
affinity, TPU slice / NVLink domain / UltraServer / rack) and hands that to Ray as resources and
node labels. Start paths:

* ``RAY_START_HOOK=ray_accel_ext.ray_hook.start_hook ray start ...``
* ``ray_accel_ext.init(...)`` instead of ``ray.init(...)`` for a local cluster
* ``ray-accel ray-args`` for any other launcher

Vendors implement :class:`ray_accel_ext.backend.AcceleratorBackend` in their own package.
"""

from __future__ import annotations

from .errors import (
    BackendLoadError,
    DescriptionError,
    DiscoveryError,
    ProviderError,
    RayAccelError,
    RuntimeTopologyError,
    SchedulingError,
)
from .host import open_host
from .model import NodeDescription, NodeInventory
from .node.adapter import RayNodeSpec, to_ray_node
from .node.discovery import discover
from .node.hook import init, node_spec

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "discover",
    "to_ray_node",
    "node_spec",
    "init",
    "open_host",
    "NodeDescription",
    "NodeInventory",
    "RayNodeSpec",
    "RayAccelError",
    "DiscoveryError",
    "ProviderError",
    "SchedulingError",
    "RuntimeTopologyError",
    "BackendLoadError",
    "DescriptionError",
]


def __dir__() -> list[str]:
    return sorted(__all__)
