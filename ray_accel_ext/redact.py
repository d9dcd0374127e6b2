"""The secret vocabulary, in one place: which names look like credentials, and how values are
taken out of text that goes to logs, telemetry, records and their READMEs.

* :func:`is_secret_name`: a variable or metadata key that may hold a credential (``*TOKEN*``,
  ``*SECRET*``, ``*PASSW*``, ``*KEY*``, ``*CREDENTIAL*``, ``*AUTH*``, ``*COOKIE*``, ``*SESSION*``;
  covers ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``).
* :func:`scrub_secret_lines`: drops ``KEY: value`` / ``KEY=value`` lines whose key is secret
  (a recorded metadata answer such as ``tpu-env``).
* :func:`redact`: keeps the name of a secret-looking ``NAME=value`` / ``NAME: 'value'`` pair and
  replaces its value. A name right after ``/`` is a URL path (``/latest/api/token: HTTP 403``) and
  is left alone, and the secret word must start the name or one of its ``_``/``.``/``-`` parts
  (``monkey: 3`` stays).

A new secret word is added to :data:`SECRET_WORDS` and nowhere else.
"""

from __future__ import annotations

import re

__all__ = ["SECRET_WORDS", "SECRET_RE", "REDACTED", "is_secret_name", "scrub_secret_lines", "redact"]

SECRET_WORDS = ("TOKEN", "SECRET", "PASSW", "CREDENTIAL", "KEY", "AUTH", "COOKIE", "SESSION")
REDACTED = "<redacted>"
_WORDS = "|".join(SECRET_WORDS)
SECRET_RE = re.compile(_WORDS, re.IGNORECASE)
_SECRET_LINE_RE = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*[:=]")
_PAIR = re.compile(
    r"(?<![/\w.-])"
    rf"(?P<name>(?:[A-Za-z0-9]+[_.-])*(?:{_WORDS})[A-Za-z0-9_.-]*)"
    r"(?P<sep>['\"]?\s*[:=]\s*)"
    r"(?P<quote>\\?['\"]?)"
    r"(?P<value>[^\s'\"\\,;)}]+)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """True for a variable or metadata key that may hold a credential."""
    return bool(SECRET_RE.search(name))


def scrub_secret_lines(text: str) -> str:
    """``text`` without ``KEY: value`` / ``KEY=value`` lines whose key looks like a credential."""
    lines = text.splitlines(keepends=True)
    return "".join(ln for ln in lines if not ((m := _SECRET_LINE_RE.match(ln)) and is_secret_name(m.group(1))))


def redact(text: str) -> str:
    """``text`` with the value of every secret-looking ``NAME=value`` pair replaced."""
    return _PAIR.sub(lambda m: f"{m['name']}{m['sep']}{m['quote']}{REDACTED}", text)
