"""Every backend call the suite makes is bounded: a blocking ``detect()`` fails its test with a
message that says so (and where it blocks) instead of hanging the suite, and a ``BaseException``
(``SystemExit``, ``KeyboardInterrupt``) fails the test instead of ending the pytest session.

The call runs on a daemon thread, waited for at most the discovery budget plus :data:`GRACE_S`
(node start gives a backend the budget, then abandons it); a blocked thread is left behind, as the
node start would leave it.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from ..host import DEFAULT_BUDGET_S

__all__ = ["GRACE_S", "bounded"]

GRACE_S = 2.0
T = TypeVar("T")


def _where(thread: threading.Thread) -> str:
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "unknown"
    stack = traceback.extract_stack(frame)
    return " <- ".join(f"{f.filename.rpartition('/')[2]}:{f.lineno} {f.name}" for f in reversed(stack[-4:]))


def bounded(call: Callable[..., T], *args: Any, what: str, host: Any = None) -> T:
    """``call(*args)`` within ``host``'s budget (default :data:`DEFAULT_BUDGET_S`) plus
    :data:`GRACE_S`; its return value, or the ``Exception`` it raised (re-raised here)."""
    budget = getattr(getattr(host, "deadline", None), "budget_s", None) or DEFAULT_BUDGET_S
    limit = budget + GRACE_S
    box: list[tuple[str, Any]] = []

    def run() -> None:
        try:
            box.append(("value", call(*args)))
        except BaseException as exc:  # noqa: BLE001 - judged below
            box.append(("error", exc))

    worker = threading.Thread(target=run, name=f"conformance-{what}", daemon=True)
    worker.start()
    worker.join(limit)
    if not box:
        pytest.fail(
            f"{what} did not return within {limit:g}s (the {budget:g}s discovery budget + {GRACE_S:g}s): it blocks. "
            f"At node start it would be abandoned when the budget is spent and the node labelled degraded; "
            f"bound every wait with host.deadline (host.metadata and host.run already do). "
            f"It is blocked at: {_where(worker)}",
            pytrace=False,
        )
    kind, value = box[0]
    if kind == "value":
        return value
    if isinstance(value, Exception):
        raise value
    pytest.fail(
        f"{what} raised {type(value).__name__}{': ' + str(value) if str(value) else ''}, which is not an Exception. "
        f"A backend must never raise SystemExit, KeyboardInterrupt or another BaseException: node start contains "
        f"it (the backend is reported and dropped), but it would end any other program that calls the backend",
        pytrace=False,
    )
