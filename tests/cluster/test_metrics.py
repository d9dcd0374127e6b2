"""The cluster's metrics over more than three gauge lifetimes, read from Ray's real Prometheus
endpoints (simulated cluster through the start hook: a head, a GB200 NVLink domain of two trays
whose NVML platform info numbers them against their hostnames' order, and an inf2 node that starts
degraded).

Ray forgets a gauge not set again within two export intervals (20 s at Ray's default 10 s), so a
gauge set once would be gone part-way. The cluster exports every ``EXPORT_MS`` (Ray's
``metrics_report_interval_ms``, set on every node), which shortens both the gauge lifetime and
the exporter's refresh (it follows the setting), so the same number of lifetimes passes sooner.
While a reservation is held, every scrape for ``SCRAPE_FOR_S`` (6.5 export intervals: the 65 s
this test scraped for at Ray's default) must show every state series with its value: one info
series per node, the degraded node, the domain's size, the held domain and its hosts. Failed
placements carry their reason class. Our series pass ``promtool check metrics`` (Debian's
``prometheus`` package; ci/test.sh installs it) once the labels Ray adds to every series of every
process are taken off.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections import Counter

import pytest

ray = pytest.importorskip("ray")
parser = pytest.importorskip("prometheus_client.parser")

from ray_accel_ext import telemetry  # noqa: E402
from ray_accel_ext.cluster.exporter import exporter_status  # noqa: E402
from ray_accel_ext.errors import NoDomainAvailable, WouldSplitDomain  # noqa: E402
from ray_accel_ext.placement import DomainRequest, reserve, reserve_domain  # noqa: E402
from ray_accel_ext.testing.cluster import SimulatedCluster  # noqa: E402
from tests.support.domains import SNAPSHOTS, add_in_batches, gb200_domain  # noqa: E402
from tests.support.metrics import RAY_LABELS, our_exposition, scrape_spacing_s, scrape_texts  # noqa: E402

pytestmark = pytest.mark.ray

GB200 = {"ray.io/accelerator-type": "GB200"}
DEGRADED = SNAPSHOTS / "neuron" / "inf2-xlarge-imds-no-token"
EXPORT_MS = 4000  # gauge lifetime 8 s, exporter refresh every 2 s
SCRAPE_FOR_S = 6.5 * EXPORT_MS / 1000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    snaps = tmp_path_factory.mktemp("metrics")
    # The environment reaches every Ray process of every node (the metrics agent reads no system
    # config); the system config reaches this driver.
    env = {**os.environ, "RAY_metrics_report_interval_ms": str(EXPORT_MS)}
    with SimulatedCluster(base_env=env, system_config=json.dumps({"metrics_report_interval_ms": EXPORT_MS})) as c:
        c.add_node(SNAPSHOTS / "nvidia_gpu" / "no-accelerators", name="head")
        # tray00 is NVML tray 1 and tray01 tray 0: ranks follow the hardware, not the names.
        specs = [(s, {"name": s.name}) for s in gb200_domain(snaps, 51, trays=2, platform=True, tray_indices=[1, 0])]
        specs.append((DEGRADED, {"name": "inf2"}))
        add_in_batches(c, specs)
        c.connect()
        yield c


@ray.remote
def where():
    return ray.get_runtime_context().get_node_id()


def ours() -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every ``ray_rayaccel_*`` sample on every node: name -> [(labels without Ray's, value)]."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for text in scrape_texts().values():
        for family in parser.text_string_to_metric_families(our_exposition(text)):
            for sample in family.samples:
                labels = {k: v for k, v in sample.labels.items() if k not in RAY_LABELS}
                out.setdefault(sample.name, []).append((labels, sample.value))
    return out


def one(samples, **labels):
    got = [v for tags, v in samples if all(tags.get(k) == want for k, want in labels.items())]
    assert len(got) == 1, (labels, samples)
    return got[0]


def check_state(m, nodes, domain, reserved: int) -> None:
    """Every state series of a scrape, against what the cluster is."""
    info = {tags["node"]: tags for tags, v in m.get("ray_rayaccel_node_info", []) if v == 1.0}
    assert set(info) == set(nodes), (sorted(info), sorted(nodes))
    for node_id, labels in nodes.items():
        tags = info[node_id]
        assert tags["sku"] == labels.get("rayaccel.io/sku", "")
        assert tags["fabric_domain"] == labels.get("rayaccel.io/fabric-domain", "")
        assert tags["discovery"] == labels["rayaccel.io/discovery"]
        assert tags["rack"] == labels.get("rayaccel.io/rack", "")
        if labels.get("rayaccel.io/fabric-domain") == domain:
            assert tags["host_index"] == labels["rayaccel.io/fabric-worker"]  # hardware order
    degraded = {tags["node"]: v for tags, v in m["ray_rayaccel_node_degraded"]}
    assert degraded == {n: (1.0 if nodes[n]["rayaccel.io/discovery"] == "degraded" else 0.0) for n in nodes}
    assert sum(v for _, v in m["ray_rayaccel_nodes"]) == len(nodes)
    assert one(m["ray_rayaccel_domain_hosts"], domain=domain) == 2.0
    assert one(m["ray_rayaccel_reserved_domains"], level="fabric") == float(reserved)
    if reserved:
        assert one(m["ray_rayaccel_placement_hosts"], level="fabric", generation="blackwell") == 2.0
    assert one(m["ray_rayaccel_placement_waiters"]) == 0.0
    for name, samples in m.items():
        for tags, _ in samples:
            assert "none" not in tags.values(), (name, tags)


def check_held(m, nodes, domain) -> None:
    """A scrape while the domain is held: the state series, and one failure of each class counted."""
    check_state(m, nodes, domain, reserved=1)
    failed = Counter({tags["reason"]: v for tags, v in m["ray_rayaccel_placements_total"] if tags["outcome"] == "failed"})
    assert failed == {"never-fits": 1.0, "timeout": 1.0, "error": 1.0, "no-domain-free": 1.0}, failed
    assert one(m["ray_rayaccel_placements_total"], outcome="ready", reason="") >= 1.0


def test_state_series_hold_for_over_three_gauge_lifetimes_and_failures_say_why(cluster):
    assert ray._config.metrics_report_interval_ms() == EXPORT_MS
    nodes = {n["NodeID"]: n["Labels"] for n in ray.nodes() if n["Alive"]}
    domain = next(lab["rayaccel.io/fabric-domain"] for lab in nodes.values() if lab.get("ray.io/accelerator-type") == "GB200")
    inf2 = next(nid for nid, lab in nodes.items() if lab.get("rayaccel.io/vendor") == "aws")
    assert nodes[inf2]["rayaccel.io/discovery"] == "degraded"

    # Failures, one of each class.
    with pytest.raises(WouldSplitDomain) as never:
        reserve_domain("fabric", hosts=3, selector=GB200, deadline_s=30)
    tray = next(nid for nid, lab in nodes.items() if lab.get("rayaccel.io/fabric-domain") == domain)

    @ray.remote(num_gpus=4, num_cpus=0)
    class Squatter:
        def ping(self):
            return True

    squatter = Squatter.options(label_selector={"ray.io/node-id": tray}).remote()
    ray.get(squatter.ping.remote())
    with pytest.raises(NoDomainAvailable) as timeout:
        reserve_domain("fabric", hosts=2, selector=GB200, deadline_s=3, domain_wait_s=1.5)
    ray.kill(squatter)
    # The registry cannot answer in 0 s. On a loaded machine its reply can arrive before ray.get
    # looks (the call is sent first); a reservation that got through that way is given back and
    # the call made again.
    for _ in range(20):
        try:
            reserve(DomainRequest(hosts=2, selector=GB200), registry_timeout_s=0).release()
        except ray.exceptions.GetTimeoutError:
            break
    else:
        pytest.fail("the claim registry answered within 0 s twenty times")
    assert (never.value.data["reason_class"], timeout.value.data["reason_class"]) == ("never-fits", "timeout")

    # The squatter's GPUs come back when Ray has processed its death; on a loaded machine that can
    # take longer than the default 10 s a reservation waits for one domain (this cluster has one).
    held = reserve_domain("fabric", selector=GB200, deadline_s=120, domain_wait_s=60)
    try:
        # Ranks: the tray NVML numbers 0 is rank 0, whatever its hostname.
        assert held.domain_ranks.source == "hardware" and held.domain_ranks.size == 2
        tray01 = cluster.node("gb200-c51-t1").node_id
        assert held.rank0.node_id == tray01 and held.rank0.host_index == 0
        assert [r.rank for r in held.ranks] == [0, 1] and held.to_dict()["rank0"]["node_id"] == tray01
        assert ray.get(where.options(**held.rank_options(0)).remote()) == tray01
        with pytest.raises(NoDomainAvailable) as busy:
            reserve_domain("fabric", hosts=2, selector=GB200, deadline_s=0.5)
        assert busy.value.data["reason_class"] == "no-domain-free"

        # Until the exporter has refreshed and this driver's counters have been exported once.
        deadline = time.monotonic() + 120
        while True:
            try:
                check_held(ours(), nodes, domain)
                break
            except (AssertionError, KeyError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)
        # The exporter refreshes at the cluster's setting, a quarter of a gauge lifetime.
        assert exporter_status()["interval_s"] == telemetry.refresh_interval_s(EXPORT_MS)
        # Every half export interval, or an export interval apart where a scrape takes the gauges
        # with it (Ray 2.55).
        spacing = max(EXPORT_MS / 2000, scrape_spacing_s())
        start, scrapes = time.monotonic(), 0
        while time.monotonic() - start < SCRAPE_FOR_S or scrapes < 5:
            time.sleep(spacing)
            check_held(ours(), nodes, domain)
            scrapes += 1
        time.sleep(spacing)
        texts = scrape_texts()
    finally:
        held.release()

    deadline = time.monotonic() + 60
    while True:
        try:
            check_state(ours(), nodes, domain, reserved=0)
            break
        except (AssertionError, KeyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(2)

    promtool = shutil.which("promtool")
    if promtool is None:
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(
            "promtool not installed (apt-get install -y prometheus)")
    checked = 0
    for text in texts.values():
        # Ray adds its own labels to every series (Component, NodeAddress, WorkerId, ...), in
        # camelCase that promtool's lint rejects; what is checked here is ours: names, help,
        # types, labels and values.
        exposition = our_exposition(text, without_ray_labels=True)
        if not exposition:
            continue
        out = subprocess.run([promtool, "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr + exposition
        checked += 1
    assert checked >= 1
