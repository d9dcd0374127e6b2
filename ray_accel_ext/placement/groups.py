"""Reading known placement groups one at a time, so the cost follows the groups alive.

Ray keeps every group it ever made in its placement-group table, ``REMOVED`` ones included, and
``ray.util.placement_group_table()`` without an argument reads and decodes all of them (one GCS
call whose answer grows with the cluster's history). Given a group it asks the GCS for that one
entry (``GetPlacementGroup`` by id, ``ray/_private/state.py``), whatever the table's size.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["UNPLACED", "group_entry", "group_entries"]

# What Ray reports as the node of a bundle that is not placed (yet).
UNPLACED = frozenset({"", "0" * 56, "f" * 56})


def group_entry(pg_hex: str) -> dict[str, Any]:
    """Ray's table entry (``state``, ``bundles_to_node_id``, ...) for the group with hex id
    ``pg_hex``; ``{}`` when Ray does not know it. Errors of the GCS call propagate."""
    import ray
    from ray.util import placement_group_table
    from ray.util.placement_group import PlacementGroup

    try:
        pg_id = ray.PlacementGroupID(bytes.fromhex(pg_hex))
    except (TypeError, ValueError):
        return {}  # not an id Ray could have made
    return placement_group_table(PlacementGroup(pg_id)) or {}


def group_entries(pg_hexes: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The table entries of the given groups only, shaped as ``placement_group_table()``."""
    return {pg: entry for pg in sorted(set(pg_hexes)) if (entry := group_entry(pg))}
