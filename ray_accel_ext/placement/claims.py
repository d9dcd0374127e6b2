"""The cluster-wide claim registry: a named detached actor that serialises domain claims, so
concurrent callers in any driver or worker never get the same domain or an overlapping node set.

**Claims survive a restart of the registry.** Every placement group that holds a domain is named
after its claim (:func:`claim_pg_name`: ``<name>#rayaccel-claim:<owner>:<label key>=<domain>``),
and a registry that starts (first time or after its actor was restarted) rebuilds its claims from
Ray's own placement-group table: each group not ``REMOVED`` whose name parses holds its domain,
over the domain's alive nodes and the nodes its bundles sit on. A claim whose group was not yet
created is not in the table; its owner re-asserts it in :meth:`attach`, which claims again only
if the domain is still free (else the owner removes its group and looks again). So a domain is
never held twice, whatever the moment of the restart.

**Waiting callers are served in order.** A caller whose fitting domains are all held calls
``wait_in_line(owner, candidates, ticket)`` at every poll. The registry stamps a ticket on the
first call and the caller presents it again on every later one, so a restarted registry learns
the same order back within one poll. A claim of a domain that an older live waiter could use is
refused with ``"queued"``; a waiter that has not polled for its ``ttl_s`` has left the line.
Between polls a caller waits in ``changed(version)``, which returns as soon as a claim or a
place in the line is given back, so a freed domain reaches the line at once.

**A caller that gives up leaves nothing held** (:meth:`_DomainClaims.withdraw`).

**Racing callers claim in one call.** ``claim_first`` takes the first still free of a caller's
best-fitting domains and otherwise answers with the claims held, so callers at the same moment
neither look before claiming nor lose, look and claim again; a domain given back moments ago is
taken after the others of its size (:data:`COOLING_S`).

**The cost follows the claims held, not the cluster's history.** Ray keeps removed groups in its
table; the registry reads the whole table only when it starts (to rebuild), and otherwise reads
the one group of each claim it holds (:mod:`.groups`), at most once a second.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

from .groups import UNPLACED, group_entry

__all__ = [
    "CLAIMS_ACTOR",
    "CLAIMS_NAMESPACE",
    "CLAIM_MARK",
    "claim_pg_name",
    "parse_claim_pg_name",
    "claims_registry",
    "forget_claims_registry",
    "claims_snapshot",
    "claims_queue",
]

CLAIMS_ACTOR = "rayaccel-domain-claims"
CLAIMS_NAMESPACE = "rayaccel"
CLAIM_MARK = "#rayaccel-claim:"
COOLING_S = 0.5
POKE_EVERY_S = 0.5
# How long an owner that withdrew is remembered: far longer than any call of its is in flight
# (a claim's own TTL, reserve()'s default 120 s, bounds what one would hold in any case).
WITHDRAWN_KEEP_S = 600.0


def claim_pg_name(name: str, owner: str, claim_key: str) -> str:
    """The name of a placement group that holds ``claim_key`` for ``owner`` (``name`` in front)."""
    return f"{name or 'rayaccel'}{CLAIM_MARK}{owner}:{claim_key}"


def parse_claim_pg_name(pg_name: str) -> tuple[str, str] | None:
    """``(owner, claim_key)`` from a group name made by :func:`claim_pg_name`, else None."""
    _, mark, tail = (pg_name or "").rpartition(CLAIM_MARK)
    owner, sep, key = tail.partition(":")
    if not mark or not sep or not owner or "=" not in key:
        return None
    return owner, key


class _DomainClaims:
    """Which domains (and nodes) are held, by whom, and who waits; one per cluster.

    An asyncio actor: the methods other than :meth:`changed` are plain functions Ray runs on the
    actor's event loop one at a time, so each acts on the claims as one step; :meth:`changed`
    waits on the loop for the next time something is given back.
    """

    def __init__(self) -> None:
        self._claims: dict[str, dict[str, Any]] = {}
        self._waiters: dict[str, dict[str, Any]] = {}
        self._last_gc = 0.0
        self._changes = 0
        self._freed = asyncio.Event()
        self._released: dict[str, float] = {}  # claim key -> when its owner gave it back (monotonic)
        self._poke_due: asyncio.TimerHandle | None = None
        self._poked = float("-inf")
        self._withdrawn: dict[str, float] = {}  # owner -> when it gave up (monotonic); see withdraw
        self.incarnation = uuid.uuid4().hex
        self.rebuilt = self._rebuild(*_read_table_and_nodes())
        _refresh_metrics()  # the metrics process starts with the registry

    # -- rebuilding from Ray's placement-group table (the one read of the whole table) -----------

    def _rebuild(self, table: dict[str, Any], nodes: list[Any]) -> int:
        # A CREATED group wins over a PENDING one naming the same domain (one of two owners
        # racing across a restart; the other's attach fails).
        rank = {"CREATED": 0, "RESCHEDULING": 1, "PENDING": 2}
        for pg_hex, entry in sorted(table.items(), key=lambda kv: rank.get(kv[1].get("state"), 3)):
            parsed = parse_claim_pg_name(str(entry.get("name") or ""))
            if entry.get("state") in (None, "REMOVED") or parsed is None or parsed[1] in self._claims:
                continue
            owner, key = parsed
            label_key, _, value = key.partition("=")
            members = {n.node_id for n in nodes if n.labels.get(label_key) == value}
            members |= {n for n in (entry.get("bundles_to_node_id") or {}).values() if n not in UNPLACED}
            self._claims[key] = _entry(owner, members, 0.0, pg=pg_hex, rebuilt=True)
        return len(self._claims)

    # -- what was given back, and who waits for it ---------------------------------------------------

    def _version(self) -> str:
        return f"{self.incarnation}/{self._changes}"

    def _gave_back(self) -> None:
        """A claim or a place in the line went away: wake every caller in :meth:`changed`."""
        self._changes += 1
        self._freed.set()
        self._freed = asyncio.Event()
        self._tell_exporter()

    def _tell_exporter(self) -> None:
        """Have the metrics process set its gauges again: at most every ``POKE_EVERY_S``, and
        always after the last change (a burst of reservations costs one or two refreshes)."""
        if self._poke_due is None:
            loop = asyncio.get_running_loop()
            self._poke_due = loop.call_at(max(loop.time(), self._poked + POKE_EVERY_S), self._poke)

    def _poke(self) -> None:
        self._poke_due, self._poked = None, asyncio.get_running_loop().time()
        _refresh_metrics()

    async def changed(self, version: str, timeout_s: float) -> str:
        """Return when something was given back since ``version`` (from :meth:`look`), or after
        ``timeout_s``; the version now."""
        if version == self._version() and timeout_s > 0:
            try:
                await asyncio.wait_for(self._freed.wait(), timeout_s)
            except asyncio.TimeoutError:
                pass
        return self._version()

    # -- claims -----------------------------------------------------------------------------------

    def _gc(self, every_s: float = 1.0) -> None:
        """Drop claims whose group is gone (its driver died) or never came (past the TTL)."""
        now = time.time()
        if now - self._last_gc < every_s:
            return
        self._last_gc = now
        for key, entry in list(self._claims.items()):
            if self._gone(entry):
                del self._claims[key]
                self._gave_back()

    @staticmethod
    def _gone(entry: dict[str, Any]) -> bool:
        """Whether a claim's group is removed or unknown to Ray (one read of that group), or a
        claim without a group is past its TTL."""
        if entry.get("pg") is None:
            return time.time() - entry["since"] > entry["ttl_s"]
        try:
            state = group_entry(entry["pg"]).get("state")
        except Exception:  # noqa: BLE001 - GCS hiccup: keep the claim
            return False
        return state in (None, "REMOVED")

    def _conflict(self, key: str, nodes: set[str], owner: str) -> bool:
        for other_key, entry in list(self._claims.items()):
            if other_key == key or nodes & set(entry["nodes"]):
                if entry["owner"] == owner:
                    continue
                if self._gone(entry):
                    del self._claims[other_key]
                    self._gave_back()
                    continue
                return True
        return False

    def _promised(self, key: str, owner: str) -> bool:
        """Whether an older live waiter than ``owner`` could use ``key``."""
        self._expire_waiters()
        mine = self._waiters.get(owner, {}).get("ticket", float("inf"))
        return any(w["ticket"] < mine and key in w["candidates"] for o, w in self._waiters.items() if o != owner)

    def claim(self, key: str, node_ids: list[str], owner: str, ttl_s: float) -> str:
        """``"ok"``, ``"held"`` (by another owner, or ``owner`` withdrew) or ``"queued"`` (promised
        to an older waiter)."""
        if owner in self._withdrawn or self._conflict(key, set(node_ids), owner):
            return "held"
        current = self._claims.get(key)
        if current is None or current["owner"] != owner:
            if self._promised(key, owner):
                return "queued"
            self._claims[key] = _entry(owner, node_ids, ttl_s)
            self._tell_exporter()
        elif current["pg"] is None:  # a lease (no group holds the domain): renewing restarts its TTL
            current["since"], current["ttl_s"] = time.time(), ttl_s
        self.leave(owner)
        return "ok"

    def claim_first(self, candidates: list[list[Any]], owner: str, ttl_s: float) -> dict[str, Any]:
        """Claim the first of ``candidates`` (``[key, node_ids]``, best first) that no one else holds
        and no older waiter is promised: ``{"verdict": "ok", "key": key}``. Else ``"queued"`` (one was
        promised) or ``"held"``, with :meth:`look`'s claims and version, so the caller chooses again
        without another call. One call where racing callers would each pay a look and a claim."""
        taken = {n: e["owner"] for e in self._claims.values() for n in e["nodes"]}
        taken_keys = {k: e["owner"] for k, e in self._claims.items()}
        queued = False
        for key, node_ids in self._coolest_first(candidates):
            if taken_keys.get(key, owner) != owner or any(taken.get(n, owner) != owner for n in node_ids):
                continue  # held: a stale holder is dropped by the periodic check (:meth:`_gc`)
            verdict = self.claim(key, node_ids, owner, ttl_s)
            if verdict == "ok":
                return {"verdict": "ok", "key": key}
            queued |= verdict == "queued"
        if not queued and candidates:
            # Every candidate is held: the first one's holders are checked now (their groups may be gone).
            key, node_ids = candidates[0]
            verdict = self.claim(key, node_ids, owner, ttl_s)
            if verdict == "ok":
                return {"verdict": "ok", "key": key}
            queued = verdict == "queued"
        return {"verdict": "queued" if queued else "held", "key": None, **self.look()}

    def _coolest_first(self, candidates: list[list[Any]]) -> list[list[Any]]:
        """``candidates`` with a domain given back less than ``COOLING_S`` ago after the others of
        its size (the oldest given back first): Ray hands a removed group's resources back to the
        node asynchronously, and a group made there before that waits for a retry of Ray's
        scheduler (0.2-0.7 s measured on Ray 2.60; ``gcs_create_placement_group_retry_*``)."""
        now = time.monotonic()
        self._released = {k: t for k, t in self._released.items() if now - t < COOLING_S}
        if not self._released:
            return candidates
        order = sorted(range(len(candidates)),
                       key=lambda i: (len(candidates[i][1]), self._released.get(candidates[i][0], 0.0), i))
        return [candidates[i] for i in order]

    def attach(self, key: str, owner: str, pg_hex: str, node_ids: list[str] | None = None) -> bool:
        """Record ``owner``'s group for its claim; claims again when a restart lost the claim
        and the domain is still free. False: someone else holds it now."""
        entry = self._claims.get(key)
        if entry is None:
            if node_ids is None or owner in self._withdrawn or self._conflict(key, set(node_ids), owner):
                return False
            entry = self._claims[key] = _entry(owner, node_ids, 0.0)
        if entry["owner"] != owner:
            return False
        entry["pg"] = pg_hex
        self._tell_exporter()
        return True

    def release(self, key: str, owner: str) -> bool:
        entry = self._claims.get(key)
        if entry is None or entry["owner"] != owner:
            return False
        del self._claims[key]
        self._released[key] = time.monotonic()
        self._gave_back()
        return True

    def withdraw(self, owner: str) -> int:
        """``owner`` gave up (``reserve()`` raised): drop its claims and place in line, and refuse
        what it sends from now on (remembered for ``WITHDRAWN_KEEP_S``); the claims dropped.
        A call whose answer it stopped waiting for can run after this one (Ray runs an asyncio
        actor's calls, and retries, in no set order:
        https://docs.ray.io/en/latest/ray-core/actors/task-orders.html); a claim made then would
        hold its domain for the whole TTL with nobody to give it back."""
        now = time.monotonic()
        self._withdrawn = {o: t for o, t in self._withdrawn.items() if now - t < WITHDRAWN_KEEP_S}
        self._withdrawn[owner] = now
        mine = [k for k, e in self._claims.items() if e["owner"] == owner]
        for key in mine:
            del self._claims[key]
            self._released[key] = now
        self._waiters.pop(owner, None)
        self._gave_back()
        return len(mine)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        self._gc()
        return {k: dict(v) for k, v in self._claims.items()}

    def look(self) -> dict[str, Any]:
        """:meth:`snapshot` and the version to pass to :meth:`changed`."""
        claims = self.snapshot()
        return {"claims": claims, "version": self._version()}

    # -- the line of waiting callers -----------------------------------------------------------------

    def _expire_waiters(self) -> None:
        now = time.monotonic()
        for owner, w in list(self._waiters.items()):
            if now - w["seen"] > w["ttl_s"]:
                self.leave(owner)

    def wait_in_line(self, owner: str, candidates: list[str], ticket: float | None, ttl_s: float) -> float:
        """Join (or stay in) the line wanting ``candidates``; returns the caller's ticket (an owner
        that withdrew is not put back in line)."""
        self._expire_waiters()
        if owner in self._withdrawn:
            return float(ticket) if ticket is not None else time.time()
        w = self._waiters.get(owner)
        if w is None:
            w = self._waiters[owner] = {"ticket": float(ticket) if ticket is not None else time.time()}
            self._tell_exporter()
        w.update(candidates=set(candidates), seen=time.monotonic(), ttl_s=float(ttl_s))
        return w["ticket"]

    def leave(self, owner: str) -> None:
        if self._waiters.pop(owner, None) is not None:
            self._gave_back()  # what it was promised is free for the next in line

    def queue(self) -> list[dict[str, Any]]:
        """Live waiters, oldest ticket first."""
        self._expire_waiters()
        return [{"owner": o, "ticket": w["ticket"], "candidates": sorted(w["candidates"])}
                for o, w in sorted(self._waiters.items(), key=lambda kv: kv[1]["ticket"])]

    def info(self) -> dict[str, Any]:
        """How many claims this incarnation rebuilt, what it holds, and whether it is a restart."""
        import ray

        now = time.monotonic()
        return {"rebuilt": self.rebuilt, "claims": len(self._claims), "waiters": len(self._waiters),
                "cooling": sorted(k for k, t in self._released.items() if now - t < COOLING_S),
                "incarnation": self.incarnation,
                "restarted": ray.get_runtime_context().was_current_actor_reconstructed}


def _refresh_metrics() -> None:
    """Ask the cluster's metrics process to refresh now (started on first use)."""
    try:
        from ..cluster.exporter import refresh_soon

        refresh_soon()
    except Exception:  # noqa: BLE001 - metrics never fail a claim
        pass


