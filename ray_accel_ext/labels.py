"""Label schema version 1: every key the project publishes or reads, the placement levels, Ray's
TPU pod-type rule, label key and value syntax as Ray's selectors accept them, and sanitising of
outside text. A new label key is added here and nowhere else, and documented in ``docs/labels.md``.

Ray stores label values it cannot select on (``ray.init(labels=...)`` does not validate), so we
check everything we emit against the selector rules (``ray/_private/label_utils.py``): a value is
empty or at most 63 characters of ``[A-Za-z0-9_.-]`` that start and end alphanumeric; a key is an
optional DNS-subdomain prefix (at most 253 characters), ``/``, and a name that follows the value
rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from .redact import redact

__all__ = [
    "RAY_PREFIX",
    "PROJECT_PREFIX",
    "SCHEMA_KEYS",
    "LEVELS",
    "project_key",
    "family_key",
    "FAMILY_FIELDS",
    "ray_tpu_pod_type",
    "normalize_tpu_type",
    "is_valid_value",
    "is_valid_key",
    "is_valid_prefix",
    "key_prefix",
    "sanitize_value",
]

RAY_PREFIX = "ray.io"
PROJECT_PREFIX = "rayaccel.io"


def project_key(name: str) -> str:
    """``rayaccel.io/<name>``."""
    return f"{PROJECT_PREFIX}/{name}"


def family_key(backend: str, name: str) -> str:
    """A secondary family's key, ``rayaccel.io/<backend>-<name>`` (``nvidia-gpu-sku``); ``name`` is
    one of :data:`FAMILY_FIELDS`."""
    return project_key(f"{backend.replace('_', '-')}-{name}")


# What every family other than the primary one gets under family_key(backend, <field>): its SKU,
# device count and memory per device (the primary family's are SKU, COUNT, MEMORY_GIB).
FAMILY_SKU, FAMILY_COUNT, FAMILY_MEMORY_GIB = FAMILY_FIELDS = ("sku", "count", "memory-gib")


# -- keys Ray defines (reference/ray-2.60.md sections 4 and 5) -------------------------------------
NODE_ID = f"{RAY_PREFIX}/node-id"  # Ray's own, on every node
ACCELERATOR_TYPE = f"{RAY_PREFIX}/accelerator-type"
TPU_SLICE_NAME = f"{RAY_PREFIX}/tpu-slice-name"
TPU_WORKER_ID = f"{RAY_PREFIX}/tpu-worker-id"
TPU_TOPOLOGY = f"{RAY_PREFIX}/tpu-topology"
TPU_POD_TYPE = f"{RAY_PREFIX}/tpu-pod-type"
# + a sub-shape (``ray.io/tpu-subslice-2x4``): the index of this host's block of that shape, as
# Ray's newest TPU code numbers subslices (node/tpu_subslices.py).
TPU_SUBSLICE_PREFIX = f"{RAY_PREFIX}/tpu-subslice-"
GPU_DOMAIN = f"{RAY_PREFIX}/gpu-domain"

# -- the project's keys (DESIGN section 4) ---------------------------------------------------------
SCHEMA = project_key("schema")
DISCOVERY = project_key("discovery")
FAMILIES = project_key("families")
VENDOR = project_key("vendor")
SKU = project_key("sku")
GENERATION = project_key("generation")
COUNT = project_key("count")
MEMORY_GIB = project_key("memory-gib")
INTERCONNECT = project_key("interconnect")
FABRIC_DOMAIN = project_key("fabric-domain")
FABRIC_HOSTS = project_key("fabric-hosts")
FABRIC_WORKER = project_key("fabric-worker")
FABRIC_TOPOLOGY = project_key("fabric-topology")
CLUSTER = project_key("cluster")
BLOCK = project_key("block")
RACK = project_key("rack")
NUMA_NODES = project_key("numa-nodes")
RDMA_NICS = project_key("rdma-nics")
GPUDIRECT = project_key("gpudirect")
MIG_GPUS = project_key("mig-gpus")
MIG_INSTANCES = project_key("mig-instances")
MIG_PROFILES = project_key("mig-profiles")
DEGRADED_LINKS = project_key("degraded-links")

SCHEMA_KEYS = (
    ACCELERATOR_TYPE, TPU_SLICE_NAME, TPU_WORKER_ID, TPU_TOPOLOGY, TPU_POD_TYPE, GPU_DOMAIN,
    SCHEMA, DISCOVERY, FAMILIES, VENDOR, SKU, GENERATION, COUNT, MEMORY_GIB, INTERCONNECT,
    FABRIC_DOMAIN, FABRIC_HOSTS, FABRIC_WORKER, FABRIC_TOPOLOGY, CLUSTER, BLOCK, RACK,
    NUMA_NODES, RDMA_NICS, GPUDIRECT, MIG_GPUS, MIG_INSTANCES, MIG_PROFILES, DEGRADED_LINKS,
)


def partition_resource(profile: str) -> str:
    """The Ray resource of one MIG profile, GPU Feature Discovery's ``mixed`` name without its
    ``nvidia.com/`` prefix (``mig-1g.10gb``; ``+`` written ``.`` as GFD does: ``mig-1g.10gb.me``)."""
    return "mig-" + profile.replace("+", ".")

# Placement levels: a domain is the set of nodes sharing one value of the level's key.
LEVELS: Mapping[str, str] = MappingProxyType({"fabric": FABRIC_DOMAIN, "rack": RACK, "block": BLOCK})

# Ray 2.60 TPUAcceleratorManager.is_valid_tpu_accelerator_type
# (ray-project/ray python/ray/_private/accelerators/tpu.py).
_RAY_POD_TYPE_RE = re.compile(r"^(v|tpu)\d+[a-zA-Z]*-\d+$", re.ASCII)  # \d: ASCII digits only


def normalize_tpu_type(text: str) -> str:
    """Ray 2.60's ``normalize_tpu_accelerator_type``: lower-cased, a ``tpu``/``tpu-`` prefix
    written ``v`` (``TPU7x-8`` -> ``v7x-8``)."""
    return re.sub(r"^tpu-?v?", "v", text.strip().lower())


def ray_tpu_pod_type(product: str | None) -> str | None:
    """Ray's pod type for an accelerator-type string, or None where Ray would have none.

    Ray 2.60 accepts the string only if it matches ``^(v|tpu)\\d+[a-zA-Z]*-\\d+$``
    (``TPUAcceleratorManager.get_current_node_tpu_pod_type``) and then normalises it
    (:func:`normalize_tpu_type`).
    """
    if not product or not _RAY_POD_TYPE_RE.match(product):
        return None
    return normalize_tpu_type(product)


_VALUE_RE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
_DNS_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_PREFIX_RE = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


def is_valid_value(value: object) -> bool:
    """True when Ray's label selectors can match ``value``."""
    return isinstance(value, str) and bool(_VALUE_RE.fullmatch(value))


