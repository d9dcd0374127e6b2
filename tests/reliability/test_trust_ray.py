"""Real ``ray start`` through the hook on the trust-boundary classes (test_trust.py has them all
through the CLI): third-party answers and broken distributions (a malformed ``entry_points.txt``
with ``PYDANTIC_DISABLE_PLUGINS=__all__``), 300 entry points sleeping at import, a 1 MiB NIC
``local_cpulist``, a FIFO in ``RAY_ACCEL_SKU_DIR``, 50,000 dangling PCI entries, a malformed
``GCE_METADATA_HOST``.

Worker nodes join an intact head with a plain, non-blocking ``ray start``, two at a time with an
intact baseline (the harness of test_hostile_ray.py). Shown for every node: ``ray start`` exits 0;
Ray holds a node with its healthy devices, valid labels and ``rayaccel.io/discovery=degraded``;
the hook's discovery event has each class's problem code; no process of that ``ray start`` is left.
"""

from __future__ import annotations

import contextlib
import time

import pytest

ray = pytest.importorskip("ray")

from ray_accel_ext import problems as codes  # noqa: E402
from ray_accel_ext.host.protocol import DEFAULT_BUDGET_S  # noqa: E402
from ray_accel_ext.testing.cluster import NODE_NAME_LABEL  # noqa: E402
from ray_accel_ext.testing.hostile import copy_snapshot  # noqa: E402
from ray_accel_ext.testing.hostile_answers import (  # noqa: E402
    BROKEN_DISTRIBUTIONS,
    HOSTILE_ANSWERS,
    install_broken_distributions,
    install_hostile_answers,
    install_sleepers,
)
from ray_accel_ext.testing.hostile_snapshot import cpulist_bomb, dangling_pci, hostile_sku_dir  # noqa: E402
from tests.support.paths import HOSTS  # noqa: E402
from tests.support.reliability import HookCluster, Results, hook_events, label_errors, start_processes  # noqa: E402

pytestmark = pytest.mark.ray

BUDGET_S = DEFAULT_BUDGET_S
PROMISE_S = BUDGET_S + 4.0
STRUCTURAL_S = BUDGET_S + 5.0
HEAD = HOSTS / "nvidia_gpu" / "l4-single-pcie"
H100 = HOSTS / "nvidia_gpu" / "h100-sxm-8gpu-dgx"
A3 = HOSTS / "nvidia_gpu" / "gce-a3-highgpu-1g"
RAY_OWN = {"ray.io/node-id", "ray.io/availability-zone", "ray.io/availability-region", "ray.io/market-type",
           "ray.io/node-group", NODE_NAME_LABEL}
# (code, a word that picks the problem among several of one code); the code is what is asserted
ANSWER_CODES = {
    "many_attributes": codes.LABELS_CUT, "huge_quantity": codes.VALUE_BOUNDED, "gpu_1e18": codes.VALUE_BOUNDED,
    "many_devices": codes.ANSWER_TOO_LARGE, "name_nul": codes.DECLARATION_INVALID,
    "name_node": codes.DECLARATION_INVALID, "name_blank": codes.DECLARATION_INVALID,
    "reserved_prefix": codes.PREFIX_RESERVED,
}
BROKEN_CODES = {
    "latin1-metadata": (codes.DISTRIBUTION_SKIPPED, "broken_latin1_metadata-1.0.dist-info"),
    "nvidia-gpu-clash": (codes.ENTRY_POINT_REFUSED, "'nvidia_gpu'"),
}

_results = Results("trust_ray")


@pytest.fixture(scope="module", autouse=True)
def _write_results():
    yield
    _results.write()


