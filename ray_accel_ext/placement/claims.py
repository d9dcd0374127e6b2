"""The cluster-wide claim registry: a named detached actor that serialises domain claims, so
concurrent callers in any driver or worker never get the same domain or an overlapping node set."""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["CLAIMS_ACTOR", "CLAIMS_NAMESPACE", "claims_registry", "claims_snapshot"]

CLAIMS_ACTOR = "rayaccel-domain-claims"
CLAIMS_NAMESPACE = "rayaccel"


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


def claims_registry():
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

    return ray.get(claims_registry().snapshot.remote())
