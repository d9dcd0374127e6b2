"""One caller's conversation with the claim registry: its calls, what it last learnt, its place in line."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .choose import DomainChoice
from .claims import forget_claims_registry

__all__ = ["ClaimLine"]


class ClaimLine:
    """This caller's calls to the claim registry, with a timeout, and its place in the line.

    ``known`` is what the registry last said it holds (empty before the first answer) and
    ``fresh`` whether nothing was waited for since: a caller chooses from ``known`` and lets
    :meth:`claim_first` tell it when that was out of date.
    """

    def __init__(self, registry, owner: str, timeout_s: float, waiter_ttl_s: float) -> None:
        self.registry, self.owner, self.timeout_s, self.waiter_ttl_s = registry, owner, timeout_s, waiter_ttl_s
        self.ticket: float | None = None
        self.version = ""
        self.known: dict[str, dict[str, Any]] = {}
        self.fresh = False

    def call(self, method: str, *args: Any, wait_s: float = 0.0) -> Any:
        return self.get(getattr(self.registry, method).remote(*args), wait_s)

    def get(self, ref, wait_s: float = 0.0) -> Any:
        import ray

        try:
            return ray.get(ref, timeout=self.timeout_s + wait_s)
        except ray.exceptions.ActorDiedError:
            forget_claims_registry()  # killed for good: the next caller makes a new one
            raise

    def _learn(self, state: dict[str, Any]) -> None:
        self.known, self.version, self.fresh = state["claims"], state["version"], True

    def look(self) -> dict[str, dict[str, Any]]:
        """The claims held now (the registry drops stale ones first)."""
        self._learn(self.call("look"))
        return self.known

    def claim_first(self, choices: list[DomainChoice], ttl_s: float) -> tuple[str, DomainChoice | None]:
        """Claim the first of ``choices`` still free: ``("ok", choice)``, or ``("held"|"queued", None)``
        with ``known`` brought up to date."""
        answer = self.call("claim_first", [[c.claim_key, list(c.node_ids)] for c in choices], self.owner, ttl_s)
        if answer["verdict"] == "ok":
            return "ok", next(c for c in choices if c.claim_key == answer["key"])
        self._learn(answer)
        return answer["verdict"], None

    def attach(self, choice: DomainChoice, pg_hex: str):
        """Send the group's id to the registry; the reference to its answer (False: the registry
        restarted and gave the domain to another caller)."""
        return self.registry.attach.remote(choice.claim_key, self.owner, pg_hex, list(choice.node_ids))

    def pause(self, seconds: float) -> None:
        """Wait until the registry is given something back since the last answer, or ``seconds``."""
        self.call("changed", self.version, seconds, wait_s=seconds)
        self.fresh = False

    def wait(self, candidates: Iterable[str]) -> None:
        self.ticket = self.call("wait_in_line", self.owner, sorted(set(candidates)), self.ticket, self.waiter_ttl_s)

    def withdraw(self) -> None:
        """On the way out of a failure: the registry drops this caller's claims and place in line,
        and ignores any call of its still on the way (a claim whose answer timed out here)."""
        try:
            self.registry.withdraw.remote(self.owner)  # nobody waits for the answer
        except Exception:  # noqa: BLE001 - already failing; the original error is what matters
            pass

    def leave(self) -> None:
        if self.ticket is not None:
            self.registry.leave.remote(self.owner)  # nobody waits for the answer
