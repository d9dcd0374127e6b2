"""The secret vocabulary, in one place: which names look like credentials, and how secrets are
taken out of text that goes to logs, telemetry, records, their READMEs and goldens.

By name:

* :func:`is_secret_name`: a variable or metadata key that may hold a credential (``*TOKEN*``,
  ``*SECRET*``, ``*PASSW*``, ``*KEY*``, ``*CREDENTIAL*``, ``*AUTH*``, ``*COOKIE*``, ``*SESSION*``,
  ``*BEARER*``; covers ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``).
* :func:`scrub_secret_lines`: drops ``KEY: value`` / ``KEY=value`` lines whose key is secret (a
  recorded metadata answer such as ``tpu-env``), with the continuation lines of a quoted value
  that spans several lines.

By structure (:func:`redact`, whatever the name around it):

* PEM blocks (``-----BEGIN ... PRIVATE KEY-----`` to its ``-----END ...-----``, or to the end of
  the text when the end is missing; RFC 7468);
* URL userinfo (``https://user:pass@host`` keeps scheme and host; RFC 3986 section 3.2.1);
* HTTP credentials after ``Bearer`` / ``Basic`` / ``Digest`` (RFC 6750, RFC 7617): 8 or more
  token characters of at least two kinds (upper, lower, digit, symbol), so prose stays;
* ``NAME=value`` / ``NAME: 'value'`` pairs whose name looks secret (the name is kept). A name right
  after ``/`` is a URL path (``/latest/api/token: HTTP 403``) and is left alone, and the secret
  word must start the name or one of its ``_``/``.``/``-`` parts (``monkey: 3`` stays);
* long high-entropy tokens: 32 or more characters of the base64url alphabet (``+`` too, ``=``
  padding) that mix upper case, lower case and digits with at least 4.2 bits of entropy per
  character (API keys, GitHub tokens, JWT segments). Hex digests and UUIDs (GPU UUIDs, cluster ids)
  have no upper case and are kept, as are paths (``/`` ends a token) and words.

A new secret word or shape is added here and nowhere else.
"""

from __future__ import annotations

import math
import re
from collections import Counter

__all__ = ["SECRET_WORDS", "SECRET_RE", "REDACTED", "TPU_ENV_KEYS", "is_secret_name", "scrub_secret_lines", "redact",
           "keep_tpu_env"]

# The keys of GCE's ``tpu-env`` attribute that discovery parses (backends/tpu/identity.py and
# layout.py). A recording keeps these and drops the rest of the attribute: credentials come in
# more shapes than any word list (DB_PASS, MYSQL_PWD, a scheme-less user:pass@proxy, a webhook URL).
TPU_ENV_KEYS = frozenset({
    "ACCELERATOR_TYPE", "TOPOLOGY", "WORKER_ID", "NODE_ID", "CONSUMER_PROJECT_ID", "ZONE", "TYPE",
    "CHIPS_PER_HOST_BOUNDS", "TPU_CHIPS_PER_HOST_BOUNDS", "HOST_BOUNDS", "TPU_HOST_BOUNDS",
    "TPU_TOPOLOGY_WRAP", "WRAP", "TPU_TOPOLOGY_ALT", "ALT", "TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_PROCESS_BOUNDS",
})
_TPU_ENV_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*):\s*'[^']*'\s*")


def keep_tpu_env(text: str) -> tuple[str, list[str]]:
    """``tpu-env`` with only the :data:`TPU_ENV_KEYS` lines, and the keys (or ``line N``) dropped."""
    kept: list[str] = []
    dropped: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _TPU_ENV_LINE.fullmatch(line.strip())
        if m and m.group(1) in TPU_ENV_KEYS:
            kept.append(line.strip())
        else:
            dropped.append(m.group(1) if m else f"line {n}")
    return "".join(f"{line}\n" for line in kept), dropped

