"""``ray-accel record``: capture what discovery reads on a host into a snapshot directory.

Discovery runs once on a :class:`~ray_accel_ext.host.recording.RecordingHost`, which writes the
snapshot (:mod:`ray_accel_ext.host.snapshot` describes the format, secrets are left out as said
there); this module adds the golden ``expected.json``
(:func:`~ray_accel_ext.host.snapshot.expected_of`) and a README saying what machine it is.

A snapshot recorded from a snapshot-rooted host (``--root DIR``) gives the same description as
the original (``tests/tools/test_record.py``). The README and the golden pass through
:func:`ray_accel_ext.redact.redact` like every recorded value; FIFOs, sockets and device nodes are
never opened (the host refuses them, the copier lists them as not copied).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

from ..errors import HostReadError
from ..host import FsHost
from ..host import snapshot as _snapshot
from ..host.recording import RecordingHost, redact_strings
from ..redact import redact

__all__ = ["record"]


def _machine(host: FsHost) -> str:
    def read(path: str) -> str | None:
        try:
            text = host.read_optional(path)
        except HostReadError:
            return None
        return text.strip() if text else None

    vendor = read("/sys/class/dmi/id/sys_vendor")
    product = read("/sys/class/dmi/id/product_name")
    name = read("/proc/sys/kernel/hostname")
    kernel = read("/proc/sys/kernel/osrelease") or (platform.release() if host.live else None)
    parts = [p for p in (vendor, product) if p]
    return (" ".join(parts) or "unknown machine") + (f", host {name}" if name else "") + (f", kernel {kernel}" if kernel else "")


def record(host: FsHost, outdir: str | os.PathLike[str], *, command: list[str] | None = None) -> dict[str, Any]:
    """Discover ``host`` through a recording wrapper and write the snapshot to ``outdir``.

    Returns the summary of :meth:`RecordingHost.write` plus ``golden`` (the ``expected.json``
    written, i.e. what discovery found on ``host``).
    """
    from .. import __version__
    from ..node.adapter import to_ray_node
    from ..node.discovery import discover

    machine = _machine(host)
    rec = RecordingHost(host)
    inventory = discover(rec)
    summary = rec.write(outdir)
    out = Path(outdir)
    golden = redact_strings(_snapshot.expected_of(inventory, to_ray_node(inventory)))
    _snapshot.write_json(out / _snapshot.EXPECTED_FILE, golden)
    source = "this machine" if host.live else f"the host rooted at {getattr(host, 'snapshot_dir', None) or host.root}"
    cmd = " ".join(shlex.quote(a) for a in (command or ["ray-accel", "record", str(outdir)]))
    lines = [
        f"# Recorded host: {machine}",
        "",
        f"Recorded from {source} on {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} "
        f"with `{cmd}` (ray_accel_ext {__version__}, Python {sys.version.split()[0]}).",
        "",
        "Only what discovery read is here: "
        f"{summary['files']} files, {summary['links']} symlinks, {summary['dirs']} directories; "
        f"{len(summary['env'])} environment variables; "
        f"commands: {', '.join(summary['commands']) or 'none'}; libraries: {', '.join(summary['libraries']) or 'none'}.",
        "",
        f"Discovery found: {', '.join(d['backend'] + ' x' + str(len(d['devices'])) for d in golden['descriptions']) or 'no accelerators'}"
        f"{' (degraded: ' + '; '.join(inventory.reasons()) + ')' if inventory.degraded else ''}.",
    ]
    if summary["secrets_dropped"]:
        lines += ["", f"Left out as secrets: {', '.join(summary['secrets_dropped'])}."]
    if summary["unreadable"]:
        lines += ["", f"Could not be copied: {', '.join(summary['unreadable'])}."]
    (out / _snapshot.README_FILE).write_text(redact("\n".join(lines)) + "\n")
    summary["golden"] = golden
    summary["degraded"] = inventory.degraded
    return summary
