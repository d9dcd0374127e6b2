"""Domain-aware placement: reserve hosts inside ONE domain, all or nothing, with a fallback chain.

A *domain* is the set of alive nodes that share one value of a level's label key:

=========  ================================  =============================================
level      label key                         what the backends publish
=========  ================================  =============================================
fabric     ``rayaccel.io/fabric-domain``     TPU slice, multi-node NVLink domain, Trn2
                                             UltraServer; a lone host is its own domain
rack       ``rayaccel.io/rack``              provider rack (GCP sub-block, AWS rack node)
block      ``rayaccel.io/block``             provider block
=========  ================================  =============================================

Any other label key (``ray.io/tpu-slice-name``) can be passed as the level too.

How one step is placed (see ``docs/placement.md``):

1. read the inventory (``ray.nodes()``: labels and total resources of alive nodes);
2. :func:`choose_domain` (pure, linear in the node count) picks the best-fitting free domain
   whose matching nodes can hold every bundle; a request no domain could ever hold fails at once
   with :class:`~ray_accel_ext.errors.WouldSplitDomain` (no waiting);
3. the domain is *claimed* in a cluster-wide registry (a named detached actor, so concurrent
   callers in any driver or worker never get the same domain or an overlapping node set);
4. a placement group is created whose every bundle carries ``bundle_label_selector``
   ``{<level key>: <domain>, **selector}``, so Ray itself keeps the group inside the domain, plus
   (on the tested Ray range) ``topology_strategy={<level key>: "STRICT_PACK"}``;
5. the group is awaited until the step's deadline; on timeout it is removed, the claim dropped and
   the next domain tried; when the step runs out of time or domains, the next step of the chain.

Every placement emits one ``placement`` JSON log line and Ray metrics
(:mod:`ray_accel_ext.telemetry`).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import telemetry
from .compat import has_feature, is_tested_ray, require_feature, require_tested_ray
from .errors import NoDomainAvailable, SchedulingError, WouldSplitDomain

__all__ = [
    "LEVELS",
    "DomainRequest",
    "DomainChoice",
    "Reservation",
    "NodeView",
    "choose_domain",
    "match_selector",
    "node_views",
    "read_inventory",
    "reserve",
    "reserve_domain",
    "use_topology_strategy",
    "claims_snapshot",
    "CLAIMS_ACTOR",
    "CLAIMS_NAMESPACE",
]

LEVELS: Mapping[str, str] = {
    "fabric": "rayaccel.io/fabric-domain",
    "rack": "rayaccel.io/rack",
    "block": "rayaccel.io/block",
}
HOSTS_LABEL = "rayaccel.io/fabric-hosts"
ACCELERATOR_RESOURCES = ("GPU", "TPU", "neuron_cores")
CLAIMS_ACTOR = "rayaccel-domain-claims"
CLAIMS_NAMESPACE = "rayaccel"
NODE_ID_KEY = "ray.io/node-id"
_EPS = 1e-9


def level_key(level: str) -> str:
    """The label key of ``level`` (``fabric``/``rack``/``block``, or a label key itself)."""
    if level in LEVELS:
        return LEVELS[level]
    if "/" in level:
        return level
    raise ValueError(f"unknown placement level {level!r}: use one of {sorted(LEVELS)} or a label key")


# -- requests --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DomainRequest:
    """One step of a placement: what to reserve inside one domain, and how long to try.

    * ``hosts=N``: N distinct hosts of one domain, one ``bundle`` each (``STRICT_SPREAD``);
    * ``bundles=[...]``: explicit bundles packed into one domain (``strategy``, default ``PACK``);
    * neither: the whole domain, one bundle per matching host.

    ``bundle`` defaults to the host's accelerators (``GPU``/``TPU``/``neuron_cores`` as the node
    reports them; ``{"CPU": 1}`` for a host without any). ``selector`` uses Ray's selector syntax
    (``"v"``, ``"!v"``, ``"in(a,b)"``, ``"!in(a,b)"``) and applies to every node of the domain.
    ``complete=True`` skips domains with fewer alive nodes than their ``rayaccel.io/fabric-hosts``
    (a TPU slice is only usable whole). ``domain_wait_s``: how long one domain's placement group
    may take to become ready before the next free domain of the step is tried (a group in a
    really free domain is ready in milliseconds; one that is not was taken by work placed
    outside this API).
    """

    level: str = "fabric"
    hosts: int | None = None
    bundles: tuple[Mapping[str, float], ...] | None = None
    bundle: Mapping[str, float] | None = None
    selector: Mapping[str, str] = field(default_factory=dict)
    strategy: str | None = None
    deadline_s: float = 30.0
    complete: bool = False
    name: str = ""
    domain_wait_s: float = 10.0

    def __post_init__(self) -> None:
        level_key(self.level)
        if self.hosts is not None and self.bundles is not None:
            raise ValueError("give hosts= or bundles=, not both")
        if self.hosts is not None and self.hosts < 1:
            raise ValueError("hosts must be >= 1")
        if self.bundles is not None:
            object.__setattr__(self, "bundles", tuple(dict(b) for b in self.bundles))
            if not self.bundles:
                raise ValueError("bundles must not be empty")
        object.__setattr__(self, "selector", dict(self.selector))
        if self.deadline_s < 0 or self.domain_wait_s <= 0:
            raise ValueError("deadline_s must be >= 0 and domain_wait_s > 0")

    @property
    def key(self) -> str:
        return level_key(self.level)

    @property
    def node_strategy(self) -> str:
        if self.strategy:
            return self.strategy
        return "PACK" if self.bundles is not None else "STRICT_SPREAD"

    def label(self) -> str:
        """A short name for logs: the given name or ``level:hosts`` with the selector."""
        if self.name:
            return self.name
        size = f"{self.hosts}h" if self.hosts else (f"{len(self.bundles)}b" if self.bundles else "whole")
        sel = ",".join(f"{k}={v}" for k, v in sorted(self.selector.items()))
        return f"{self.level}:{size}" + (f"[{sel}]" if sel else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.label(),
            "level": self.level,
            "hosts": self.hosts,
            "bundles": [dict(b) for b in self.bundles] if self.bundles else None,
            "bundle": dict(self.bundle) if self.bundle else None,
            "selector": dict(self.selector),
            "strategy": self.node_strategy,
            "deadline_s": self.deadline_s,
            "complete": self.complete,
            "domain_wait_s": self.domain_wait_s,
        }


# -- inventory -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeView:
    """What placement needs of a node: id, labels, total resources."""

    node_id: str
    labels: Mapping[str, str]
    resources: Mapping[str, float]


def node_views(nodes: Iterable[Mapping[str, Any]]) -> list[NodeView]:
    """Alive nodes from ``ray.nodes()``-shaped dicts (``NodeID``/``Labels``/``Resources``/``Alive``)
    or plain ``{"node_id", "labels", "resources"}`` dicts."""
    out = []
    for n in nodes:
        if isinstance(n, NodeView):
            out.append(n)
            continue
        if not n.get("Alive", n.get("alive", True)):
            continue
        node_id = n.get("NodeID") or n.get("node_id")
        labels = n.get("Labels") if "Labels" in n else n.get("labels", {})
        resources = n.get("Resources") if "Resources" in n else n.get("resources", {})
        out.append(NodeView(str(node_id), labels or {}, resources or {}))
    return out


def read_inventory() -> list[NodeView]:
    """The alive nodes of the connected Ray cluster (public ``ray.nodes()``)."""
    import ray

    return node_views(ray.nodes())


# -- selectors (Ray 2.60 semantics, reference/ray-2.60.md section 6) ------------------------------


def _compile(selector: Mapping[str, str]) -> list[tuple[str, bool, frozenset[str]]]:
    out = []
    for key, expr in selector.items():
        expr = str(expr).strip()
        negate = expr.startswith("!")
        if negate:
            expr = expr[1:]
        if expr.startswith("in(") and expr.endswith(")"):
            values = frozenset(v.strip() for v in expr[3:-1].split(",") if v.strip())
            if not values:
                raise ValueError(f"invalid label selector value {selector[key]!r} for {key!r}")
        else:
            values = frozenset([expr])
        out.append((key, negate, values))
    return out


def match_selector(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    """Whether node ``labels`` match ``selector`` as Ray matches it (an absent key matches ``!``)."""
    return _match(labels, _compile(selector))


def _match(labels: Mapping[str, str], compiled) -> bool:
    for key, negate, values in compiled:
        present = labels.get(key) in values
        if present == negate:
            return False
    return True


# -- the pure choice -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DomainChoice:
    """A chosen domain: its label, nodes, and the bundles Ray is asked to place there."""

    level: str
    key: str
    domain: str
    node_ids: tuple[str, ...]
    bundles: tuple[Mapping[str, float], ...]
    strategy: str
    selectors: tuple[Mapping[str, str], ...]
    generation: str | None = None
    topology: str | None = None

    @property
    def claim_key(self) -> str:
        return f"{self.key}={self.domain}"


def _default_bundle(node: NodeView) -> dict[str, float]:
    acc = {r: float(node.resources[r]) for r in ACCELERATOR_RESOURCES if node.resources.get(r, 0) > 0}
    return acc or {"CPU": 1.0}


def _fits(capacity: Mapping[str, float], bundle: Mapping[str, float]) -> bool:
    return all(capacity.get(r, 0.0) + _EPS >= q for r, q in bundle.items() if q > 0)


def _place_bundles(nodes: list[NodeView], bundles: Sequence[Mapping[str, float]], distinct: bool) -> bool:
    """First-fit decreasing of ``bundles`` onto ``nodes`` (total resources)."""
    if distinct and len(bundles) > len(nodes):
        return False
    free = [dict(n.resources) for n in nodes]
    used = [False] * len(nodes)
    for bundle in sorted(bundles, key=lambda b: -sum(b.values())):
        for i, cap in enumerate(free):
            if (distinct and used[i]) or not _fits(cap, bundle):
                continue
            for r, q in bundle.items():
                cap[r] = cap.get(r, 0.0) - q
            used[i] = True
            break
        else:
            return False
    return True


def choose_domain(
    nodes: Iterable[Mapping[str, Any] | NodeView],
    request: DomainRequest,
    *,
    busy_domains: Iterable[str] = (),
    busy_nodes: Iterable[str] = (),
    exclude: Iterable[str] = (),
) -> DomainChoice:
    """Pick a free domain for ``request`` from an inventory; pure and linear in the node count.

    ``busy_domains`` (claim keys ``<label key>=<value>``) and ``busy_nodes`` are what other
    requests hold; ``exclude`` are claim keys this request already tried. Among the domains that
    fit, the one with the fewest matching nodes wins (best fit, least stranded capacity), ties by
    name. Raises :class:`WouldSplitDomain` when no domain, free or not, could hold the request
    (retrying cannot help), and :class:`NoDomainAvailable` with ``retryable=True`` when fitting
    domains exist but are all busy.
    """
    key = request.key
    compiled = _compile(request.selector)
    busy_domains = set(busy_domains)
    busy_nodes = set(busy_nodes)
    exclude = set(exclude)

    groups: dict[str, list[NodeView]] = {}
    expected: dict[str, int] = {}
    seen_domains: set[str] = set()
    total = matching = 0
    for node in node_views(nodes):
        total += 1
        value = node.labels.get(key)
        if not value:
            continue
        seen_domains.add(value)
        if not _match(node.labels, compiled):
            continue
        matching += 1
        groups.setdefault(value, []).append(node)
        hosts = node.labels.get(HOSTS_LABEL, "")
        if hosts.isdigit():
            expected[value] = max(expected.get(value, 0), int(hosts))

    best: tuple[int, str] | None = None
    best_bundles: tuple[Mapping[str, float], ...] = ()
    fitting_busy: list[str] = []
    fitting_tried: list[str] = []
    incomplete: list[str] = []
    largest = 0
    for value, members in groups.items():
        largest = max(largest, len(members))
        if request.complete and len(members) < expected.get(value, 0):
            incomplete.append(value)
            continue
        if request.bundles is not None:
            bundles = request.bundles
            distinct = request.node_strategy == "STRICT_SPREAD"
        elif request.hosts is not None:
            bundles = (dict(request.bundle) if request.bundle else _min_bundle(members),) * request.hosts
            distinct = True
        else:
            bundles = tuple(dict(request.bundle) if request.bundle else _default_bundle(m) for m in members)
            distinct = True
        if not _place_bundles(members, bundles, distinct):
            continue
        claim = f"{key}={value}"
        if claim in exclude:
            fitting_tried.append(value)
            continue
        if claim in busy_domains or any(m.node_id in busy_nodes for m in members):
            fitting_busy.append(value)
            continue
        rank = (len(members), value)
        if best is None or rank < best:
            best, best_bundles = rank, bundles

    if best is not None:
        value = best[1]
        members = groups[value]
        selector = {key: value, **request.selector}
        first = members[0].labels
        return DomainChoice(
            level=request.level,
            key=key,
            domain=value,
            node_ids=tuple(m.node_id for m in members),
            bundles=tuple(dict(b) for b in best_bundles),
            strategy="STRICT_SPREAD" if request.hosts is not None or request.bundles is None else request.node_strategy,
            selectors=tuple(dict(selector) for _ in best_bundles),
            generation=first.get("rayaccel.io/generation"),
            topology=first.get("rayaccel.io/fabric-topology") or first.get("ray.io/tpu-topology"),
        )

    facts = {
        "level": request.level,
        "label_key": key,
        "nodes": total,
        "matching_nodes": matching,
        "domains_seen": len(seen_domains),
        "matching_domains": len(groups),
        "largest_matching_domain_hosts": largest,
        "busy": sorted(fitting_busy),
        "tried": sorted(fitting_tried),
        "incomplete": sorted(incomplete),
    }
    if fitting_busy:
        raise NoDomainAvailable(
            f"{request.label()}: all {len(fitting_busy)} fitting domain(s) are held by other requests",
            reason="busy", retryable=True, **facts,
        )
    if fitting_tried:
        raise NoDomainAvailable(
            f"{request.label()}: every fitting domain was tried and did not become ready",
            reason="tried", retryable=False, **facts,
        )
    if not groups:
        why = f"no node has label {key}" if not seen_domains else f"no node with {key} matches {request.selector}"
        raise WouldSplitDomain(f"{request.label()}: {why}", reason="no-match", retryable=False, **facts)
    if incomplete and len(incomplete) == len(groups):
        raise WouldSplitDomain(
            f"{request.label()}: every matching domain is incomplete (fewer alive nodes than {HOSTS_LABEL})",
            reason="incomplete", retryable=False, **facts,
        )
    raise WouldSplitDomain(
        f"{request.label()}: larger than any domain (largest matching {key} has {largest} host(s))",
        reason="too-large", retryable=False, **facts,
    )


def _min_bundle(members: list[NodeView]) -> dict[str, float]:
    bundles = [_default_bundle(m) for m in members]
    keys = set(bundles[0]).intersection(*bundles[1:]) if len(bundles) > 1 else set(bundles[0])
    return {k: min(b[k] for b in bundles) for k in sorted(keys)} or {"CPU": 1.0}


# -- cluster-wide claims ---------------------------------------------------------------------------


def _claims_actor_class():
    import ray

    @ray.remote(num_cpus=0, max_restarts=-1)
    class DomainClaims:
        """Which domains (and nodes) are held, by whom; one per cluster, serialises claims."""

        def __init__(self) -> None:
            self._claims: dict[str, dict[str, Any]] = {}
            self._last_gc = 0.0

        def _gc(self, every_s: float = 1.0) -> None:
            """Drop claims whose group is gone (its driver died) or never came (past the TTL)."""
            now = time.time()
            if now - self._last_gc < every_s:
                return
            self._last_gc = now
            from ray.util import placement_group_table

            try:
                table = placement_group_table()
            except Exception:  # noqa: BLE001 - GCS hiccup: keep every claim
                return
            for key, entry in list(self._claims.items()):
                pg_hex = entry.get("pg")
                if pg_hex is None:
                    gone = now - entry["since"] > entry["ttl_s"]
                else:
                    gone = table.get(pg_hex, {}).get("state") in (None, "REMOVED")
                if gone:
                    del self._claims[key]

        def _stale(self, entry: dict[str, Any]) -> bool:
            pg_hex = entry.get("pg")
            if pg_hex is None:
                return time.time() - entry["since"] > entry["ttl_s"]
            from ray.util import placement_group_table

            try:
                state = placement_group_table().get(pg_hex, {}).get("state")
            except Exception:  # noqa: BLE001 - GCS hiccup: keep the claim
                return False
            return state in (None, "REMOVED")

        def claim(self, key: str, node_ids: list[str], owner: str, ttl_s: float) -> bool:
            nodes = set(node_ids)
            for other_key, entry in list(self._claims.items()):
                if other_key == key or nodes & set(entry["nodes"]):
                    if entry["owner"] == owner:
                        continue
                    if self._stale(entry):
                        del self._claims[other_key]
                        continue
                    return False
            self._claims[key] = {"owner": owner, "nodes": sorted(nodes), "pg": None, "since": time.time(), "ttl_s": ttl_s}
            return True

        def attach(self, key: str, owner: str, pg_hex: str) -> bool:
            entry = self._claims.get(key)
            if entry is None or entry["owner"] != owner:
                return False
            entry["pg"] = pg_hex
            return True

        def release(self, key: str, owner: str) -> bool:
            entry = self._claims.get(key)
            if entry is None or entry["owner"] != owner:
                return False
            del self._claims[key]
            return True

        def snapshot(self) -> dict[str, dict[str, Any]]:
            self._gc()
            return {k: dict(v) for k, v in self._claims.items()}

    return DomainClaims


_claims_lock = threading.Lock()
_claims_cls: list[Any] = []


def _claims():
    """The cluster's claim registry: a named detached actor, created on first use by anyone."""
    with _claims_lock:
        if not _claims_cls:
            _claims_cls.append(_claims_actor_class())
        return _claims_cls[0].options(
            name=CLAIMS_ACTOR, namespace=CLAIMS_NAMESPACE, lifetime="detached", get_if_exists=True
        ).remote()


