"""Golden plans (tests/transport/golden/*.json) and the variable catalogue in docs/transport.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ray_accel_ext.transport import LIBRARIES, VARIABLES

from .goldens import CASES, GOLDEN, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "transport.md"


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_matches_its_golden(name):
    expected = (GOLDEN / f"{name}.json").read_text()
    assert render(name) == expected, "regenerate with: python -m tests.transport.goldens --update"


def test_goldens_use_only_catalogued_variables_and_cover_every_family():
    used = set()
    for path in GOLDEN.glob("*.json"):
        for rank in json.loads(path.read_text())["ranks"]:
            used |= set(rank["env"])
    assert used <= set(VARIABLES), sorted(used - set(VARIABLES))
    assert {"NCCL_IB_HCA", "NCCL_MNNVL_ENABLE", "NEURON_RT_ROOT_COMM_ID", "MEGASCALE_SLICE_ID", "FI_PROVIDER",
            "UCX_NET_DEVICES"} <= used


def test_every_variable_is_documented_with_its_source():
    text = DOC.read_text()
    row = re.compile(r"^\| `([A-Z0-9_]+)` \|.*\| <?(https://[^ |>]+)>? \|$", re.M)
    rows = {m.group(1): m.group(2) for m in row.finditer(text)}
    assert set(rows) == set(VARIABLES), sorted(set(rows) ^ set(VARIABLES))
    for name, url in VARIABLES.items():
        assert rows[name] == url, name
    for module in LIBRARIES:
        assert f"`{module.__name__.rsplit('.', 1)[1]}.py`" in text
