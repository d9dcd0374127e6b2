"""Corrupt-host generator: damaged copies of a host snapshot, one kind of damage per copy.

Discovery must survive any machine, so each file it reads on a snapshot can be replaced by::

    missing     the file (or directory) is gone
    empty       zero bytes
    binary      NUL bytes and invalid UTF-8
    huge        more than the host's 1 MiB read cap of plausible text
    unreadable  mode 000 (root reads it anyway: run discovery as another user to see the effect,
                e.g. ``setpriv --reuid=65534 --regid=65534 --clear-groups``)
    loop        a symbolic link that points at itself through a second link

Targets are the files discovery actually read on the intact snapshot (found by running it through
``host.recording.RecordingHost``; symlinks resolved, so the damage lands on the real file behind
``/sys/bus/pci/devices/<BDF>/...``), the directories it listed, and the recorded library and tool
outputs (``libraries/*.json``, ``commands/*.json``).

    variants = make_variants("tests/data/hosts/nvidia_gpu/h100-sxm-8gpu-dgx", tmp, per_kind=3)
    python -m ray_accel_ext.testing.corrupt SNAPSHOT OUTDIR --kind binary --per-kind 2
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import HostReadError
from ..host import MAX_READ_BYTES, open_host
from ..host.recording import RecordingHost
from ..host.snapshot import COMMANDS_DIR, EXPECTED_FILE, LIBRARIES_DIR, ROOTFS
from ..node.discovery import discover
from .snapshots import serve_snapshot

__all__ = ["KINDS", "Targets", "Variant", "targets_of", "corrupt_copy", "make_variants", "remove_copy"]

KINDS = ("missing", "empty", "binary", "huge", "unreadable", "loop")
# Damage that makes sense for a directory (an empty or binary directory is not a thing).
DIR_KINDS = frozenset({"missing", "unreadable", "loop"})
BINARY_BYTES = b"\x00\x01\xff\xfe\x89PNG\r\n\x1a\n\xc3\x28garbage\x00" * 8
_HUGE_LINE = b"0,1,2,3,4,5,6,7\n"


@dataclass(frozen=True)
class Targets:
    """Snapshot-relative paths discovery reads: files (content) and directories (listed)."""

    files: tuple[str, ...]
    dirs: tuple[str, ...]

    def for_kind(self, kind: str) -> tuple[str, ...]:
        """The targets ``kind`` applies to (directories only for missing/unreadable/loop)."""
        return self.files + (self.dirs if kind in DIR_KINDS else ())


@dataclass(frozen=True)
class Variant:
    """One damaged copy: its kind, the snapshot-relative paths damaged and where it lies."""

    kind: str
    targets: tuple[str, ...]
    path: Path
    source: Path = field(compare=False)

    @property
    def name(self) -> str:
        what = self.targets[0] if len(self.targets) == 1 else f"all {len(self.targets)} targets"
        return f"{self.source.name}:{self.kind}:{what}"


def targets_of(snapshot: str | os.PathLike[str]) -> Targets:
    """What discovery reads on ``snapshot`` (run once through a recording host, metadata served)."""
    snapshot = Path(snapshot).resolve()
    with serve_snapshot(snapshot) as env:
        inner = open_host(snapshot, environ=env)
        rec = RecordingHost(inner)
        discover(rec)
    rootfs = snapshot / ROOTFS
    files: set[str] = set()
    dirs: set[str] = set()

    def canonical(host_path: str) -> Path | None:
        try:
            real = inner.realpath(host_path)
        except HostReadError:
            return None
        return rootfs / real.lstrip("/")

    for host_path, content in rec.paths.items():
        fs = canonical(host_path)
        if content and fs is not None and fs.is_file() and not fs.is_symlink():
            files.add(str(fs.relative_to(snapshot)))
    for host_path in rec.listed:
        fs = canonical(host_path)
        if fs is not None and fs.is_dir() and fs != rootfs:
            dirs.add(str(fs.relative_to(snapshot)))
    for sub in (LIBRARIES_DIR, COMMANDS_DIR):
        for p in sorted((snapshot / sub).glob("*.json")):
            files.add(str(p.relative_to(snapshot)))
    return Targets(tuple(sorted(files)), tuple(sorted(dirs)))


def _damage(path: Path, kind: str) -> None:
    """Damage one path of a copy. Files of a copy may be hard links to the source snapshot, so a
    file is always replaced (unlink, then write), never changed in place."""
    is_dir = path.is_dir() and not path.is_symlink()
    if kind == "unreadable":
        if not is_dir:
            data = path.read_bytes()
            path.unlink()
            path.write_bytes(data)
        os.chmod(path, 0)
        return
    if is_dir:
        shutil.rmtree(path)
    else:
        path.unlink()
    if kind == "missing":
        return
    if kind == "loop":
        partner = path.with_name(path.name + ".loop")
        os.symlink(partner.name, path)
        os.symlink(path.name, partner)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "binary":
        path.write_bytes(BINARY_BYTES)
    elif kind == "huge":
        path.write_bytes(_HUGE_LINE * (MAX_READ_BYTES // len(_HUGE_LINE) + 64))


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


def corrupt_copy(
    snapshot: str | os.PathLike[str], dest: str | os.PathLike[str], kind: str, targets: Iterable[str]
) -> Path:
    """Copy ``snapshot`` to ``dest`` (must not exist) and damage ``targets`` with ``kind``.

    Files are hard links to the source where the file system allows (damage replaces a file, it
    never writes through a link); directories are 0755 so that only the damage decides what
    another user can reach. ``expected.json`` is left out (the golden is the intact snapshot's).
    Remove a copy with :func:`remove_copy` (mode-000 directories stop ``shutil.rmtree``).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind of damage {kind!r} (known: {', '.join(KINDS)})")
    src, dst = Path(snapshot).resolve(), Path(dest)
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns(EXPECTED_FILE),
                    copy_function=_link_or_copy)
    for dirpath, _dirnames, _filenames in os.walk(dst):
        os.chmod(dirpath, 0o755)
    for target in targets:
        rel = Path(target)
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"target {target!r} must be a path inside the snapshot")
        path = dst / rel
        if not (path.exists() or path.is_symlink()):
            raise FileNotFoundError(f"{target} is not in {src}")
        _damage(path, kind)
    return dst


