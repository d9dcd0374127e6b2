"""Third-party backends whose *answers* are hostile, and broken distributions around them.

The backends of :mod:`.hostile` misbehave (hang, exit, crash); these behave and answer what no
node can publish (:data:`HOSTILE_ANSWERS`): 2,000 attributes (the raylet's argument list passes
128 KiB), a quantity of 1e300, ``GPU`` at 1e18, 20,000 devices, a ``resource_name`` that is valid
when validated and different afterwards (a metaclass property: a NUL, ``node:1.2.3.4``, a blank),
a label prefix under the project's own domain. :func:`install_hostile_answers` writes them as one
distribution, ``ray-accel-hostile-answers``.

Broken distributions (:func:`install_broken_distributions`): a Latin-1 byte in ``METADATA``, a
malformed line or non-UTF-8 bytes in ``entry_points.txt``, a third-party ``nvidia_gpu`` (an
in-tree backend's name), and :func:`install_sleepers`: N entry points that sleep at import.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backend import AcceleratorBackend
from ..host import Host
from ..model import Device, NodeDescription, Sku

__all__ = [
    "HostileAnswer",
    "HOSTILE_ANSWERS",
    "HostileAnswerBase",
    "install_hostile_answers",
    "BROKEN_DISTRIBUTIONS",
    "install_broken_distributions",
    "install_sleepers",
    "shifting_name_class",
]

DIST = "ray-accel-hostile-answers"
MODULE_PREFIX = "rayaccel_answer_"
PREFIX = "hostile.example.com"


@dataclass(frozen=True)
class HostileAnswer:
    """One hostile answer: the entry-point ``name`` and what it answers (``what``)."""

    key: str
    what: str

    @property
    def name(self) -> str:
        return f"answer_{self.key}"


HOSTILE_ANSWERS: tuple[HostileAnswer, ...] = (
    HostileAnswer("many_attributes", "2,000 attributes of 60-character values (about 200 KiB of labels)"),
    HostileAnswer("huge_quantity", "resource_quantity=1e300"),
    HostileAnswer("gpu_1e18", "resource_name GPU at 1e18"),
    HostileAnswer("many_devices", "20,000 devices"),
    HostileAnswer("name_nul", "resource_name valid when validated, a NUL byte afterwards (metaclass property)"),
    HostileAnswer("name_node", "resource_name valid when validated, node:1.2.3.4 afterwards (metaclass property)"),
    HostileAnswer("name_blank", "resource_name valid when validated, a blank afterwards (metaclass property)"),
    HostileAnswer("reserved_prefix", "label_prefix nvidia.rayaccel.io (the in-tree NVIDIA backend's)"),
)
_BY_NAME = {a.name: a for a in HOSTILE_ANSWERS}
_LATER = {"name_nul": "hostile\x00x", "name_node": "node:1.2.3.4", "name_blank": " "}


def shifting_name_class(valid: str, later: str, after: int = 1) -> type:
    """A metaclass whose ``resource_name`` is ``valid`` for the first ``after`` reads, ``later`` then."""
    reads = [0]

    class Shifting(type(AcceleratorBackend)):  # type: ignore[misc]
        @property
        def resource_name(cls) -> str:
            reads[0] += 1
            return valid if reads[0] <= after else later

    return Shifting


class HostileAnswerBase(AcceleratorBackend):
    """What every hostile-answer backend shares; each module sets ``name`` (and maybe more)."""

    name = "answer_base"
    resource_name = "hostile"
    label_prefix = PREFIX

    def detect(self, host: Host) -> bool:
        return True

    def describe(self, host: Host) -> NodeDescription:
        key = self.name.removeprefix("answer_")
        quantity: float = 1.0
        devices = (Device(index=0, id="hostile-0"),)
        attributes: dict[str, str] = {}
        if key == "many_attributes":
            attributes = {f"{PREFIX}/attr-{i:04d}": "v" * 60 for i in range(2000)}
        elif key == "huge_quantity":
            quantity = 1e300
        elif key == "gpu_1e18":
            quantity = 1e18
        elif key == "many_devices":
            devices = tuple(Device(index=i, id=f"hostile-{i}") for i in range(20_000))
            quantity = len(devices)
        resource: Any = type(self).resource_name
        return NodeDescription(backend=self.name, sku=Sku(vendor="hostile", name="hostile-x", generation="x"),
                               resource_name=str(resource), resource_quantity=quantity, devices=devices,
                               attributes=attributes)


def _module_source(answer: HostileAnswer) -> str:
    lines = [f'"""Hostile answer backend: {answer.what} (ray_accel_ext.testing.hostile_answers)."""',
             "from ray_accel_ext.testing.hostile_answers import HostileAnswerBase, shifting_name_class", "", ""]
    meta = ""
    if answer.key in _LATER:
        lines += [f"Shifting = shifting_name_class('hostile', {_LATER[answer.key]!r})", "", ""]
        meta = ", metaclass=Shifting"
    lines += [f"class Backend(HostileAnswerBase{meta}):", f"    name = {answer.name!r}"]
    if answer.key == "gpu_1e18":
        lines.append('    resource_name = "GPU"')
    elif answer.key == "reserved_prefix":
        lines.append('    label_prefix = "nvidia.rayaccel.io"')
    return "\n".join(lines) + "\n"


def _dist(site: Path, dist: str, entries: list[str], *, metadata: bytes | None = None, raw: bytes | None = None) -> None:
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_bytes(metadata or f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n".encode())
    body = raw if raw is not None else ("[ray_accel_ext.backends]\n" + "\n".join(entries) + "\n").encode()
    (info / "entry_points.txt").write_bytes(body)


def install_hostile_answers(site: str | os.PathLike[str], answers=HOSTILE_ANSWERS) -> Path:
    """Write ``ray-accel-hostile-answers`` (one module and entry point per answer) into ``site``."""
    site = Path(site)
    site.mkdir(parents=True, exist_ok=True)
    entries = []
    for answer in answers:
        module = MODULE_PREFIX + answer.key
        (site / f"{module}.py").write_text(_module_source(answer))
        entries.append(f"{answer.name} = {module}:Backend")
    _dist(site, DIST, entries)
    return site


#: name -> (what it is, the entry-point line, the METADATA bytes or None, raw entry_points.txt or None)
BROKEN_DISTRIBUTIONS = {
    "latin1-metadata": ("a Latin-1 byte in METADATA",
                        b"Metadata-Version: 2.1\nName: latin1-dist\nVersion: 1.0\nAuthor: Jos\xe9\n", None),
    "malformed-entry-points": ("a malformed line in entry_points.txt", None,
                               b"[ray_accel_ext.backends]\nthis line has no equals sign\n"),
    "non-utf8-entry-points": ("non-UTF-8 bytes in entry_points.txt", None,
                              b"[ray_accel_ext.backends]\nbroken = rayaccel_answer_x:Backend # \xff\xfe\n"),
    "nvidia-gpu-clash": ("a third-party entry point named nvidia_gpu (an in-tree backend's name)", None, None),
}


def install_broken_distributions(site: str | os.PathLike[str], names=tuple(BROKEN_DISTRIBUTIONS)) -> Path:
    """Write the :data:`BROKEN_DISTRIBUTIONS` named into ``site``."""
    site = Path(site)
    site.mkdir(parents=True, exist_ok=True)
    for name in names:
        _, metadata, raw = BROKEN_DISTRIBUTIONS[name]
        entries = [f"{name.replace('-', '_')} = rayaccel_answer_{name.replace('-', '_')}:Backend"]
        if name == "nvidia-gpu-clash":
            entries = ["nvidia_gpu = rayaccel_answer_clash:Backend"]
            (site / "rayaccel_answer_clash.py").write_text(textwrap.dedent('''\
                """A third-party backend under the in-tree name nvidia_gpu."""
                from ray_accel_ext.testing.hostile_answers import HostileAnswerBase


                class Backend(HostileAnswerBase):
                    name = "nvidia_gpu"
                '''))
        elif metadata is not None:
            entries = [f"latin1_dist = {MODULE_PREFIX}latin1:Backend"]
            (site / f"{MODULE_PREFIX}latin1.py").write_text(
                "from ray_accel_ext.testing.hostile_answers import HostileAnswerBase\n\n\n"
                "class Backend(HostileAnswerBase):\n    name = 'latin1_dist'\n")
        _dist(site, f"broken-{name}", entries, metadata=metadata, raw=raw)
    return site


def install_sleepers(site: str | os.PathLike[str], count: int, sleep_s: float = 10.0) -> Path:
    """``count`` entry points (one distribution) whose module sleeps ``sleep_s`` at import."""
    site = Path(site)
    site.mkdir(parents=True, exist_ok=True)
    (site / "rayaccel_sleeper.py").write_text(textwrap.dedent(f'''\
        """Sleeps at import (ray_accel_ext.testing.hostile_answers.install_sleepers)."""
        import time

        from ray_accel_ext.testing.hostile_answers import HostileAnswerBase

        time.sleep({sleep_s!r})


        class Backend(HostileAnswerBase):
            pass
        '''))
    entries = [f"sleeper_{i:04d} = rayaccel_sleeper:Backend" for i in range(count)]
    _dist(site, "ray-accel-sleepers", entries)
    return site
