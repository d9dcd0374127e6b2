"""The state gauges' series (pure: no Ray) from a node table, claims, health marks and the
placement-group table: one info series per node, the degraded ones, held domains and hosts,
empty label values rather than "none"; the refresh interval against Ray's gauge expiry."""

from __future__ import annotations

import pytest

from ray_accel_ext.cluster.state import state_series
from ray_accel_ext.telemetry import REASON_CLASSES, STATE_GAUGES, refresh_interval_s

FABRIC = "rayaccel.io/fabric-domain"


def node(nid, host, **labels):
    return {"NodeID": nid, "Alive": True, "NodeManagerHostname": host, "Resources": {"CPU": 1.0},
            "Labels": dict(labels)}


NODES = [
    node("h", "head", **{"rayaccel.io/discovery": "ok"}),
    node("t1", "tray1", **{FABRIC: "dom", "rayaccel.io/fabric-worker": "1", "rayaccel.io/sku": "gb200",
                           "rayaccel.io/vendor": "nvidia", "rayaccel.io/generation": "blackwell",
                           "ray.io/accelerator-type": "GB200", "rayaccel.io/discovery": "ok",
                           "rayaccel.io/rack": "NVL72C1"}),
    node("t0", "tray0", **{FABRIC: "dom", "rayaccel.io/fabric-worker": "0", "rayaccel.io/sku": "gb200",
                           "rayaccel.io/vendor": "nvidia", "rayaccel.io/generation": "blackwell",
                           "ray.io/accelerator-type": "GB200", "rayaccel.io/discovery": "ok",
                           "rayaccel.io/rack": "NVL72C1"}),
    node("inf", "inf2", **{FABRIC: "inf2-host", "rayaccel.io/discovery": "degraded", "rayaccel.io/vendor": "aws"}),
    {"NodeID": "dead", "Alive": False, "Labels": {}, "Resources": {}},
]
CLAIMS = {f"{FABRIC}=dom": {"owner": "o", "nodes": ["t0", "t1"], "pg": "pg1"},
          f"{FABRIC}=inf2-host": {"owner": "p", "nodes": ["inf"], "pg": None}}  # claimed, no group yet
PG_TABLE = {"pg1": {"state": "CREATED", "bundles_to_node_id": {"0": "t1", "1": "t0"}}}


def test_every_gauge_has_its_series():
    series = state_series(NODES, CLAIMS, {"t1": {"status": "degraded", "reasons": ["GPU gone"]}}, PG_TABLE, waiters=3,
                          levels=("rack",))
    assert set(series) == set(STATE_GAUGES)
    for name, rows in series.items():
        keys = STATE_GAUGES[name][1]
        for tags, _ in rows:
            assert tuple(tags) == keys or set(tags) == set(keys), (name, tags)
            assert "none" not in tags.values()
    info = {t["node"]: t for t, v in series["rayaccel_node_info"] if v == 1.0}
    assert set(info) == {"h", "t0", "t1", "inf"}  # the dead node has none
    assert info["t0"] == {"node": "t0", "hostname": "tray0", "vendor": "nvidia", "sku": "gb200", "generation": "blackwell",
                          "accelerator_type": "GB200", "fabric_domain": "dom", "host_index": "0", "rack": "NVL72C1",
                          "discovery": "ok"}
    assert info["t1"]["host_index"] == "1"
    assert info["h"]["fabric_domain"] == "" and info["h"]["sku"] == "" and info["h"]["host_index"] == ""
    degraded = {t["node"]: v for t, v in series["rayaccel_node_degraded"]}
    assert degraded == {"h": 0.0, "t0": 0.0, "t1": 1.0, "inf": 1.0}  # health mark / degraded start
    assert dict((t["domain"], v) for t, v in series["rayaccel_domain_hosts"]) == {"dom": 2.0, "inf2-host": 1.0}
    assert sorted((t["level"], v) for t, v in series["rayaccel_reserved_domains"]) == [("fabric", 1.0), ("rack", 0.0)]
    assert series["rayaccel_placement_hosts"] == [({"level": "fabric", "generation": "blackwell", "topology": ""}, 2.0)]
    assert series["rayaccel_placement_waiters"] == [({}, 3.0)]
    nodes = {(t["generation"], t["discovery"], t["vendor"]): v for t, v in series["rayaccel_nodes"]}
    assert nodes == {("", "ok", ""): 1.0, ("blackwell", "ok", "nvidia"): 2.0, ("", "degraded", "aws"): 1.0}


def test_nothing_held_reports_zero_for_levels_seen_before():
    series = state_series(NODES, {}, {}, {}, levels=("fabric",))
    assert series["rayaccel_reserved_domains"] == [({"level": "fabric"}, 0.0)]
    assert series["rayaccel_placement_hosts"] == []


@pytest.mark.parametrize("report_ms, expected", [(10_000, 5.0), (500, 0.5), (2_000, 1.0)])
def test_gauges_are_set_four_times_within_rays_expiry(report_ms, expected):
    # Ray keeps an unrefreshed gauge 2 x max(report interval, 1 s).
    assert refresh_interval_s(report_ms) == expected


def test_reason_classes_are_the_four_an_operator_tells_apart():
    assert REASON_CLASSES == ("never-fits", "no-domain-free", "timeout", "error")