def remove_copy(path: str | os.PathLike[str]) -> None:
    """Delete a tree made here, mode-000 directories included."""
    def unlock(func, p, _exc):
        os.chmod(os.path.dirname(p), 0o755)
        if os.path.isdir(p) and not os.path.islink(p):
            os.chmod(p, 0o755)
        func(p)

    for dirpath, dirnames, _ in os.walk(path):
        for d in dirnames:
            full = os.path.join(dirpath, d)
            if not os.path.islink(full) and os.lstat(full).st_mode & 0o700 != 0o700:
                os.chmod(full, 0o755)
    shutil.rmtree(path, onerror=unlock)


def make_variants(
    snapshot: str | os.PathLike[str],
    outdir: str | os.PathLike[str],
    *,
    kinds: Sequence[str] = KINDS,
    per_kind: int | None = None,
    seed: int = 0,
    everything: bool = False,
    targets: Targets | None = None,
) -> list[Variant]:
    """Damaged copies of ``snapshot`` under ``outdir``: for each kind, one copy per target
    (``per_kind`` picks that many at random, reproducibly from ``seed``); ``everything`` adds one
    copy per kind with every target damaged at once."""
    source = Path(snapshot).resolve()
    targets = targets or targets_of(source)
    rng = random.Random(f"{source.name}:{seed}")
    out: list[Variant] = []
    base = Path(outdir)
    base.mkdir(parents=True, exist_ok=True)
    for kind in kinds:
        candidates = list(targets.for_kind(kind))
        if per_kind is not None and len(candidates) > per_kind:
            candidates = rng.sample(candidates, per_kind)
        groups: list[tuple[str, ...]] = [(t,) for t in candidates]
        if everything and targets.for_kind(kind):
            # Outermost first, and nothing under a damaged directory.
            picked: list[str] = []
            for t in sorted(targets.for_kind(kind), key=lambda t: t.count("/")):
                if not any(t.startswith(p + "/") for p in picked):
                    picked.append(t)
            groups.append(tuple(picked))
        for i, group in enumerate(groups):
            dest = base / f"{source.name}-{kind}-{i}" / source.name
            dest.parent.mkdir(parents=True)
            out.append(Variant(kind, group, corrupt_copy(source, dest, kind, group), source))
    return out


def _make_traversable(path: Path) -> None:
    for p in [path, *path.parents]:
        mode = p.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(p, mode | stat.S_IXOTH | stat.S_IROTH)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write damaged copies of a host snapshot.")
    parser.add_argument("snapshot", help="a snapshot directory (holding rootfs/)")
    parser.add_argument("outdir", help="where the copies go (created)")
    parser.add_argument("--kind", action="append", choices=KINDS, help="kind of damage (repeatable; default all)")
    parser.add_argument("--per-kind", type=int, default=None, help="copies per kind (random targets)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--everything", action="store_true", help="also one copy per kind with every target damaged")
    parser.add_argument("--list", action="store_true", help="only list what discovery reads")
    args = parser.parse_args(argv)
    if args.list:
        t = targets_of(args.snapshot)
        print("\n".join([*t.files, *(d + "/" for d in t.dirs)]))
        return 0
    out = Path(args.outdir)
    variants = make_variants(args.snapshot, out, kinds=args.kind or KINDS, per_kind=args.per_kind,
                             seed=args.seed, everything=args.everything)
    _make_traversable(out.resolve())
    for v in variants:
        print(f"{v.kind:10s} {v.path}  <- {', '.join(v.targets)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
