"""docs/labels.md names every key of ray_accel_ext/labels.py and every key a recorded node carries."""

from __future__ import annotations

import json
import re

from ray_accel_ext import labels as L
from tests.support.paths import HOSTS, REPO

DOC = (REPO / "docs" / "labels.md").read_text()
CONSTANTS = {name: getattr(L, name) for name in dir(L) if name.isupper() and isinstance(getattr(L, name), str)
             and "/" in getattr(L, name)}


def test_every_key_constant_is_documented_with_its_name():
    assert set(L.SCHEMA_KEYS) <= set(CONSTANTS.values())
    for name, key in CONSTANTS.items():
        assert f"`{key}`" in DOC, f"{key} ({name}) is not in docs/labels.md"
        assert f"`{name}`" in DOC or name.endswith("_PREFIX"), f"docs/labels.md does not name the constant {name}"
    for field, name in zip(L.FAMILY_FIELDS, ("FAMILY_SKU", "FAMILY_COUNT", "FAMILY_MEMORY_GIB")):
        assert f"`rayaccel.io/<backend>-{field}`" in DOC and f"`{name}`" in DOC


def test_every_label_of_every_recorded_node_is_documented():
    family = re.compile(rf"^{re.escape(L.PROJECT_PREFIX)}/[a-z0-9-]+-({'|'.join(L.FAMILY_FIELDS)})$")
    seen = set()
    for golden in sorted(HOSTS.glob("*/*/expected.json")):
        seen.update(json.loads(golden.read_text())["ray"]["labels"])
    undocumented = sorted(k for k in seen if f"`{k}`" not in DOC and not family.match(k) and k not in DOC)
    assert not undocumented, undocumented
