"""Metadata servers that misbehave, through the start hook, in-process.

Every fault class of ``testing.fake_metadata.FAULT_CLASSES`` (delays, hangs, resets, 429 with and
without Retry-After, 5xx, truncated/oversized/HTML/binary/empty bodies, slow drip, a transient 503)
is served, for every path, to a node that needs GCE metadata (a TPU v5p worker) and to one that
needs EC2 IMDSv2 (a Trn2 UltraServer node), plus the same faults on the IMDSv2 token call alone.
The hook (``ray_hook.start_hook`` on a real ``RayParams``) must return within the discovery budget
with Ray-valid labels, and the node must be the intact answer or labelled degraded. The client
itself must turn each fault into a typed error (``clear error``) within its per-call timeout.
"""

from __future__ import annotations

import logging
import time

import pytest

pytest.importorskip("ray")  # the hook runs with Ray's own RayParams; labels checked by Ray's parser

from ray._private.parameter import RayParams

from ray_accel_ext.errors import ProviderError
from ray_accel_ext.host import Deadline
from ray_accel_ext.host.metadata import MetadataClient
from ray_accel_ext.ray_hook import start_hook
from ray_accel_ext.testing.fake_metadata import FAULT_CLASSES, FakeGceMetadata, FakeImds, MetadataServers
from ray_accel_ext.testing.snapshots import metadata_spec
from tests.support.paths import HOSTS
from tests.support.reliability import LOAD_SLACK_S, Results, label_errors

BUDGET_S = 3.0
GRACE_S = 0.5  # what the report calls a hang: past the budget by more than this
STRUCTURAL_S = BUDGET_S + LOAD_SLACK_S  # the assertion
GCE_NODE = HOSTS / "tpu" / "gce-v5p-16-worker1"
EC2_NODE = HOSTS / "neuron" / "trn2u-48xlarge-node1"
# Faults the client must see through: the answer is the intact one.
HARMLESS = {"delay (within timeout)", "transient 503 (once)", "transient 429 with Retry-After (once)"}

_results = Results("metadata_faults")


@pytest.fixture(scope="module", autouse=True)
def _write_results():
    yield
    _results.write()


def _hook(snapshot, servers: MetadataServers, monkeypatch) -> tuple[RayParams, float]:
    """Run the start hook for a node on ``snapshot`` whose metadata ``servers`` serve."""
    for key in ("GCE_METADATA_HOST", "GCE_METADATA_IP", "AWS_EC2_METADATA_SERVICE_ENDPOINT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in servers.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RAY_ACCEL_ROOT", str(snapshot))
    monkeypatch.setenv("RAY_ACCEL_BUDGET_S", str(BUDGET_S))
    params = RayParams(num_cpus=1)
    started = time.perf_counter()
    start_hook(params, False)
    elapsed = time.perf_counter() - started
    params.update_if_absent(node_ip_address="127.0.0.1")  # Ray's own checks of what the hook set
    return params, elapsed


def _faulted_spec(snapshot, kind: str, fault: dict | None, token_only: bool = False) -> dict:
    spec = metadata_spec(snapshot)
    if fault is not None:
        spec[f"{kind}_faults"] = {"api/token" if token_only else "*": dict(fault)}
    return spec


@pytest.fixture(scope="module")
def intact(tmp_path_factory):
    out = {}
    mp = pytest.MonkeyPatch()
    try:
        for snap, kind in ((GCE_NODE, "gce"), (EC2_NODE, "ec2")):
            with MetadataServers(_faulted_spec(snap, kind, None)) as servers:
                params, _ = _hook(snap, servers, mp)
            out[kind] = (dict(params.labels), dict(params.resources or {}), params.num_gpus)
            assert params.labels["rayaccel.io/discovery"] == "ok", params.labels
    finally:
        mp.undo()
    return out


CASES = [(kind, name, token) for kind in ("gce", "ec2") for name in FAULT_CLASSES for token in ((False, True) if kind == "ec2" else (False,))]


@pytest.mark.parametrize("kind,fault_class,token_only", CASES,
                         ids=[f"{k}-{'token-' if t else ''}{n.replace(' ', '_')}" for k, n, t in CASES])
def test_hook_under_metadata_fault(kind, fault_class, token_only, intact, monkeypatch, caplog):
    """The hook returns within the budget, with valid labels, intact or labelled degraded."""
    snapshot = GCE_NODE if kind == "gce" else EC2_NODE
    caplog.set_level(logging.WARNING, logger="ray_accel_ext")
    with MetadataServers(_faulted_spec(snapshot, kind, FAULT_CLASSES[fault_class], token_only)) as servers:
        params, elapsed = _hook(snapshot, servers, monkeypatch)
    labels = dict(params.labels)
    bad = label_errors({k: v for k, v in labels.items() if not k.startswith("sim.")})
    same = (labels, dict(params.resources or {}), params.num_gpus) == intact[kind]
    degraded = labels.get("rayaccel.io/discovery") == "degraded"
    outcome = "correct" if same else "degraded" if degraded else "unflagged change"
    cls = f"{'IMDSv2 token: ' if token_only else ''}{fault_class}"
    _results.add(f"metadata fault ({'GCE' if kind == 'gce' else 'EC2 IMDSv2'})", cls, outcome, elapsed_s=elapsed,
                 hang=elapsed > BUDGET_S + GRACE_S, invalid_labels=len(bad), budget_s=BUDGET_S,
                 detail="; ".join(r.getMessage()[:150] for r in caplog.records[:2]))
    assert not bad, bad
    assert elapsed <= STRUCTURAL_S, f"hook took {elapsed:.2f}s under {fault_class}"
    assert outcome != "unflagged change", (labels, intact[kind][0])
    if fault_class in HARMLESS:
        assert outcome == "correct", labels
    elif outcome == "degraded":
        assert any("degraded" in r.getMessage() for r in caplog.records), "degraded without saying why in the log"


@pytest.mark.parametrize("fault_class", list(FAULT_CLASSES))
@pytest.mark.parametrize("flavor", ["gce", "imds"])
def test_client_turns_each_fault_into_a_typed_error(flavor, fault_class):
    """The client alone: an answer, or a ProviderError subclass, within one call's time."""
    fault = FAULT_CLASSES[fault_class]
    if flavor == "gce":
        server, call = FakeGceMetadata({"instance/zone": "projects/1/zones/z"}, {"*": fault}), lambda c: c.gce("instance/zone")
    else:
        server, call = FakeImds({"instance-type": "trn2.48xlarge"}, {"*": fault}), lambda c: c.imds("instance-type")
    with server:
        client = MetadataClient(server.env(), Deadline(BUDGET_S))
        started = time.perf_counter()
        try:
            value = call(client)
            outcome, detail = "correct", repr(value)[:60]
        except ProviderError as exc:
            outcome, detail = "clear error", f"{type(exc).__name__}: {exc}"[:200]
        elapsed = time.perf_counter() - started
    _results.add(f"metadata client ({flavor})", fault_class, outcome, elapsed_s=elapsed, budget_s=BUDGET_S,
                 hang=elapsed > BUDGET_S, detail=detail)
    # One call: per-attempt timeout 0.5 s, at most 3 attempts, Retry-After only inside the budget.
    assert elapsed <= 3 * client.timeout_s + 3.0, (fault_class, elapsed)  # + room for a loaded machine
    if fault_class == "empty body":  # an empty value is an answer; an empty IMDSv2 token is not
        assert outcome == ("correct" if flavor == "gce" else "clear error"), detail
    elif fault_class in HARMLESS:
        assert outcome == "correct", detail
    else:
        assert outcome == "clear error", detail
