"""The pure choice of a domain for a request: no Ray, linear in the node count.

Selectors follow Ray 2.60's semantics (``reference/ray-2.60.md`` section 6).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cluster.nodes import NodeView, node_views
from ..errors import NoDomainAvailable, WouldSplitDomain
from ..labels import FABRIC_HOSTS, FABRIC_TOPOLOGY, GENERATION, TPU_TOPOLOGY
from .request import DomainRequest

__all__ = ["DomainChoice", "DomainFits", "choose_domain", "choose_domains", "domain_fits", "match_selector", "ACCELERATOR_RESOURCES"]

HOSTS_LABEL = FABRIC_HOSTS
ACCELERATOR_RESOURCES = ("GPU", "TPU", "neuron_cores")
_EPS = 1e-9


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
    return choose_domains(nodes, request, busy_domains=busy_domains, busy_nodes=busy_nodes, exclude=exclude)[0]


def choose_domains(
    nodes: Iterable[Mapping[str, Any] | NodeView],
    request: DomainRequest,
    *,
    busy_domains: Iterable[str] = (),
    busy_nodes: Iterable[str] = (),
    exclude: Iterable[str] = (),
    limit: int = 1,
    fits: "DomainFits | None" = None,
) -> list[DomainChoice]:
    """:func:`choose_domain`'s best ``limit`` free domains, best first (at least one; the same
    errors). Callers that race for domains claim the first of these still free in one step.
    ``fits``: :func:`domain_fits` of these ``nodes`` and ``request``, kept from an earlier call."""
    if fits is None or fits.request != request:
        fits = domain_fits(nodes, request)
    scan = _Scan.of(fits, set(busy_domains), set(busy_nodes), set(exclude))
    if not scan.free:
        raise _no_domain(request, fits.groups, scan)
    best = heapq.nsmallest(max(1, limit), scan.free)
    return [_choice(request, value, fits.groups.members[value], fits.bundles[value]) for _, value in best]


@dataclass
class DomainFits:
    """The domains of an inventory that could hold a request, free or held: what choosing needs
    besides the claims, so one read of the nodes serves many choices."""

    request: DomainRequest
    groups: "_Groups"
    fitting: list[tuple[int, str]] = field(default_factory=list)  # (hosts, domain)
    bundles: dict[str, tuple[Mapping[str, float], ...]] = field(default_factory=dict)
    incomplete: list[str] = field(default_factory=list)
    largest: int = 0


def domain_fits(nodes: Iterable[Mapping[str, Any] | NodeView], request: DomainRequest) -> DomainFits:
    """Which domains of ``nodes`` could hold ``request`` (pure, linear in the node count)."""
    groups = _Groups.of(node_views(nodes), request.key, _compile(request.selector))
    out = DomainFits(request, groups)
    for value, members in groups.members.items():
        out.largest = max(out.largest, len(members))
        if request.complete and len(members) < groups.expected.get(value, 0):
            out.incomplete.append(value)
            continue
        bundles, distinct = _bundles_for(request, members)
        if _place_bundles(members, bundles, distinct):
            out.fitting.append((len(members), value))
            out.bundles[value] = bundles
    return out


def _choice(request: DomainRequest, value: str, members: list[NodeView], bundles) -> DomainChoice:
    selector = {request.key: value, **request.selector}
    first = members[0].labels
    return DomainChoice(
        level=request.level,
        key=request.key,
        domain=value,
        node_ids=tuple(m.node_id for m in members),
        bundles=tuple(dict(b) for b in bundles),
        strategy="STRICT_SPREAD" if request.hosts is not None or request.bundles is None else request.node_strategy,
        selectors=tuple(dict(selector) for _ in bundles),
        generation=first.get(GENERATION),
        topology=first.get(FABRIC_TOPOLOGY) or first.get(TPU_TOPOLOGY),
    )


@dataclass
class _Groups:
    """The matching nodes of an inventory by domain, with what the counts of the error need."""

    members: dict[str, list[NodeView]] = field(default_factory=dict)
    expected: dict[str, int] = field(default_factory=dict)
    seen_domains: set[str] = field(default_factory=set)
    total: int = 0
    matching: int = 0

    @classmethod
    def of(cls, views: Iterable[NodeView], key: str, compiled) -> "_Groups":
        out = cls()
        for node in views:
            out.total += 1
            value = node.labels.get(key)
            if not value:
                continue
            out.seen_domains.add(value)
            if not _match(node.labels, compiled):
                continue
            out.matching += 1
            out.members.setdefault(value, []).append(node)
            hosts = node.labels.get(HOSTS_LABEL, "")
            if hosts.isdigit():
                out.expected[value] = max(out.expected.get(value, 0), int(hosts))
        return out


def _bundles_for(request: DomainRequest, members: list[NodeView]) -> tuple[tuple[Mapping[str, float], ...], bool]:
    """The bundles ``request`` asks of a domain with ``members``, and whether each needs its own node."""
    if request.bundles is not None:
        return request.bundles, request.node_strategy == "STRICT_SPREAD"
    if request.hosts is not None:
        return (dict(request.bundle) if request.bundle else _min_bundle(members),) * request.hosts, True
    return tuple(dict(request.bundle) if request.bundle else _default_bundle(m) for m in members), True


@dataclass
class _Scan:
    """The fitting domains sorted into free (``(hosts, name)``), busy and tried ones."""

    free: list[tuple[int, str]] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    largest: int = 0

    @classmethod
    def of(cls, fits: DomainFits, busy_domains: set[str], busy_nodes: set[str], exclude: set[str]) -> "_Scan":
        out = cls(incomplete=fits.incomplete, largest=fits.largest)
        key = fits.request.key
        for hosts, value in fits.fitting:
            claim = f"{key}={value}"
            if claim in exclude:
                out.tried.append(value)
            elif claim in busy_domains or (busy_nodes and any(m.node_id in busy_nodes for m in fits.groups.members[value])):
                out.busy.append(value)
            else:
                out.free.append((hosts, value))
        return out


def _no_domain(request: DomainRequest, groups: _Groups, scan: _Scan) -> Exception:
    """Why no domain was chosen, as the error :func:`choose_domain` raises."""
    key = request.key
    facts = {
        "level": request.level,
        "label_key": key,
        "nodes": groups.total,
        "matching_nodes": groups.matching,
        "domains_seen": len(groups.seen_domains),
        "matching_domains": len(groups.members),
        "largest_matching_domain_hosts": scan.largest,
        "busy": sorted(scan.busy),
        "tried": sorted(scan.tried),
        "incomplete": sorted(scan.incomplete),
    }
    if scan.busy:
        return NoDomainAvailable(
            f"{request.label()}: all {len(scan.busy)} fitting domain(s) are held by other requests",
            reason="busy", retryable=True, **facts,
        )
    if scan.tried:
        return NoDomainAvailable(
            f"{request.label()}: every fitting domain was tried and did not become ready",
            reason="tried", retryable=False, **facts,
        )
    if not groups.members:
        why = f"no node has label {key}" if not groups.seen_domains else f"no node with {key} matches {request.selector}"
        return WouldSplitDomain(f"{request.label()}: {why}", reason="no-match", retryable=False, **facts)
    if scan.incomplete and len(scan.incomplete) == len(groups.members):
        return WouldSplitDomain(
            f"{request.label()}: every matching domain is incomplete (fewer alive nodes than {HOSTS_LABEL})",
            reason="incomplete", retryable=False, **facts,
        )
    return WouldSplitDomain(
        f"{request.label()}: larger than any domain (largest matching {key} has {scan.largest} host(s))",
        reason="too-large", retryable=False, **facts,
    )


def _min_bundle(members: list[NodeView]) -> dict[str, float]:
    bundles = [_default_bundle(m) for m in members]
    keys = set(bundles[0]).intersection(*bundles[1:]) if len(bundles) > 1 else set(bundles[0])
    return {k: min(b[k] for b in bundles) for k in sorted(keys)} or {"CPU": 1.0}