def _entry(owner: str, node_ids, ttl_s: float, pg: str | None = None, rebuilt: bool = False) -> dict[str, Any]:
    return {"owner": owner, "nodes": sorted(set(node_ids)), "pg": pg, "since": time.time(), "ttl_s": ttl_s,
            "rebuilt": rebuilt}


def _read_table_and_nodes() -> tuple[dict[str, Any], list[Any]]:
    """Ray's whole placement-group table and the alive nodes, retried over a GCS hiccup."""
    from ray.util import placement_group_table

    from ..cluster.nodes import alive_nodes

    for attempt in range(4):
        try:
            return placement_group_table(), alive_nodes()
        except Exception:  # noqa: BLE001 - GCS hiccup: try again, then fail the start
            time.sleep(0.5 * (attempt + 1))
    return placement_group_table(), alive_nodes()


def _claims_actor_class():
    import ray

    from ..cluster.nodes import HEAD_RESOURCE

    # On the head node (the cluster lives and dies with it; a tray that fails does not take the
    # registry along). max_task_retries: a call in flight when the actor dies runs again on the
    # restarted one; every method is idempotent for its owner.
    return ray.remote(num_cpus=0, resources={HEAD_RESOURCE: 0.001}, max_restarts=-1,
                      max_task_retries=-1)(_DomainClaims)


