"""CHECKLIST.md and the suite stay in step: every test id it names exists, item for item."""

from __future__ import annotations

import re

from ray_accel_ext.conformance import base
from ray_accel_ext.conformance.checklist import ITEMS
from tests.support.paths import REPO

CHECKLIST = REPO / "CHECKLIST.md"
SUITE_CLASSES = [getattr(base, name) for name in base.__all__]


def _sections() -> list[tuple[str, list[str]]]:
    text = CHECKLIST.read_text()
    parts = re.split(r"^## \d+\. (.+)$", text, flags=re.M)[1:]
    return [(title.strip(), re.findall(r"`(Base\w+Tests::test_\w+)`", body)) for title, body in zip(parts[::2], parts[1::2])]


def _suite_ids() -> set[str]:
    return {f"{cls.__name__}::{name}" for cls in SUITE_CLASSES for name in vars(cls) if name.startswith("test_")}


def test_every_test_id_in_checklist_exists_in_the_suite():
    named = {t for _, ids in _sections() for t in ids}
    assert named, "CHECKLIST.md names no test ids"
    assert not named - _suite_ids(), f"CHECKLIST.md names tests the suite does not have: {sorted(named - _suite_ids())}"


def test_checklist_md_matches_the_packaged_checklist():
    sections = _sections()
    assert [t for t, _ in sections] == [i.title for i in ITEMS]
    for (title, ids), item in zip(sections, ITEMS):
        assert ids == list(item.tests), f"item {title!r}: CHECKLIST.md names {ids}, checklist.py {list(item.tests)}"


def test_every_suite_test_is_on_the_checklist():
    listed = {t for i in ITEMS for t in i.tests}
    assert not _suite_ids() - listed, f"suite tests no checklist item names: {sorted(_suite_ids() - listed)}"
