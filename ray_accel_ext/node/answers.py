"""A backend's answer checked again in the node-start process, and bounded before Ray sees it.

What crosses the process boundary from a worker is data, and even an in-process backend class can
answer differently each time it is asked (a metaclass property): the declarations that become Ray
resource names and label prefixes are validated here, where they are used, not only where the
backend was loaded. A description is bounded by what Ray accepts and by what a node can publish:

* the declarations: ``resource_name`` a Ray custom-resource name (no ``:``, blank or NUL, none of
  Ray's own), ``label_prefix`` a DNS subdomain outside ``ray.io``, ``rayaccel.io`` and, for a
  third-party backend, ``*.rayaccel.io`` (reserved for the in-tree families);
* ``resource_quantity`` finite, at least 0, at most Ray's ``MAX_RESOURCE_QUANTITY`` (1e14):
  ``ray start`` refuses more;
* at most :data:`MAX_DEVICES` devices, :data:`MAX_LINKS` links and :data:`MAX_NICS` NICs (the
  checks that follow are linear, but a node publishes one list per device);
* the attributes (labels) of all backends of a node together at most :data:`MAX_LABELS` pairs and
  :data:`MAX_LABEL_BYTES` bytes: the raylet gets its labels on its command line, and Linux refuses
  one argument over 128 KiB ("Argument list too long"). What is cut is said in the description's
  problems, so the node is degraded with the keys named.

A declaration or a bound that cannot be cut is a :class:`~ray_accel_ext.errors.DescriptionError`:
that backend's answer is refused and named, the other backends' devices stay.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from ..errors import DescriptionError
from ..labels import PROJECT_PREFIX, RAY_PREFIX, is_valid_prefix
from ..model import NodeDescription, Problem
from ..problems import ANSWER_TOO_LARGE, DECLARATION_INVALID, LABELS_CUT, PREFIX_RESERVED, VALUE_BOUNDED

__all__ = [
    "MAX_RESOURCE_QUANTITY",
    "MAX_DEVICES",
    "MAX_LINKS",
    "MAX_NICS",
    "MAX_LABELS",
    "MAX_LABEL_BYTES",
    "LabelBudget",
    "declaration_errors",
    "declaration_problems",
    "bounded",
    "check_counts",
    "check_lengths",
]

# Ray 2.60 ray._private.ray_constants.MAX_RESOURCE_QUANTITY: `ray start` refuses a larger quantity.
MAX_RESOURCE_QUANTITY = 100e12
MAX_DEVICES = 4096
MAX_LINKS = 1 << 16
MAX_NICS = 1024
MAX_LABELS = 256
MAX_LABEL_BYTES = 32 << 10
_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,62}")
_RESOURCE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")
_RAY_OWN = frozenset({"CPU", "memory", "object_store_memory"})
_ENV_RE = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")


def declaration_errors(info: Any, *, in_tree: bool) -> list[str]:
    """Why the declarations ``info`` (a ``BackendInfo``) cannot be used; empty when they can."""
    return [text for _, text in declaration_problems(info, in_tree=in_tree)]


def declaration_problems(info: Any, *, in_tree: bool) -> list[tuple[str, str]]:
    """:func:`declaration_errors` as ``(problem code, text)``: ``prefix-reserved`` or
    ``declaration-invalid``."""
    out: list[tuple[str, str]] = []
    name, resource, prefix = info.name, info.resource_name, info.label_prefix
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        out.append((DECLARATION_INVALID, f"name {str(name)[:40]!r} is not lower_snake_case"))
    if not isinstance(resource, str) or not _RESOURCE_RE.fullmatch(resource) or resource in _RAY_OWN:
        out.append((DECLARATION_INVALID, f"resource_name {str(resource)[:40]!r} is not a usable Ray custom-resource name"))
    if not is_valid_prefix(prefix):
        out.append((DECLARATION_INVALID, f"label_prefix {str(prefix)[:40]!r} is not a DNS subdomain"))
    elif prefix in (RAY_PREFIX, PROJECT_PREFIX) or prefix.endswith("." + RAY_PREFIX):
        out.append((PREFIX_RESERVED, f"label_prefix {prefix!r} is reserved (Ray owns ray.io, the core schema rayaccel.io)"))
    elif not in_tree and prefix.endswith("." + PROJECT_PREFIX):
        out.append((PREFIX_RESERVED,
                    f"label_prefix {prefix!r} is reserved: *.{PROJECT_PREFIX} belongs to the in-tree families"))
    env_vars = (info.visible_devices_env_var, *info.node_start_env_vars)
    bad = [v for v in env_vars if v is not None and not (isinstance(v, str) and _ENV_RE.fullmatch(v))]
    if bad:
        out.append((DECLARATION_INVALID,
                    f"environment variable name {str(bad[0])[:40]!r} is not an upper-case variable name"))
    return out


class LabelBudget:
    """The label pairs and bytes a node may still publish, shared by every backend's answer."""

    def __init__(self, pairs: int = MAX_LABELS, size: int = MAX_LABEL_BYTES) -> None:
        self.pairs, self.size = pairs, size

    def take(self, key: str, value: str) -> bool:
        cost = len(key.encode("utf-8", "replace")) + len(value.encode("utf-8", "replace")) + 2
        if self.pairs < 1 or cost > self.size:
            return False
        self.pairs -= 1
        self.size -= cost
        return True


