"""The host-snapshot format, read and written in one place.

A snapshot is a directory::

    rootfs/                files read by discovery (relative symlinks, device nodes as empty files)
    env.json               the environment the node saw
    metadata.json          GCE / EC2 answers and faults, served by the loopback fakes in tests
    libraries/<name>.json  library readings (NVML)
    commands/<tool>.json   tool output, or {"missing": true}
    expected.json          golden of discovery + Ray spec
    README.md              what machine it stands for and where its facts come from

``ray-accel record`` writes it (:mod:`ray_accel_ext.host.recording`); :func:`open_host` reads it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..bounds import bounded_json
from ..errors import CommandError, HostReadError
from ..problems import RECORDING_INVALID, SNAPSHOT_ENV_INVALID
from .protocol import PASSTHROUGH_ENV
from .regular import read_regular

if TYPE_CHECKING:
    from ..model import NodeInventory

__all__ = [
    "ROOTFS", "ENV_FILE", "METADATA_FILE", "EXPECTED_FILE", "README_FILE", "LIBRARIES_DIR", "COMMANDS_DIR",
    "KEEP_MARKER", "is_snapshot_dir", "snapshot_dirs", "snapshot_env", "usable_env", "recorded_command", "recorded_library",
    "metadata_spec", "load_expected", "expected_of", "write_json", "keep_empty_directories",
]

ROOTFS = "rootfs"
ENV_FILE = "env.json"
METADATA_FILE = "metadata.json"
EXPECTED_FILE = "expected.json"
README_FILE = "README.md"
LIBRARIES_DIR = "libraries"
COMMANDS_DIR = "commands"
# Placed by `ray-accel record` in directories that are empty on the host: git keeps no empty
# directory, and a missing one reads differently (a NIC's net/<ifname>, say). Snapshot hosts
# do not list it.
KEEP_MARKER = ".rayaccel-keep"
# A recording (env.json, a tool's output, a library reading) is read at most this large.
MAX_RECORDING_BYTES = 16 << 20


def _recording(path: Path) -> Any:
    """A snapshot's JSON file, bounded (size, nesting) and only if it is a regular file; OSError or
    ValueError naming what is wrong otherwise."""
    return bounded_json(read_regular(str(path), MAX_RECORDING_BYTES), what=path.name,
                        max_bytes=MAX_RECORDING_BYTES)


def is_snapshot_dir(path: str | os.PathLike[str]) -> bool:
    """True for a host snapshot directory (it holds ``rootfs/``)."""
    return (Path(path) / ROOTFS).is_dir()


def snapshot_dirs(base: str | os.PathLike[str]) -> list[Path]:
    """Every snapshot directory under ``base`` (those holding ``rootfs/``), sorted."""
    return sorted(p.parent for p in Path(base).rglob(ROOTFS) if p.is_dir() and is_snapshot_dir(p.parent))


def snapshot_env(snapshot: str | os.PathLike[str], environ: Mapping[str, str], *, recorded: bool = True
                 ) -> dict[str, str]:
    """The environment a node on ``snapshot`` sees: its ``env.json`` (unless not ``recorded``)
    plus the pass-through variables of ``environ`` (how to reach metadata, how to run discovery);
    HostReadError (code ``snapshot-env-invalid``) for an unusable ``env.json``."""
    env: dict[str, str] = {}
    env_file = Path(snapshot) / ENV_FILE
    if recorded and env_file.exists():
        try:
            loaded = _recording(env_file)
        except (OSError, ValueError) as exc:
            raise HostReadError(str(env_file), f"not a usable recording: {exc}", code=SNAPSHOT_ENV_INVALID) from None
        if not isinstance(loaded, dict):
            raise HostReadError(str(env_file), f"a JSON {type(loaded).__name__}, expected an object of variables",
                                code=SNAPSHOT_ENV_INVALID)
        env.update({str(k): str(v) for k, v in loaded.items()})
    env.update({k: environ[k] for k in PASSTHROUGH_ENV if k in environ})
    return env


def usable_env(snapshot: str | os.PathLike[str], environ: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """:func:`snapshot_env`, or, for an unusable ``env.json``, the pass-through variables alone
    and why."""
    try:
        return snapshot_env(snapshot, environ), None
    except HostReadError as exc:
        return snapshot_env(snapshot, environ, recorded=False), f"{exc.reason}; discovery ran without the recorded environment"


def recorded_command(snapshot: Path, argv: list[str]) -> str | None:
    """The recorded stdout of ``argv[0]`` on ``snapshot``; None when the tool was not recorded."""
    path = snapshot / COMMANDS_DIR / (os.path.basename(argv[0]) + ".json")
    if not path.is_file():
        if os.path.lexists(path):  # a link loop, a FIFO: a recording that cannot be read is not "no recording"
            raise CommandError(argv, f"recorded output {path.name} unreadable: not a regular file",
                               code=RECORDING_INVALID)
        return None
    try:
        rec = _recording(path)
    except (OSError, ValueError) as exc:
        raise CommandError(argv, f"recorded output {path.name} unreadable: {exc}", code=RECORDING_INVALID) from None
    if not isinstance(rec, dict):
        raise CommandError(argv, f"recorded output {path.name} is not a JSON object", code=RECORDING_INVALID)
    if rec.get("missing"):
        raise CommandError(argv, "not installed")
    if rec.get("timed_out"):
        raise CommandError(argv, "timed out (as recorded)")
    if rec.get("returncode", 0) != 0:
        raise CommandError(argv, f"exit status {rec['returncode']} {str(rec.get('stderr', ''))[:200]}".strip())
    return str(rec.get("stdout", ""))


def recorded_library(snapshot: Path, name: str) -> Any:
    """The recorded reading of library ``name`` (``nvml``); None when there is none."""
    path = snapshot / LIBRARIES_DIR / f"{name}.json"
    if not path.is_file():
        if os.path.lexists(path):
            raise HostReadError(f"{LIBRARIES_DIR}/{name}.json", "unreadable recording: not a regular file",
                                code=RECORDING_INVALID)
        return None
    try:
        return _recording(path)
    except (OSError, ValueError) as exc:
        raise HostReadError(f"{LIBRARIES_DIR}/{name}.json", f"unreadable recording: {exc}",
                            code=RECORDING_INVALID) from None


def metadata_spec(snapshot: str | os.PathLike[str]) -> dict[str, Any]:
    """The snapshot's ``metadata.json`` (what the loopback fakes serve); empty when absent."""
    path = Path(snapshot) / METADATA_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def load_expected(snapshot: str | os.PathLike[str]) -> dict[str, Any]:
    """The snapshot's golden ``expected.json``."""
    return json.loads((Path(snapshot) / EXPECTED_FILE).read_text())


def expected_of(inventory: NodeInventory, spec: Any) -> dict[str, Any]:
    """The golden ``expected.json`` of a discovery result and its Ray spec (anything with
    ``to_dict()``, a :class:`~ray_accel_ext.node.adapter.RayNodeSpec`): the comparable, time-free part."""
    return {
        "descriptions": [d.golden_dict() for d in inventory.descriptions],
        "problems": [{"backend": p.backend, "stage": p.stage, "error": p.error} for p in inventory.problems],
        "ray": spec.to_dict(),
    }


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` the way every snapshot file is written (sorted keys, 2-space indent)."""
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def keep_empty_directories(rootfs: Path) -> None:
    """Put the keep marker in every empty directory, so the snapshot survives a git commit."""
    for dirpath, dirnames, filenames in os.walk(rootfs):
        if not dirnames and not filenames:
            (Path(dirpath) / KEEP_MARKER).write_text("")