_claims_lock = threading.Lock()
_claims_cls: list[Any] = []
_claims_handle: dict[tuple[str, str], Any] = {}


def claims_registry():
    """The cluster's claim registry: a named detached actor, created on first use by anyone; its
    handle kept for this connection (it survives the actor's restarts)."""
    import ray

    ctx = ray.get_runtime_context()
    where = (ctx.gcs_address, ctx.get_job_id())
    with _claims_lock:
        if where not in _claims_handle:
            if not _claims_cls:
                _claims_cls.append(_claims_actor_class())
            _claims_handle.clear()
            _claims_handle[where] = _claims_cls[0].options(
                name=CLAIMS_ACTOR, namespace=CLAIMS_NAMESPACE, lifetime="detached", get_if_exists=True
            ).remote()
        return _claims_handle[where]


def forget_claims_registry() -> None:
    """Look the registry up again on next use (its actor died for good: killed without restart)."""
    with _claims_lock:
        _claims_handle.clear()


def claims_snapshot() -> dict[str, dict[str, Any]]:
    """What the registry holds now: claim key -> owner, nodes, placement group, since, rebuilt."""
    import ray

    return ray.get(claims_registry().snapshot.remote())


def claims_queue() -> list[dict[str, Any]]:
    """The callers waiting for a domain now, first served first: owner, ticket, candidate claims."""
    import ray

    return ray.get(claims_registry().queue.remote())
