"""Hostile snapshots and settings: data someone else recorded, or an unlucky operator set.

Each function changes a copy of a host snapshot (:func:`~.hostile.copy_snapshot`) or writes a
directory, in one way:

* :func:`plant_tool`: the recording of a tool removed and a program put at its fixed path inside
  the root (it would touch ``marker`` if it ever ran: a snapshot is data, never a program);
* :func:`cpulist_bomb`: a NIC's ``local_cpulist`` of 1 MiB (``0-65535,`` repeated);
* :func:`numa_overflow`: a GPU's ``numa_node`` of ``99999999999999999999``;
* :func:`dangling_pci`: ``count`` dangling entries in ``/sys/bus/pci/devices``;
* :func:`bad_env_json`: ``env.json`` nested 200,000 levels deep, or a JSON list;
* :func:`hostile_sku_dir`: a ``RAY_ACCEL_SKU_DIR`` holding a FIFO ``a.json`` or 200,000-deep JSON;
* :data:`TPU_ENV_SECRETS`: ten credential shapes no word list catches, as ``tpu-env`` lines;
* :data:`BAD_ENDPOINTS`: malformed ``GCE_METADATA_HOST`` / ``AWS_EC2_METADATA_SERVICE_ENDPOINT``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = [
    "plant_tool",
    "cpulist_bomb",
    "numa_overflow",
    "dangling_pci",
    "bad_env_json",
    "hostile_sku_dir",
    "TPU_ENV_SECRETS",
    "BAD_ENDPOINTS",
]

DEEP = 200_000


def plant_tool(snapshot: str | os.PathLike[str], tool: str, marker: str | os.PathLike[str]) -> Path:
    """Remove ``commands/<name>.json`` and put an executable at ``rootfs<tool>`` that touches ``marker``."""
    snap = Path(snapshot)
    (snap / "commands" / (os.path.basename(tool) + ".json")).unlink(missing_ok=True)
    program = snap / "rootfs" / tool.lstrip("/")
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(f"#!/bin/sh\ntouch '{marker}'\necho '[]'\n")
    program.chmod(0o755)
    return program


def _first(snap: Path, vendor: str, pci_class: str) -> Path:
    base = snap / "rootfs/sys/bus/pci/devices"
    for entry in sorted(base.iterdir()):
        try:
            if (entry / "vendor").read_text().strip() == vendor and (entry / "class").read_text().startswith(pci_class):
                return Path(os.path.realpath(entry))
        except OSError:
            continue
    raise FileNotFoundError(f"no PCI function {vendor} class {pci_class} in {snap}")


def cpulist_bomb(snapshot: str | os.PathLike[str]) -> Path:
    """A Mellanox NIC's ``local_cpulist`` made 1 MiB of ``0-65535,``; returns the file."""
    path = _first(Path(snapshot), "0x15b3", "0x02") / "local_cpulist"
    path.unlink()
    path.write_text("0-65535," * (1 << 17))
    return path


def numa_overflow(snapshot: str | os.PathLike[str]) -> Path:
    """An NVIDIA GPU's ``numa_node`` made ``99999999999999999999``; returns the file."""
    path = _first(Path(snapshot), "0x10de", "0x03") / "numa_node"
    path.unlink()
    path.write_text("99999999999999999999\n")
    return path


def dangling_pci(snapshot: str | os.PathLike[str], count: int) -> None:
    """``count`` entries in ``/sys/bus/pci/devices`` pointing at functions that are gone."""
    base = Path(snapshot) / "rootfs/sys/bus/pci/devices"
    for i in range(count):
        domain, bus, dev, fn = 0x10 + (i >> 13), (i >> 5) & 0xFF, i & 0x1F, (i >> 18) & 7
        os.symlink(f"../../../devices/pci{domain:04x}:00/gone{i}", base / f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}")


def bad_env_json(snapshot: str | os.PathLike[str], kind: str) -> None:
    """``env.json`` made ``nested`` (200,000 levels) or a JSON ``list``."""
    path = Path(snapshot) / "env.json"
    path.unlink(missing_ok=True)
    path.write_text("[" * DEEP + "]" * DEEP if kind == "nested" else json.dumps(["TPU_NAME", "x"]))


def hostile_sku_dir(directory: str | os.PathLike[str], kind: str) -> Path:
    """A SKU directory holding ``a.json`` as a ``fifo`` or as ``nested`` JSON; returns the file."""
    path = Path(directory) / "a.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("[" * DEEP + "]" * DEEP)
    return path


#: credential shapes a word list misses (name -> tpu-env line); the value of each must never be written
TPU_ENV_SECRETS = {
    "DB_PASS": "DB_PASS: 'hunter2-db'",
    "MYSQL_PWD": "MYSQL_PWD: 'mysql-pw-Zq81'",
    "SSH_PASSPHRASE": "SSH_PASSPHRASE: 'correct horse battery'",
    "proxy": "HTTPS_PROXY: 'user:Pa55w0rd@proxy:3128'",
    "slack": "ALERTS: 'https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX'",
    "aws-pair": "AWS_PAIR: 'AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'",
    "hmac": "SIGNING: '" + "a3f1" * 16 + "'",
    "s3-presigned": "UPLOAD: 'https://b.s3.amazonaws.com/o?X-Amz-Signature=" + "9f" * 32 + "'",
    "api-key": "API_KEY: 'k-123'",
    "token": "ACCESS_TOKEN: 'ya29.a0AfH6SM'",
}

#: malformed metadata endpoint settings (variable, value)
BAD_ENDPOINTS = (
    ("GCE_METADATA_HOST", "::1"),
    ("GCE_METADATA_HOST", "127.0.0.1:99999"),
    ("GCE_METADATA_HOST", "[::1"),
    ("GCE_METADATA_HOST", "x:abc"),
    ("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://[::1"),
)