def _plans(tmp_path):
    """[(node name, snapshot, env, (resource, count), [(group, class, (code, needle))])]."""
    site = install_hostile_answers(tmp_path / "answers")
    # A malformed or non-UTF-8 entry_points.txt stops the `ray` command at its import, before any
    # hook (pydantic's plugin scan parses every distribution: docs/vendors.md, "Register it"); with
    # PYDANTIC_DISABLE_PLUGINS=__all__, the documented way out, the node starts and names it.
    broken = ("latin1-metadata", "nvidia-gpu-clash")
    install_broken_distributions(site, broken)
    classes = [("third-party answer", a.what, (ANSWER_CODES[a.key], a.name)) for a in HOSTILE_ANSWERS]
    classes += [("broken distribution", BROKEN_DISTRIBUTIONS[name][0], BROKEN_CODES[name]) for name in broken]
    plans = [("answers", H100, {"PYTHONPATH": str(site)}, ("GPU", 8), classes)]
    bad_ep = install_broken_distributions(tmp_path / "bad-ep", ("malformed-entry-points",))
    plans.append(("bad-ep", H100, {"PYTHONPATH": str(bad_ep), "PYDANTIC_DISABLE_PLUGINS": "__all__"}, ("GPU", 8),
                  [("broken distribution", "a malformed line in entry_points.txt (PYDANTIC_DISABLE_PLUGINS=__all__)",
                    (codes.DISTRIBUTION_SKIPPED, "broken_malformed_entry_points-1.0.dist-info"))]))
    sleepers = install_sleepers(tmp_path / "sleepers", 300)
    plans.append(("sleepers", H100, {"PYTHONPATH": str(sleepers)}, ("GPU", 8),
                  [("third-party backends", "300 entry points sleeping at import", (codes.BACKEND_NOT_STARTED, ""))]))
    bomb = copy_snapshot(H100, tmp_path / "cpulist")
    cpulist_bomb(bomb)
    plans.append(("cpulist", bomb, {}, ("GPU", 8),
                  [("hostile host files", "a NIC's local_cpulist of 1 MiB", (codes.VALUE_BOUNDED, "local_cpulist"))]))
    sku = hostile_sku_dir(tmp_path / "skus", "fifo")
    plans.append(("sku-fifo", H100, {"RAY_ACCEL_SKU_DIR": str(sku.parent)}, ("GPU", 8),
                  [("hostile setting", "RAY_ACCEL_SKU_DIR holding a FIFO a.json", (codes.SKU_FILE, "is a FIFO"))]))
    dangling = copy_snapshot(H100, tmp_path / "dangling")
    dangling_pci(dangling, 50_000)
    plans.append(("dangling", dangling, {}, ("GPU", 8),
                  [("hostile host files", "50,000 dangling /sys/bus/pci/devices entries", (codes.ENTRIES_CAPPED, "")),
                   ("hostile host files", "50,000 dangling /sys/bus/pci/devices entries, those read",
                    (codes.ENTRIES_DANGLING, ""))]))
    plans.append(("endpoint", A3, {"GCE_METADATA_HOST": "::1"}, ("GPU", 1),
                  [("hostile setting", "GCE_METADATA_HOST='::1'", (codes.ENDPOINT_MALFORMED, ""))]))
    return plans


def _alive(names):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = {n["Labels"].get(NODE_NAME_LABEL): n for n in ray.nodes() if n["Alive"]}
        if all(name in found for name in names):
            return found
        time.sleep(0.3)
    raise TimeoutError(f"nodes {names} did not register")


def _check(plan, run, node, baseline_s, failures):
    name, _, _, (resource, count), classes = plan
    events = hook_events(run["log"])
    hook_s = events.get("start_hook", {}).get("elapsed_ms", 0) / 1000 or None
    problems = events.get("discovery", {}).get("problems", [])
    labels = {k: v for k, v in node["Labels"].items() if k not in RAY_OWN}
    bad = label_errors(labels)
    kept = node["Resources"].get(resource) == count
    degraded = labels.get("rayaccel.io/discovery") == "degraded"
    ok = run["rc"] == 0 and not bad and degraded and kept and not run["left"] and hook_s is not None and hook_s <= STRUCTURAL_S
    if not ok:
        failures.append(f"{name}: rc={run['rc']} {resource}={node['Resources'].get(resource)} degraded={degraded} "
                        f"labels {bad} hook {hook_s}s left {run['left']}\n{run['log'][-2000:]}")
    for group, cls, (code, needle) in classes:
        said = next((f"{p['backend']}: {p['message']}" for p in problems
                     if p.get("code") == code and needle in f"{p['backend']}: {p['message']}"), None)
        if said is None:
            failures.append(f"{name}: {cls}: the hook's discovery event has no {code} problem ({needle!r}): {problems}")
        _results.add(f"ray start ({group})", cls, "degraded" if ok and said else "unflagged change",
                     elapsed_s=hook_s, budget_s=BUDGET_S, invalid_labels=len(bad), hang=hook_s is None or hook_s > PROMISE_S,
                     detail=f"node {name}: ray start exited {run['rc']} after {run['wall_s'] or 0:.1f}s "
                            f"(baseline {baseline_s:.1f}s); hook {hook_s}s; {resource}={node['Resources'].get(resource)}",
                     reported=(said or "")[:300], start_s=round(run["wall_s"] or 0, 2), baseline_s=round(baseline_s, 2),
                     node=name, code=code)


def test_ray_start_across_the_trust_boundaries(tmp_path):
    failures: list[str] = []
    with contextlib.ExitStack(), HookCluster() as hc:
        plans = _plans(tmp_path)
        cluster = hc.cluster
        cluster.add_node(HEAD, name="head", num_cpus=1)
        cluster.connect()
        marker = str(cluster.root)
        for b, batch in enumerate(plans[i:i + 2] for i in range(0, len(plans), 2)):
            base = f"baseline{b}"
            runs = hc.start_batch([(H100, {"name": base, "num_cpus": 0})]
                                  + [(p[1], {"name": p[0], "num_cpus": 0, "env": p[2]}) for p in batch])
            failed = {n: r for n, r in runs.items() if r["rc"] != 0}
            assert not failed, "\n".join(f"{n}: ray start exited {r['rc']}:\n{r['log'][-3000:]}" for n, r in failed.items())
            alive = _alive([base] + [p[0] for p in batch])
            for plan in batch:
                _check(plan, runs[plan[0]], alive[plan[0]], runs[base]["wall_s"], failures)
            for name in [base] + [p[0] for p in batch]:
                cluster.kill_node(cluster.node(name))
    time.sleep(0.5)
    left = [p.pid for p in start_processes(marker)]
    assert not left, f"ray start processes (or what the hook forked) left after cleanup: {left}"
    assert not failures, "\n".join(failures)
