"""What to reserve: a placement step (:class:`DomainRequest`) and the level it places by."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..labels import LEVELS

__all__ = ["LEVELS", "DomainRequest", "level_key"]


def level_key(level: str) -> str:
    """The label key of ``level`` (``fabric``/``rack``/``block``, or a label key itself)."""
    if level in LEVELS:
        return LEVELS[level]
    if "/" in level:
        return level
    raise ValueError(f"unknown placement level {level!r}: use one of {sorted(LEVELS)} or a label key")


@dataclass(frozen=True)
class DomainRequest:
    """One step of a placement: what to reserve inside one domain, and how long to try.

    * ``hosts=N``: N distinct hosts of one domain, one ``bundle`` each (``STRICT_SPREAD``);
    * ``bundles=[...]``: explicit bundles packed into one domain (``strategy``, default ``PACK``);
    * neither: the whole domain, one bundle per matching host;
    * ``subslice="2x2x1"`` (TPU): the hosts of one aligned block of that shape in one slice, as
      Ray's ``subslice_placement_group`` takes them; ``subslice_index`` picks the block
      (:mod:`.subslice`; the selector should narrow the slices to one topology).

    ``bundle`` defaults to the host's accelerators (``GPU``/``TPU``/``neuron_cores`` as the node
    reports them; ``{"CPU": 1}`` for a host without any). ``selector`` uses Ray's selector syntax
    (``"v"``, ``"!v"``, ``"in(a,b)"``, ``"!in(a,b)"``) and applies to every node of the domain.
    ``complete=True`` skips domains with fewer alive nodes than their ``rayaccel.io/fabric-hosts``
    (a TPU slice is only usable whole). ``domain_wait_s``: how long one domain's placement group
    may take to become ready before the next free domain of the step is tried (a group in a
    really free domain is ready in milliseconds; one that is not was taken by work placed
    outside this API).
    """

    level: str = "fabric"
    hosts: int | None = None
    bundles: tuple[Mapping[str, float], ...] | None = None
    bundle: Mapping[str, float] | None = None
    selector: Mapping[str, str] = field(default_factory=dict)
    strategy: str | None = None
    deadline_s: float = 30.0
    complete: bool = False
    name: str = ""
    domain_wait_s: float = 10.0
    subslice: str | None = None
    subslice_index: int | None = None

    def __post_init__(self) -> None:
        level_key(self.level)
        if self.hosts is not None and self.bundles is not None:
            raise ValueError("give hosts= or bundles=, not both")
        if self.subslice is not None:
            from .subslice import parse_shape

            parse_shape(self.subslice)
            if self.hosts is not None or self.bundles is not None:
                raise ValueError("a subslice request takes its hosts from the shape: give no hosts= or bundles=")
        if self.subslice_index is not None and (self.subslice is None or self.subslice_index < 0):
            raise ValueError("subslice_index needs subslice= and must be >= 0")
        if self.hosts is not None and self.hosts < 1:
            raise ValueError("hosts must be >= 1")
        if self.bundles is not None:
            object.__setattr__(self, "bundles", tuple(dict(b) for b in self.bundles))
            if not self.bundles:
                raise ValueError("bundles must not be empty")
        object.__setattr__(self, "selector", dict(self.selector))
        if self.deadline_s < 0 or self.domain_wait_s <= 0:
            raise ValueError("deadline_s must be >= 0 and domain_wait_s > 0")

    @property
    def key(self) -> str:
        return level_key(self.level)

    @property
    def node_strategy(self) -> str:
        if self.strategy:
            return self.strategy
        return "PACK" if self.bundles is not None else "STRICT_SPREAD"

    def label(self) -> str:
        """A short name for logs: the given name or ``level:hosts`` with the selector."""
        if self.name:
            return self.name
        size = f"{self.hosts}h" if self.hosts else (f"{len(self.bundles)}b" if self.bundles else "whole")
        if self.subslice:
            size = f"subslice-{self.subslice}"
        sel = ",".join(f"{k}={v}" for k, v in sorted(self.selector.items()))
        return f"{self.level}:{size}" + (f"[{sel}]" if sel else "")

    def to_dict(self) -> dict[str, Any]:
        extra = {"subslice": self.subslice, "subslice_index": self.subslice_index} if self.subslice else {}
        return {**extra,
            "name": self.label(),
            "level": self.level,
            "hosts": self.hosts,
            "bundles": [dict(b) for b in self.bundles] if self.bundles else None,
            "bundle": dict(self.bundle) if self.bundle else None,
            "selector": dict(self.selector),
            "strategy": self.node_strategy,
            "deadline_s": self.deadline_s,
            "complete": self.complete,
            "domain_wait_s": self.domain_wait_s,
        }
