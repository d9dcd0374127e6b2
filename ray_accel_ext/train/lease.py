"""Hand reserved hosts to a framework that places its own workers, and keep the domain claimed.

Ray Train and Ray Serve create their own placement group for their workers, so a reservation's
group must give the resources back before theirs can be placed. :class:`ClaimLease` does that
hand-over without giving the domain back to other callers of :func:`ray_accel_ext.placement.
reserve`: each claim in the cluster-wide registry is first turned into a time-limited claim (no
placement group attached; the registry drops it ``ttl_s`` after its last renewal), then the group
is removed, and a daemon thread renews the claims every ``ttl_s / 3`` until :meth:`release`.

What this does not cover (the same as for a reservation): work placed by other means between the
removal of the group and the framework's own group being placed could take the hosts; the
framework then waits for them (Ray Train: until its worker group start timeout). A driver that dies
stops renewing; its claims lapse after ``ttl_s``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from ..placement.claims import claims_registry

__all__ = ["ClaimLease"]

logger = logging.getLogger(__name__)


class ClaimLease:
    """Time-limited claims for ``reservations`` whose placement groups were handed over."""

    def __init__(self, reservations: Sequence[Any], ttl_s: float = 60.0) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be > 0")
        self.reservations = list(reservations)
        self.ttl_s = float(ttl_s)
        self.lost: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False

    def _renew(self) -> list[str]:
        import ray

        claims = claims_registry()
        lost = []
        for r in self.reservations:
            ok = ray.get(claims.claim.remote(r.choice.claim_key, list(r.choice.node_ids), r.owner, self.ttl_s)) == "ok"
            if not ok:
                lost.append(r.choice.claim_key)
        return lost

    def start(self) -> "ClaimLease":
        """Turn the claims into leases, remove the placement groups, start renewing."""
        if self._started:
            return self
        from ray.util import remove_placement_group

        lost = self._renew()
        if lost:
            raise RuntimeError(f"claims {lost} were taken by another owner before the hand-over")
        import ray

        claims = claims_registry()
        for r in self.reservations:
            remove_placement_group(r.placement_group)
            # the claim no longer follows a group: it is held by its TTL, renewed below
            ray.get(claims.attach.remote(r.choice.claim_key, r.owner, None))
        self._renew()
        self._started = True
        self._thread = threading.Thread(target=self._loop, name="rayaccel-claim-lease", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                for key in self._renew():
                    if key not in self.lost:
                        self.lost.append(key)
                        logger.warning("claim %s lapsed and was taken by another owner", key)
            except Exception as exc:  # noqa: BLE001 - the cluster may be going away; retry next period
                logger.warning("renewing claims failed: %s", exc)

    def release(self) -> None:
        """Stop renewing and give the domains back (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for r in self.reservations:
            r.release()
