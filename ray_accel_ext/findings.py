"""Coded problems explained: what ``ray-accel doctor``, the dashboard and ``ray-accel cluster`` show.

A :class:`Finding` is one cause in plain words with its fix. :func:`finding_of` makes one from a
:class:`~ray_accel_ext.model.Problem`, deciding from its code alone (never from its words);
:func:`finding` from a code and a message of the caller's (doctor's own probes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from . import problems as codes
from .model import Problem

__all__ = ["Finding", "finding", "finding_of"]


@dataclass(frozen=True)
class Finding:
    """One explained cause: ``cause`` (a code of :mod:`ray_accel_ext.problems`), ``severity``,
    plain-words ``message``, ``fix``; ``declared`` is False for a code nobody declared."""

    cause: str
    severity: str
    message: str
    fix: str
    backend: str | None = None
    detail: str | None = None
    declared: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def finding(code: str, message: str, *, backend: str | None = None, detail: str | None = None,
            hint: str | None = None) -> Finding:
    """The finding of ``code`` with the caller's message."""
    why = codes.explain(code, hint)
    return Finding(cause=why.cause, severity=why.severity, message=message, fix=why.fix, backend=backend,
                   detail=detail, declared=why.declared)


def finding_of(problem: Problem) -> Finding:
    """The finding of one coded problem: the code's summary and the problem's message."""
    code, backend, raw = problem.code, problem.backend or None, problem.message
    detail = f"{problem.error}: {raw}" if problem.stage is not None else raw
    if code == codes.BACKEND_LOAD and problem.stage is not None:
        message = f"the backend {backend} failed to load: {raw}"
    elif code == codes.BUDGET and problem.stage is not None:
        message = f"the backend {backend} {raw}"
    elif code == codes.BACKEND_CRASH and problem.stage is not None:
        message = f"the backend {backend} crashed in {problem.stage}(): {problem.error}: {raw}"
    elif code == codes.SKU_FILE:
        message, backend = f"an extra SKU file was ignored: {raw}", None
    elif code in (codes.DEVICE_GONE, codes.DEVICE_ADDED, codes.PROBE_FAILED, codes.START_DEGRADED):
        message = raw
    else:
        entry = codes.lookup(code)
        summary = entry.summary if entry is not None else f"a problem of code {code!r}"
        message = f"{backend + ': ' if backend else ''}{summary}: {raw}"
    if problem.device is not None:
        detail = f"device {problem.device}: {detail}"
    return finding(code, message, backend=backend, detail=detail, hint=problem.hint)
