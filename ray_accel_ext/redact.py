"""Credentials out of messages: ``NAME=value`` / ``NAME: 'value'`` pairs whose name looks secret.

Problems quote the outside text they could not parse (a ``tpu-env`` line, a tool's stderr), and
those messages go to the node log, the telemetry event and ``ray-accel record``'s README. A pair
such as ``ACCESS_TOKEN='...'`` keeps its name and loses its value. Names are matched like
``record.SECRET_RE`` (``TOKEN``, ``SECRET``, ``PASSW``, ``CREDENTIAL``, ``KEY``, ``AUTH``, ...); a
name right after ``/`` is a URL path (``/latest/api/token: HTTP 403``) and is left alone, and the
secret word must start the name or one of its ``_``/``.``/``-`` parts (``monkey: 3`` stays).
"""

from __future__ import annotations

import re

__all__ = ["redact", "REDACTED"]

REDACTED = "<redacted>"
_PAIR = re.compile(
    r"(?<![/\w.-])"
    r"(?P<name>(?:[A-Za-z0-9]+[_.-])*(?:TOKEN|SECRET|PASSW|CREDENTIAL|KEY|AUTH|COOKIE|SESSION)[A-Za-z0-9_.-]*)"
    r"(?P<sep>['\"]?\s*[:=]\s*)"
    r"(?P<quote>\\?['\"]?)"
    r"(?P<value>[^\s'\"\\,;)}]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with the value of every secret-looking ``NAME=value`` pair replaced."""
    return _PAIR.sub(lambda m: f"{m['name']}{m['sep']}{m['quote']}{REDACTED}", text)
