"""What the start hook hands on to the rest of its node's start, so nothing asks again.

Two things, both through the environment of the ``ray start`` process (the raylet and every
worker process it starts inherit it, ``ray/_private/services.py`` ``start_raylet``):

* **Ray's own TPU manager's variables.** In the same ``ray start``, after the hook, Ray 2.60's
  ``TPUAcceleratorManager`` reads ``TPU_ACCELERATOR_TYPE``, ``TPU_NAME``, ``TPU_WORKER_ID`` and
  ``TPU_TOPOLOGY`` and asks the GCE metadata server (no timeout, up to 9 GETs,
  ``reference/ray-2.60.md`` 8.9) only for those that are empty. :func:`ray_tpu_manager_env`
  gives it what it would fetch: our answer for each, the same one our ``ray.io/tpu-*`` labels
  carry. Where we have none it gives a value Ray 2.60 reads as none without asking: a
  ``TPU_ACCELERATOR_TYPE`` or ``TPU_WORKER_ID`` that its own checks refuse (``none``: not a pod
  type, not an int), a blank ``TPU_TOPOLOGY`` (Ray strips it to nothing), and for the slice name,
  which Ray takes as it is, this host's name (a slice of one host is what Ray may then label;
  without a pod type it counts or reserves no slice). A variable already set is left alone.
  Workers inherit the values, and Ray's worker-side helpers (``ray.util.tpu.get_current_pod_name``
  ...) read them the same way, so they make no metadata request either. Frameworks read these
  four variables only with ``TPU_SKIP_MDS_QUERY`` set (JAX ``GkeTpuCluster``, torch_xla's env
  fallback, hardware.md 4.2), which is GKE's: there nothing is written (GKE's TPU plugin owns the
  variables; a pod missing some, like a single-host TPU7x's ``TPU_NAME``, keeps missing them).
* **The node's description** (:data:`NODE_INVENTORY_ENV`, compact JSON of the
  :class:`~ray_accel_ext.model.NodeInventory`): worker-side helpers
  (:func:`ray_accel_ext.worker.my_devices`, :func:`ray_accel_ext.backends.tpu.worker.my_tpu_chips`) read it
  back with :func:`handed_off_inventory` instead of describing the node again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..errors import DescriptionError
from ..labels import TPU_ATTR_ACCELERATOR_TYPE, is_valid_value, ray_tpu_pod_type
from ..model import NodeInventory

__all__ = [
    "MAX_INVENTORY_ENV_BYTES",
    "NODE_INVENTORY_ENV",
    "RAY_NONE",
    "handed_off_inventory",
    "node_inventory",
    "inventory_env",
    "node_env",
    "ray_tpu_manager_env",
]

NODE_INVENTORY_ENV = "RAY_ACCEL_NODE_INVENTORY"
# Linux caps one environment string at 128 KiB (MAX_ARG_STRLEN); stay well under it.
MAX_INVENTORY_ENV_BYTES = 64 * 1024
# Values Ray 2.60 reads as "unknown" without a metadata request (TPUAcceleratorManager:
# is_valid_tpu_accelerator_type refuses "none"; int("none") raises and is caught; a blank
# topology strips to "").
RAY_NONE = {"TPU_ACCELERATOR_TYPE": "none", "TPU_WORKER_ID": "none", "TPU_TOPOLOGY": " "}
_SKIP_MDS = ("1", "true", "yes")


def ray_tpu_manager_env(
    inventory: NodeInventory, ident: Mapping[str, str], environ: Mapping[str, str], hostname: str | None
) -> dict[str, str]:
    """The variables to set so Ray's TPU manager reads this node's slice instead of asking the
    metadata server; empty on a node without TPU chips. ``ident`` is the slice identity the node
    start computed with Ray's view of the node (``node.adapter.ray_tpu_identity``)."""
    desc = next((d for d in inventory.descriptions if d.resource_name == "TPU" and d.devices), None)
    if desc is None:
        return {}
    raw_type = desc.fabric.product if desc.fabric is not None else desc.attributes.get(TPU_ATTR_ACCELERATOR_TYPE)
    ours = {
        "TPU_ACCELERATOR_TYPE": raw_type if ray_tpu_pod_type(raw_type) else None,
        "TPU_NAME": ident.get("name"),
        "TPU_WORKER_ID": ident.get("worker"),
        "TPU_TOPOLOGY": ident.get("topology"),
    }
    if environ.get("TPU_SKIP_MDS_QUERY", "").strip().lower() in _SKIP_MDS:
        return {}  # GKE: its TPU plugin owns these variables, and frameworks read them as facts
    out: dict[str, str] = {}
    for key, value in ours.items():
        if environ.get(key):
            continue
        stand_in = RAY_NONE.get(key) if key != "TPU_NAME" else hostname
        if value or stand_in:
            out[key] = value or stand_in
    return out


def inventory_env(inventory: NodeInventory) -> dict[str, str]:
    """``{NODE_INVENTORY_ENV: <json>}``, or nothing when the description is too large for one
    environment variable (workers then describe the node themselves, without metadata)."""
    text = json.dumps(inventory.to_dict(), separators=(",", ":"), sort_keys=True)
    return {NODE_INVENTORY_ENV: text} if len(text.encode()) <= MAX_INVENTORY_ENV_BYTES else {}


def node_env(
    inventory: NodeInventory, ident: Mapping[str, str], environ: Mapping[str, str], hostname: str | None,
    *, tpu_manager: bool = True,
) -> dict[str, str]:
    """Everything the node start hands on: Ray's TPU manager's variables (unless ``tpu_manager`` is
    false: its interface is not the one this package knows) and the description, each a value a
    process environment can hold."""
    tpu = ray_tpu_manager_env(inventory, ident, environ, hostname) if tpu_manager else {}
    out = {**tpu, **inventory_env(inventory)}
    for key, value in list(out.items()):
        # Ray's TPU manager makes a resource of TPU_NAME unchecked: a value that is no valid label
        # value (a NUL, 140,000 characters) is handed on as Ray's own "none" or this host's name,
        # never as itself; a NUL cannot be in a process environment at all.
        if key.startswith("TPU_") and value not in RAY_NONE.values() and not is_valid_value(value):
            stand_in = RAY_NONE.get(key) or (hostname if hostname and is_valid_value(hostname) else None)
            if stand_in is None:
                del out[key]
            else:
                out[key] = stand_in
        elif "\x00" in value:
            del out[key]
    return out


def handed_off_inventory(environ: Mapping[str, str]) -> NodeInventory | None:
    """The inventory :func:`inventory_env` handed on, read back; None when there is none or it is
    not ours or damaged."""
    text = environ.get(NODE_INVENTORY_ENV)
    if not text:
        return None
    try:
        return NodeInventory.from_dict(json.loads(text))
    except (ValueError, DescriptionError):
        return None


def node_inventory(environ: Mapping[str, str] | None = None) -> NodeInventory:
    """This node's inventory as its start hook handed it on, else described from local files
    only (no metadata request): what a worker or a per-node actor reads."""
    import os

    from ..host import host_from_env
    from ..host.protocol import METADATA_ENV
    from .discovery import discover

    environ = os.environ if environ is None else environ
    handed = handed_off_inventory(environ)
    return handed if handed is not None else discover(host_from_env({**environ, METADATA_ENV: "off"}))