SECRET_WORDS = ("TOKEN", "SECRET", "PASSW", "CREDENTIAL", "KEY", "AUTH", "COOKIE", "SESSION", "BEARER")
REDACTED = "<redacted>"
_WORDS = "|".join(SECRET_WORDS)
SECRET_RE = re.compile(_WORDS, re.IGNORECASE)
_SECRET_LINE_RE = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*[:=]\s*(?P<rest>.*)$", re.DOTALL)
_PEM = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]{1,64})-----.*?(?:-----END (?P=label)-----|\Z)", re.DOTALL
)
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]{0,30}://)(?P<info>[^/\s@'\"<>]{1,512})@")
_AUTH_SCHEME = re.compile(r"\b(?P<scheme>Bearer|Basic|Digest)(?P<sep>\s+)(?P<cred>[A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
_PAIR = re.compile(
    r"(?<![/\w.-])"
    rf"(?P<name>(?:[A-Za-z0-9]+[_.-])*(?:{_WORDS})[A-Za-z0-9_.-]*)"
    r"(?P<sep>['\"]?\s*[:=]\s*)"
    r"(?P<quote>\\?['\"]?)"
    r"(?P<value>[^\s'\"\\,;)}]+)",
    re.IGNORECASE,
)
# A name part that is a secret word: the word or its plural, a PASSW... word, a known compound, or a
# word ending in TOKEN/SECRET/PASSWORD/PASSWD/CREDENTIAL(S) ("keyboard", "author", "monkey" are not).
_COMPOUNDS = frozenset({"AUTHORIZATION", "AUTHTOKEN", "APIKEY", "ACCESSKEY", "PRIVATEKEY", "SECRETKEY", "KEYFILE", "KEYID"})
_SUFFIXES = ("TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS")
_PART_SPLIT = re.compile(r"[_.-]")
# "/" splits tokens: base64's "/" is rare next to the paths ("projects/123/machineTypes/...") that
# would otherwise look random; a slashed secret is still caught by name.
_TOKEN = re.compile(r"(?<![A-Za-z0-9+_-])[A-Za-z0-9+_-]{32,}={0,2}(?![A-Za-z0-9+_=-])")
_MIN_ENTROPY = 4.2


def is_secret_name(name: str) -> bool:
    """True for a variable or metadata key that may hold a credential."""
    return bool(SECRET_RE.search(name))


def _secret_part(name: str) -> bool:
    for part in _PART_SPLIT.split(name.upper()):
        if part in _COMPOUNDS or part.startswith("PASSW") or part.endswith(_SUFFIXES):
            return True
        if any(part in (word, word + "S") for word in SECRET_WORDS):
            return True
    return False


def _open_quote(rest: str) -> str | None:
    """The quote character a value opens and does not close on its line, if any."""
    rest = rest.strip()
    if rest[:1] in ("'", '"') and rest.count(rest[0]) % 2 == 1:
        return rest[0]
    return None


def scrub_secret_lines(text: str) -> str:
    """``text`` without ``KEY: value`` / ``KEY=value`` lines whose key looks like a credential,
    nor the lines a quoted value of such a key continues on; PEM blocks are redacted too."""
    out: list[str] = []
    closing: str | None = None
    for line in _PEM.sub(REDACTED, text).splitlines(keepends=True):
        if closing is not None:
            if closing in line:
                closing = None
            continue
        m = _SECRET_LINE_RE.match(line)
        if m and is_secret_name(m.group(1)):
            closing = _open_quote(m.group("rest"))
            continue
        out.append(line)
    return "".join(out)


def _mixed(token: str) -> bool:
    kinds = (any(c.isupper() for c in token), any(c.islower() for c in token), any(c.isdigit() for c in token),
             any(not c.isalnum() for c in token))
    return sum(kinds) >= 2


def _high_entropy(token: str) -> bool:
    if not (any(c.isupper() for c in token) and any(c.islower() for c in token) and any(c.isdigit() for c in token)):
        return False
    n = len(token)
    entropy = -sum(k / n * math.log2(k / n) for k in Counter(token).values())
    return entropy >= _MIN_ENTROPY


def redact(text: str) -> str:
    """``text`` with every secret the module doc lists replaced by ``<redacted>``."""
    text = _PEM.sub(REDACTED, text)
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m['scheme']}{m['sep']}{REDACTED}" if _mixed(m["cred"]) else m.group(), text)
    text = _PAIR.sub(lambda m: f"{m['name']}{m['sep']}{m['quote']}{REDACTED}" if _secret_part(m["name"]) else m.group(), text)
    return _TOKEN.sub(lambda m: REDACTED if _high_entropy(m.group()) else m.group(), text)