def check_counts(data: Any) -> None:
    """The list bounds on a worker's answer before it is rebuilt (rebuilding 20,000 devices takes
    seconds of the node start); DescriptionError naming the list."""
    if not isinstance(data, dict):
        return  # from_dict says what is wrong
    for field, limit in (("devices", MAX_DEVICES), ("links", MAX_LINKS), ("nics", MAX_NICS)):
        value = data.get(field)
        if isinstance(value, list) and len(value) > limit:
            raise DescriptionError(f"{len(value)} entries, at most {limit} on one node; the answer is refused", field,
                                   code=ANSWER_TOO_LARGE)
    attributes = data.get("attributes")
    if isinstance(attributes, dict) and len(attributes) > 16 * MAX_LABELS:
        raise DescriptionError(f"{len(attributes)} attributes, far more than the {MAX_LABELS} labels a node "
                               "publishes; the answer is refused", "attributes", code=ANSWER_TOO_LARGE)


def check_lengths(desc: NodeDescription) -> None:
    """The list bounds of :func:`check_counts` on a description, before it is turned into data
    (in a worker: 20,000 devices take seconds to serialize); DescriptionError naming the list."""
    for field, limit in (("devices", MAX_DEVICES), ("links", MAX_LINKS), ("nics", MAX_NICS)):
        count = len(getattr(desc, field))
        if count > limit:
            raise DescriptionError(f"{count} entries, at most {limit} on one node; the answer is refused", field,
                                   code=ANSWER_TOO_LARGE)


def bounded(desc: NodeDescription, budget: LabelBudget) -> NodeDescription:
    """``desc`` within the bounds of the module doc: attributes past the node's label budget cut
    (said in its problems); DescriptionError for a quantity or a list no node can publish."""
    quantity = desc.resource_quantity
    if not math.isfinite(quantity) or not 0 <= quantity <= MAX_RESOURCE_QUANTITY:
        raise DescriptionError(f"{quantity!r} is outside 0..{MAX_RESOURCE_QUANTITY:g}, what Ray accepts; "
                               "the answer is refused", "resource_quantity", code=VALUE_BOUNDED)
    check_lengths(desc)
    kept: dict[str, str] = {}
    cut: list[str] = []
    for key, value in desc.attributes.items():
        if budget.take(key, value):
            kept[key] = value
        else:
            cut.append(key)
    if not cut:
        return desc
    said = (f"attributes: {len(cut)} of {len(desc.attributes)} left out ({', '.join(k[:60] for k in cut[:3])}"
            f"{', ...' if len(cut) > 3 else ''}): a node publishes at most {MAX_LABELS} labels of "
            f"{MAX_LABEL_BYTES} bytes in all")
    return dataclasses.replace(desc, attributes=kept, problems=(*desc.problems, Problem(code=LABELS_CUT, message=said)))
