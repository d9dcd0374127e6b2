"""``hl-smi`` readings: the Habana System Management Interface's CSV query, run through the host.

``hl-smi -Q <fields> -f csv,noheader`` prints one line per device, the fields in the order asked
(https://docs.habana.ai/en/latest/Management_and_Monitoring/Embedded_System_Tools_Guide/System_Management_Interface_Tool.html);
``memory.total`` reads ``131072 MiB``. On a snapshot the output is recorded in ``commands/hl-smi.json``.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from ...host import Host

__all__ = ["HL_SMI", "FIELDS", "HlSmiDevice", "argv", "parse", "run"]

HL_SMI = "/usr/bin/hl-smi"  # habanalabs-firmware-tools
FIELDS = ("index", "module_id", "bus_id", "name", "serial", "uuid", "memory.total", "driver_version")


@dataclass(frozen=True, slots=True)
class HlSmiDevice:
    """One device as ``hl-smi`` reports it (None where it printed ``N/A`` or nothing)."""

    index: int
    module_id: int | None
    bus_id: str | None  # 0000:33:00.0
    name: str | None  # board name: HL-325L (Gaudi 3 OAM), HL-225 (Gaudi 2 OAM)
    serial: str | None
    uuid: str | None
    memory_bytes: int | None
    driver_version: str | None


def argv() -> list[str]:
    return [HL_SMI, "-Q", ",".join(FIELDS), "-f", "csv,noheader"]


def run(host: Host, timeout_s: float) -> str:
    """``hl-smi``'s stdout; raises CommandError (``not installed``, a timeout, an exit status)."""
    return host.run([HL_SMI, *argv()[1:]], timeout_s=timeout_s)


def _text(value: str) -> str | None:
    value = value.strip()
    return None if value in ("", "N/A", "[N/A]") else value


def _int(value: str) -> int | None:
    text = _text(value)
    return int(text) if text is not None else None


def _mib(value: str) -> int | None:
    text = _text(value)
    if text is None:
        return None
    number, _, unit = text.partition(" ")
    if unit.strip() not in ("MiB", "MB", ""):
        raise ValueError(f"memory.total {text!r}: unknown unit")
    return int(number) << 20


def parse(text: str) -> list[HlSmiDevice]:
    """The CSV rows of :func:`argv`'s query; raises ValueError on a row that does not fit."""
    out = []
    for n, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(FIELDS):
            raise ValueError(f"line {n}: {len(row)} fields, expected {len(FIELDS)} ({','.join(FIELDS)})")
        try:
            index, module, bus, name, serial, uuid, memory, driver = row
            out.append(HlSmiDevice(int(index), _int(module), _text(bus), _text(name), _text(serial), _text(uuid),
                                   _mib(memory), _text(driver)))
        except ValueError as exc:
            raise ValueError(f"line {n}: {exc}") from None
    return out
