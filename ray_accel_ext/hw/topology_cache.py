"""A node restart on the same boot pays nothing for EC2's instance topology.

``DescribeInstanceTopology`` (:mod:`.aws_topology`) costs a boto3 import and an API call, 1.3-1.8 s
of the 3 s budget on a loaded node. An instance's place in AWS's network changes only when it is
stopped and started (it may then land on other hardware; AWS "How instance topology works"), and a
stop/start is a new boot. So the answer is kept per instance and boot: a file named by the
instance id whose content also names the kernel's boot id (``/proc/sys/kernel/random/boot_id``);
a new boot, another instance or an unreadable file is a miss and the API is asked again.

Where: ``RAY_ACCEL_CACHE_DIR``, else ``<tempdir>/ray_accel_ext-<uid>`` on the live host (a tmpfs
``/tmp`` empties at reboot too); a snapshot host caches only where ``RAY_ACCEL_CACHE_DIR`` names a
directory. The directory is this user's alone (created 0700; one owned by someone else or open to
others is not used), files are read only when regular and small, and a write is atomic (a
temporary file renamed), so a crash never leaves half an answer.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import HostReadError
from ..host import Host
from ..host.protocol import CACHE_DIR_ENV

__all__ = ["CACHE_DIR_ENV", "BOOT_ID", "load", "store"]


BOOT_ID = "/proc/sys/kernel/random/boot_id"
_MAX_BYTES = 64 * 1024
_NAME_RE = re.compile(r"[A-Za-z0-9-]{1,64}")


def _directory(host: Host, env: Mapping[str, str]) -> Path | None:
    named = env.get(CACHE_DIR_ENV)
    if named:
        return Path(named)
    if getattr(host, "live", False):
        return Path(tempfile.gettempdir()) / f"ray_accel_ext-{os.getuid()}"
    return None


def _private(path: Path, *, create: bool) -> bool:
    """Whether ``path`` is a directory of this user's that nobody else may write."""
    try:
        if create:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _boot_id(host: Host) -> str | None:
    try:
        text = host.read_optional(BOOT_ID, max_bytes=64)
    except HostReadError:
        return None
    text = (text or "").strip()
    return text if _NAME_RE.fullmatch(text) else None


def _file(host: Host, env: Mapping[str, str], kind: str, key: str, *, create: bool) -> tuple[Path, str] | None:
    directory = _directory(host, env)
    boot = _boot_id(host)
    if directory is None or boot is None or not _NAME_RE.fullmatch(key) or not _private(directory, create=create):
        return None
    return directory / f"{kind}-{key}.json", boot


def load(host: Host, env: Mapping[str, str], kind: str, key: str) -> Any | None:
    """The value kept for ``kind``/``key`` in this boot; None when there is none to trust."""
    where = _file(host, env, kind, key, create=False)
    if where is None:
        return None
    path, boot = where
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_BYTES or st.st_uid != os.getuid():
            return None
        data = json.loads(os.read(fd, _MAX_BYTES + 1))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict) or data.get("boot_id") != boot or data.get("key") != key:
        return None
    return data.get("value")


def store(host: Host, env: Mapping[str, str], kind: str, key: str, value: Any) -> bool:
    """Keep ``value`` (plain JSON) for ``kind``/``key`` in this boot; False when it cannot be kept."""
    where = _file(host, env, kind, key, create=True)
    if where is None:
        return False
    path, boot = where
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as out:
            json.dump({"boot_id": boot, "key": key, "value": value}, out)
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        return False
    return True
