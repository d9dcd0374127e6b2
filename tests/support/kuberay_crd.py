"""Strict validation of RayCluster manifests against KubeRay's CRD (vendored, ``tests/data/kuberay``).

The API server validates a custom resource against the CRD's structural OpenAPI v3 schema, and
with strict field validation (``kubectl apply --validate=strict``, the default of ``kubectl``
since 1.27) rejects unknown and duplicated fields. Here the same rules are applied with
``jsonschema``:

* every object schema that lists ``properties`` and neither ``additionalProperties`` nor
  ``x-kubernetes-preserve-unknown-fields`` gets ``additionalProperties: false`` (pruning would drop
  such a field; strict validation rejects it);
* the root ``metadata`` (``type: object`` in the CRD; the API server checks it as ObjectMeta) is
  checked against the ObjectMeta fields a manifest may set;
* ``x-kubernetes-list-type: map`` / ``set`` lists must not repeat a key / an item;
* ``nullable: true`` admits null;
* of ``x-kubernetes-validations`` (CEL), the rules of the form ``self in [...]`` are checked;
  transition rules (``self == oldSelf``) only apply to updates;
* YAML mappings must not repeat a key.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.support.paths import TESTS

CRD = TESTS / "data" / "kuberay" / "ray.io_rayclusters.yaml"

# ObjectMeta fields a manifest sets (k8s.io/apimachinery ObjectMeta); the rest are server-set.
_OBJECT_META = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
    },
}
_CEL_IN = re.compile(r"^self in \[(.*)\]$")


class _StrictLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicated keys (PyYAML keeps the last one silently)."""


def _no_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate field {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def load_documents(path: Path) -> list[dict]:
    """Every YAML document of ``path``, duplicated keys refused."""
    return [d for d in yaml.load_all(path.read_text(), Loader=_StrictLoader) if d is not None]


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        node = {k: _strict(v) for k, v in node.items()}
        if node.get("nullable") and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        if (node.get("type") == "object" and "properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@functools.lru_cache(maxsize=None)
def schema(version: str = "v1") -> dict:
    """The CRD's schema for ``version``, made strict as described above."""
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (entry,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    root = _strict(copy.deepcopy(entry["schema"]["openAPIV3Schema"]))
    root["properties"]["metadata"] = _OBJECT_META
    root["properties"]["apiVersion"] = {"enum": [f"{crd['spec']['group']}/{version}"]}
    root["properties"]["kind"] = {"enum": [crd["spec"]["names"]["kind"]]}
    root["required"] = ["apiVersion", "kind", "metadata", "spec"]
    return root


def _list_map_keys(validator, keys, instance, schema):
    if not validator.is_type(instance, "array") or schema.get("x-kubernetes-list-type") != "map":
        return
    seen = set()
    for item in instance:
        if isinstance(item, dict):
            key = tuple(item.get(k) for k in keys)
            if key in seen:
                yield jsonschema.ValidationError(f"duplicate entry for key {dict(zip(keys, key))}")
            seen.add(key)


def _list_type(validator, kind, instance, schema):
    if kind == "set" and validator.is_type(instance, "array") and len({repr(i) for i in instance}) != len(instance):
        yield jsonschema.ValidationError("duplicate entries in a set list")


def _cel(validator, rules, instance, schema):
    for rule in rules:
        m = _CEL_IN.match(rule.get("rule", "").strip())
        if m:
            allowed = [v.strip().strip("'\"") for v in m.group(1).split(",")]
            if instance not in allowed:
                yield jsonschema.ValidationError(rule.get("message") or f"{instance!r} not in {allowed}")


_Validator = jsonschema.validators.extend(
    jsonschema.Draft4Validator,
    {"x-kubernetes-list-map-keys": _list_map_keys, "x-kubernetes-list-type": _list_type,
     "x-kubernetes-validations": _cel},
)


def errors(doc: dict, version: str = "v1") -> list[str]:
    """Every violation, as ``path: message``; empty when ``doc`` is a valid RayCluster."""
    validator = _Validator(schema(version))
    out = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        path = ".".join(str(p) for p in err.absolute_path) or "(root)"
        out.append(f"{path}: {err.message}")
    return out
