"""A web page of the cluster's accelerators (``ray-accel dashboard``).

Ray's dashboard shows node labels, not accelerators and how they are wired. This page draws, as
SVG from ``/api/cluster`` alone (:mod:`.document`; the same JSON ``ray-accel cluster --format
json`` prints):

* each fabric domain as its shape: a TPU slice as its chip grid in the slice's coordinates with
  host boundaries, an NVLink domain as its trays in rank order, an UltraServer as its hosts and
  NeuronLink, a rack or single host as its hosts; collapsed to one tile each until opened;
* each host like ``lstopo``: NUMA nodes, host bridges, PCIe switches, the devices and NICs behind
  them, the fabric links, and the ``nvidia-smi topo -m`` matrix of path classes;
* who holds what (:mod:`.holders`): placement groups and the tasks and actors holding devices,
  with links to their pages in Ray's own dashboard;
* per-device utilisation and memory where Ray exports them, and the project's placement and
  discovery metrics (:mod:`.metrics`), as sparklines refreshed live;
* degraded nodes with their reasons in plain words and the ``ray-accel doctor`` fix.

Filtering uses Ray's label-selector syntax with the semantics of
:func:`ray_accel_ext.placement.match_selector`. The server (:mod:`.server`) is the standard
library's, hardened: loopback by default, a token beyond it, the Host header checked, a fixed
connection pool. The page is static files under ``assets/`` (no CDN, works offline).
"""

from .document import DOCUMENT_SCHEMA, accelerator_resources, build_document
from .holders import Holder, HolderReport, merge_holders, read_holders
from .metrics import MetricsHistory
from .server import COOKIE, TOKEN_ENV, DashboardRefused, DashboardServer, asset_names, is_loopback
from .source import ClusterSource

__all__ = [
    "DashboardServer",
    "DashboardRefused",
    "ClusterSource",
    "build_document",
    "accelerator_resources",
    "merge_holders",
    "read_holders",
    "Holder",
    "HolderReport",
    "MetricsHistory",
    "asset_names",
    "is_loopback",
    "DOCUMENT_SCHEMA",
    "TOKEN_ENV",
    "COOKIE",
]
