"""Label key and value syntax, as Ray's selectors accept them, and sanitising of outside text.

Ray stores label values it cannot select on (``ray.init(labels=...)`` does not validate), so we
check everything we emit against the selector rules (``ray/_private/label_utils.py``): a value is
empty or at most 63 characters of ``[A-Za-z0-9_.-]`` that start and end alphanumeric; a key is an
optional DNS-subdomain prefix (at most 253 characters), ``/``, and a name that follows the value
rule.
"""

from __future__ import annotations

import re

__all__ = [
    "RAY_PREFIX",
    "PROJECT_PREFIX",
    "is_valid_value",
    "is_valid_key",
    "is_valid_prefix",
    "key_prefix",
    "sanitize_value",
]

RAY_PREFIX = "ray.io"
PROJECT_PREFIX = "rayaccel.io"

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

    Runs of characters outside ``[A-Za-z0-9_.-]`` become ``-``; the result is cut to 63
    characters and trimmed until it starts and ends alphanumeric. Returns ``""`` when nothing
    usable is left (callers then omit the label).
    """
    value = _BAD_CHARS.sub("-", str(text).strip())[:63]
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