def is_valid_prefix(prefix: object) -> bool:
    """True for a DNS-subdomain label prefix such as ``nvidia.com``."""
    return isinstance(prefix, str) and 0 < len(prefix) <= 253 and bool(_PREFIX_RE.fullmatch(prefix))


def is_valid_key(key: object) -> bool:
    """True for ``prefix/name`` or ``name`` keys that Ray accepts."""
    if not isinstance(key, str) or not key:
        return False
    prefix, sep, name = key.rpartition("/")
    if sep and not is_valid_prefix(prefix):
        return False
    return bool(name) and bool(_VALUE_RE.fullmatch(name))


def key_prefix(key: str) -> str:
    """The DNS prefix of ``key`` (``""`` when it has none)."""
    return key.rpartition("/")[0]


def sanitize_value(text: object) -> str:
    """Turn outside text (metadata, sysfs, tool output) into a selectable label value.

    Secrets are taken out first (:func:`ray_accel_ext.redact.redact`: a credential in metadata
    must not become a label). Runs of characters outside ``[A-Za-z0-9_.-]`` become ``-``; the result is cut to 63
    characters and trimmed until it starts and ends alphanumeric. Returns ``""`` when nothing
    usable is left (callers then omit the label).
    """
    # Redacted first: once sanitised, "https://user:pass@host" no longer looks like a URL.
    value = _BAD_CHARS.sub("-", redact(str(text)).strip())[:63]
    start, end = 0, len(value)
    while start < end and not value[start].isalnum():
        start += 1
    while end > start and not value[end - 1].isalnum():
        end -= 1
    value = value[start:end]
    # isalnum() accepts non-ASCII digits/letters that the regex rejects; _BAD_CHARS removed them.
    return value if _VALUE_RE.fullmatch(value) else ""


# -- TPU backend attributes the adapter reads (vendor prefix ``tpu.rayaccel.io``) -----------------
# A host whose slice is only partly known (a worker id, a slice name or a topology without the rest)
# has no fabric domain; these carry the parts Ray 2.60's own TPU manager would publish as its
# ``ray.io/tpu-*`` labels, so ours are the same field by field.
TPU_ATTR_PREFIX = "tpu.rayaccel.io"
TPU_ATTR_ACCELERATOR_TYPE = f"{TPU_ATTR_PREFIX}/accelerator-type"
TPU_ATTR_SLICE_NAME = f"{TPU_ATTR_PREFIX}/slice-name"
TPU_ATTR_WORKER_ID = f"{TPU_ATTR_PREFIX}/worker-id"
TPU_ATTR_TOPOLOGY = f"{TPU_ATTR_PREFIX}/topology"
# A slice's geometry: one host's chip block and the host grid, x by y by z (``2x2x1``).
TPU_ATTR_CHIP_BLOCK = f"{TPU_ATTR_PREFIX}/chips-per-host-bounds"
TPU_ATTR_HOST_BOUNDS = f"{TPU_ATTR_PREFIX}/host-bounds"