def claims_snapshot() -> dict[str, dict[str, Any]]:
    """What the registry holds now: claim key -> owner, nodes, placement group, since."""
    import ray

    return ray.get(_claims().snapshot.remote())


# -- reservations ----------------------------------------------------------------------------------


@dataclass
class Reservation:
    """A ready placement group inside one domain, and the claim that keeps others out of it.

    Release it (``release()`` or ``with``) to give the domain back.
    """

    placement_group: Any
    choice: DomainChoice
    step: int
    step_name: str
    wait_s: float
    attempts: list[dict[str, Any]]
    owner: str
    _released: bool = False

    @property
    def domain(self) -> str:
        return self.choice.domain

    @property
    def level(self) -> str:
        return self.choice.level

    @property
    def bundles(self) -> tuple[Mapping[str, float], ...]:
        return self.choice.bundles

    @property
    def fallback(self) -> bool:
        """True when a later step of the chain than the first one was used."""
        return self.step > 0

    def scheduling_strategy(self, bundle_index: int = -1):
        """``PlacementGroupSchedulingStrategy`` for a task/actor in bundle ``bundle_index``."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            self.placement_group, placement_group_bundle_index=bundle_index,
            placement_group_capture_child_tasks=True,
        )

    def actor_options(self, bundle_index: int) -> dict[str, Any]:
        """``.options(...)`` for a task/actor that takes all of bundle ``bundle_index``."""
        bundle = dict(self.bundles[bundle_index])
        return {
            "num_cpus": bundle.pop("CPU", 0),
            "num_gpus": bundle.pop("GPU", 0),
            "resources": bundle,
            "scheduling_strategy": self.scheduling_strategy(bundle_index),
        }

    def bundle_nodes(self) -> dict[int, str]:
        """Bundle index -> node id, as Ray placed them."""
        from ray.util import placement_group_table

        table = placement_group_table(self.placement_group)
        return {int(k): v for k, v in (table.get("bundles_to_node_id") or {}).items()}

    def release(self) -> None:
        """Remove the placement group and drop the claim (idempotent)."""
        if self._released:
            return
        import ray
        from ray.util import remove_placement_group

        self._released = True
        try:
            remove_placement_group(self.placement_group)
        finally:
            ray.get(_claims().release.remote(self.choice.claim_key, self.owner))
            telemetry.reservation_released(self.choice.level)
            telemetry.emit("placement_release", domain=self.domain, level=self.level, owner=self.owner)

    def to_dict(self) -> dict[str, Any]:
        return {
            "domain": self.domain,
            "level": self.level,
            "label_key": self.choice.key,
            "nodes": list(self.choice.node_ids),
            "bundles": [dict(b) for b in self.bundles],
            "step": self.step,
            "step_name": self.step_name,
            "wait_s": round(self.wait_s, 4),
            "attempts": self.attempts,
        }

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def use_topology_strategy(flag: bool | None, version: str | None = None) -> bool:
    """Whether to pass Ray's experimental ``topology_strategy`` (Ray 2.57 and newer): ``None`` = when
    the Ray (``version``, default the installed one) has it and is in the tested range; ``True``
    raises RayVersionError on a Ray without it or outside the tested range."""
    if flag is None:
        return has_feature("topology_strategy", version) and is_tested_ray(version)
    if flag:
        require_feature("topology_strategy", version)
        require_tested_ray("placement topology_strategy (experimental in Ray)", version)
    return bool(flag)


def _create_pg(choice: DomainChoice, name: str, topology: bool):
    from ray.util.placement_group import placement_group

    require_feature("bundle_label_selector")
    kwargs: dict[str, Any] = {"bundle_label_selector": [dict(s) for s in choice.selectors], "name": name}
    if topology:
        kwargs["topology_strategy"] = {NODE_ID_KEY: choice.strategy, choice.key: "STRICT_PACK"}
    else:
        kwargs["strategy"] = choice.strategy
    return placement_group([dict(b) for b in choice.bundles], **kwargs)


def reserve(
    *steps: DomainRequest,
    poll_s: float = 0.2,
    name: str = "",
    topology_strategy: bool | None = None,
    claim_ttl_s: float = 120.0,
) -> Reservation:
    """Reserve one domain for the first step of ``steps`` that can be met within its deadline.

    Returns a ready :class:`Reservation`. Raises :class:`WouldSplitDomain` when no step could ever
    be met by one domain, else :class:`NoDomainAvailable`; either error's ``attempts`` lists every
    step and domain tried and why each failed. ``topology_strategy``: also pass Ray's experimental
    ``topology_strategy`` (default: on the tested Ray range only; ``True`` outside it raises
    :class:`~ray_accel_ext.errors.RayVersionError`).
    """
    import ray

    if not steps:
        raise ValueError("reserve() needs at least one DomainRequest")
    topology = use_topology_strategy(topology_strategy)
    owner = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    claims = _claims()
    attempts: list[dict[str, Any]] = []
    start = time.monotonic()
    telemetry.inventory_metrics(read_inventory())
    for index, step in enumerate(steps):
        step_start = time.monotonic()
        deadline = step_start + step.deadline_s
        tried: set[str] = set()
        while True:
            inventory = read_inventory()
            held = ray.get(claims.snapshot.remote())
            busy_nodes = {n for entry in held.values() for n in entry["nodes"]}
            try:
                choice = choose_domain(inventory, step, busy_domains=held, busy_nodes=busy_nodes, exclude=tried)
            except SchedulingError as exc:
                now = time.monotonic()
                if exc.data.get("retryable") and now < deadline:
                    time.sleep(min(poll_s, deadline - now))
                    continue
                attempts.append(_attempt(index, step, None, exc.data.get("reason", "error"), exc.message, now - step_start))
                break
            if not ray.get(claims.claim.remote(choice.claim_key, list(choice.node_ids), owner, claim_ttl_s)):
                continue  # lost a race for this domain; look again
            pg = _create_pg(choice, name or f"rayaccel-{owner}", topology)
            remaining = min(step.domain_wait_s, max(0.0, deadline - time.monotonic()))
            ready = pg.wait(remaining) if remaining > 0 else False
            if ready:
                ray.get(claims.attach.remote(choice.claim_key, owner, pg.id.hex()))
                wait_s = time.monotonic() - start
                attempts.append(_attempt(index, step, choice.domain, "ready", "", time.monotonic() - step_start))
                reservation = Reservation(pg, choice, index, step.label(), wait_s, attempts, owner)
                telemetry.placement_event(reservation.to_dict() | {"outcome": "ready", "fallback": index > 0,
                                          "generation": choice.generation, "topology": choice.topology,
                                          "hosts": len(choice.bundles)})
                return reservation
            from ray.util import remove_placement_group

            remove_placement_group(pg)
            ray.get(claims.release.remote(choice.claim_key, owner))
            tried.add(choice.claim_key)
            attempts.append(_attempt(index, step, choice.domain, "timeout",
                                     f"placement group not ready within {remaining:.3g}s", time.monotonic() - step_start))
            if time.monotonic() >= deadline:
                break

    wait_s = time.monotonic() - start
    all_split = all(a["outcome"] in ("no-match", "too-large", "incomplete") for a in attempts)
    cls = WouldSplitDomain if all_split else NoDomainAvailable
    summary = "; ".join(f"step {a['step']} {a['step_name']}: {a['outcome']}" + (f" ({a['reason']})" if a["reason"] else "")
                        for a in attempts)
    error = cls(f"no domain for any of {len(steps)} step(s): {summary}",
                request=[s.to_dict() for s in steps], attempts=attempts, wait_s=round(wait_s, 4))
    telemetry.placement_event({"outcome": "failed", "error": type(error).__name__, "level": steps[-1].level,
                               "step": len(steps) - 1, "step_name": steps[-1].label(), "domain": None,
                               "wait_s": round(wait_s, 4), "attempts": attempts, "fallback": len(steps) > 1,
                               "hosts": steps[-1].hosts, "generation": None, "topology": None})
    raise error


def _attempt(index: int, step: DomainRequest, domain: str | None, outcome: str, reason: str, waited: float) -> dict[str, Any]:
    return {"step": index, "step_name": step.label(), "level": step.level, "domain": domain,
            "outcome": outcome, "reason": reason, "waited_s": round(waited, 4)}


def reserve_domain(
    level: str = "fabric",
    *,
    hosts: int | None = None,
    bundles: Sequence[Mapping[str, float]] | None = None,
    bundle: Mapping[str, float] | None = None,
    selector: Mapping[str, str] | None = None,
    deadline_s: float = 30.0,
    complete: bool = False,
    domain_wait_s: float = 10.0,
    **kwargs: Any,
) -> Reservation:
    """One-step :func:`reserve`: ``hosts`` (or ``bundles``, or the whole domain) at ``level``."""
    step = DomainRequest(level=level, hosts=hosts, bundles=tuple(bundles) if bundles else None, bundle=bundle,
                         selector=dict(selector or {}), deadline_s=deadline_s, complete=complete,
                         domain_wait_s=domain_wait_s)
    return reserve(step, **kwargs)
