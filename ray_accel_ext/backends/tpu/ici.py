"""ICI topology of a TPU slice: where each chip sits (in its host, in the slice) and which chips
are wired to which. Pure: no I/O, no Ray.

Chip order (the TPU runtime's, so ``TPU_VISIBLE_CHIPS`` index ``i`` is local device ``i``):

* within a host, chips run x fastest over the host's chip block (``chips_per_host_bounds``):
  chip ``i`` of a ``bx x by x bz`` block sits at ``(i % bx, i // bx % by, i // (bx*by))``. A
  4-chip host of a 4x4 slice lists ``(0,0) (1,0) (0,1) (1,1)`` (JAX, "Introduction to
  multi-controller JAX", https://docs.jax.dev/en/latest/multi_process.html, ``jax.devices()`` on a
  v5e 4x4); an 8-chip v5e host (block ``2,4,1``) lists ``(0,0) (1,0) (0,1) ... (1,3)``
  (``jax.devices()`` on a v5litepod-8 TPU VM, AI-Hypercomputer/jetstream-pytorch README).
* hosts (``TPU_WORKER_ID``, ``agent-worker-number``) run x fastest over the host grid
  (``host_bounds`` = topology / block): in the JAX example above process 1 holds ``x = 2..3,
  y = 0..1`` and process 2 ``x = 0..1, y = 2..3``.

Links: every chip has an ICI link to each neighbour one step away along each axis (a 2D or 3D
mesh: v4 "direct connection to the nearest neighboring chips in 3 dimensions", Cloud TPU v4 docs,
https://cloud.google.com/tpu/docs/v4; v6e "ICI ports per chip: 4", 2D torus,
https://cloud.google.com/tpu/docs/v6e). Where an axis wraps (a torus), its last chip also links to
its first. Which axes wrap is what the TPU runtime is configured with (``TPU_TOPOLOGY_WRAP`` /
tpu-env ``WRAP``) when known; else :func:`wrap_rule`. With a twisted torus (``TPU_TOPOLOGY_ALT``
``true``) the wrap links end at offset chips this module does not model: they are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...model import Link

__all__ = ["IciLayout", "Neighbour", "chip_block_for", "host_links", "parse_bounds", "parse_wrap", "wrap_rule"]

Triple = tuple[int, int, int]
# GKE tpu-device-plugin getChipsPerDim (pkg/tpu/util/util.go @4626a9f): the chip block of a host
# (or of a sub-host allocation) with this many chips.
_CHIP_BLOCKS: dict[int, Triple] = {1: (1, 1, 1), 2: (1, 2, 1), 4: (2, 2, 1), 8: (2, 4, 1)}
# A v5e/v6e axis wraps when it spans the whole 16-chip pod dimension (GKE tpu-device-plugin
# wrapLitePod, vlpMaxTopologyDim = 16; a v5e/v6e Pod is 256 chips, 16x16,
# https://cloud.google.com/tpu/docs/v6e).
_LITE_POD_DIM = 16
# v2/v3 Pods are 2D tori (https://cloud.google.com/tpu/docs/v3: "Interconnect topology 2D torus",
# 1024 chips = 32x32; v2 Pods 16x16); a slice of one is a mesh (GKE's v3 4x4 vector: WRAP false).
_FULL_2D_PODS = {"v2": (16, 16, 1), "v3": (32, 32, 1)}


def chip_block_for(chips: int) -> Triple | None:
    """The chip block of a host holding ``chips`` chips of a slice (GKE's getChipsPerDim)."""
    return _CHIP_BLOCKS.get(chips)


def wrap_rule(generation: str, topology: Triple) -> tuple[bool, bool, bool]:
    """Which axes of a ``topology`` slice of ``generation`` (``v4``, ``v5litepod``, ...) wrap.

    * v4, v5p, TPU7x: all three, once every dimension is at least 4 (a full 4x4x4 cube or larger);
      GKE tpu-device-plugin ``wrapVersion``/``cubeOrLarger``; "All 4x4x4 and larger slices (one
      cube) have full 3D torus", https://cloud.google.com/tpu/docs/v5p.
    * v5e, v6e: an axis wraps when it is 16 chips long (GKE ``wrapLitePod``).
    * v2, v3: both axes, for a whole Pod only.
    """
    if generation in ("v4", "v5p", "tpu7x"):
        cube = all(d >= 4 for d in topology)
        return (cube, cube, cube)
    if generation in ("v5litepod", "v6e"):
        x, y, z = (d == _LITE_POD_DIM for d in topology)
        return (x, y, z)
    full = _FULL_2D_PODS.get(generation) == topology
    return (full, full, False)


def parse_bounds(text: str | None) -> Triple | None:
    """``"2,2,1"`` (``TPU_CHIPS_PER_HOST_BOUNDS``, ``HOST_BOUNDS``) -> (2, 2, 1); None if absent or
    malformed."""
    if not text:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(p.isascii() and p.isdecimal() and 0 < int(p) < 10**6 for p in parts):
        return None
    return (int(parts[0]), int(parts[1]), int(parts[2]))


def parse_wrap(text: str | None) -> tuple[bool, bool, bool] | None:
    """``"true,true,false"`` (``TPU_TOPOLOGY_WRAP``, tpu-env ``WRAP``) -> (True, True, False)."""
    if not text:
        return None
    parts = [p.strip().lower() for p in text.split(",")]
    if len(parts) != 3 or any(p not in ("true", "false") for p in parts):
        return None
    return (parts[0] == "true", parts[1] == "true", parts[2] == "true")


@dataclass(frozen=True, slots=True)
class Neighbour:
    """The chip at the other end of one ICI link: its host (worker) and chip index there."""

    axis: int
    worker: int
    chip: int
    wrap: bool


@dataclass(frozen=True, slots=True)
class IciLayout:
    """A slice's chip grid laid out over its hosts.

    Attributes:
        topology: chips per axis, padded to three (``4x4`` -> (4, 4, 1)).
        dims: how many axes the topology string has (2 or 3); coordinates have that many.
        chip_block: chips per host per axis (``chips_per_host_bounds``).
        host_bounds: hosts per axis (topology / chip block).
        wrap: which axes are tori.
    """

    topology: Triple
    dims: int
    chip_block: Triple
    host_bounds: Triple
    wrap: tuple[bool, bool, bool]

    @classmethod
    def host_only(cls, chip_block: Triple, dims: int) -> IciLayout:
        """One host's block on its own (slice unknown): its chips' places and the links among them,
        which every slice made of such hosts contains."""
        return cls(topology=chip_block, dims=dims, chip_block=chip_block, host_bounds=(1, 1, 1), wrap=(False,) * 3)

    @property
    def hosts(self) -> int:
        return math.prod(self.host_bounds)

    @property
    def chips_per_host(self) -> int:
        return math.prod(self.chip_block)

    def _in_host(self, chip: int) -> Triple:
        bx, by, _ = self.chip_block
        return (chip % bx, chip // bx % by, chip // (bx * by))

    def _origin(self, worker: int) -> Triple:
        hx, hy, _ = self.host_bounds
        bx, by, bz = self.chip_block
        return ((worker % hx) * bx, (worker // hx % hy) * by, (worker // (hx * hy)) * bz)

    def _check(self, worker: int | None, chip: int) -> None:
        if worker is not None and not 0 <= worker < self.hosts:
            raise ValueError(f"worker {worker} is outside 0..{self.hosts - 1}")
        if not 0 <= chip < self.chips_per_host:
            raise ValueError(f"chip {chip} is outside 0..{self.chips_per_host - 1}")

    def host_coords(self, chip: int) -> tuple[int, ...]:
        """Coordinates of chip ``chip`` within its host's block."""
        self._check(None, chip)
        return self._in_host(chip)[: self.dims]

    def slice_coords(self, worker: int, chip: int) -> tuple[int, ...]:
        """Coordinates of chip ``chip`` of host ``worker`` in the slice."""
        self._check(worker, chip)
        o, c = self._origin(worker), self._in_host(chip)
        return (o[0] + c[0], o[1] + c[1], o[2] + c[2])[: self.dims]

    def locate(self, coords: Triple) -> tuple[int, int]:
        """(worker, chip) of the chip at slice coordinates ``coords`` (padded to three)."""
        bx, by, bz = self.chip_block
        hx, hy, _ = self.host_bounds
        x, y, z = coords
        worker = x // bx + (y // by) * hx + (z // bz) * hx * hy
        chip = x % bx + (y % by) * bx + (z % bz) * bx * by
        return worker, chip

    def neighbours(self, worker: int, chip: int, *, twisted: bool = False) -> list[Neighbour]:
        """The chips wired to chip ``chip`` of host ``worker``: one step along each axis, plus the
        wrap-around step where that axis is a torus of more than two chips (in a ring of two
        the wrap link would join the same pair again)."""
        self._check(worker, chip)
        here = list(self._origin(worker))
        for i, c in enumerate(self._in_host(chip)):
            here[i] += c
        out: list[Neighbour] = []
        for axis in range(3):
            size = self.topology[axis]
            for step in (-1, 1):
                pos = here[axis] + step
                wrapped = not 0 <= pos < size
                if wrapped and (twisted or not self.wrap[axis] or size <= 2):
                    continue
                other = list(here)
                other[axis] = pos % size
                w, c = self.locate((other[0], other[1], other[2]))
                out.append(Neighbour(axis, w, c, wrapped))
        return out


def host_links(layout: IciLayout, worker: int, chips: int, *, twisted: bool = False) -> tuple[Link, ...]:
    """The ICI links of the first ``chips`` chips of host ``worker``: links between two of them
    once each (``a`` < ``b``), then each link to a chip of another host (``peer_worker``)."""
    local: set[tuple[int, int, bool]] = set()
    remote: list[Link] = []
    for chip in range(min(chips, layout.chips_per_host)):
        for n in layout.neighbours(worker, chip, twisted=twisted):
            if n.worker == worker:
                if n.chip < chips:
                    local.add((min(chip, n.chip), max(chip, n.chip), n.wrap))
            else:
                remote.append(Link(a=chip, b=n.chip, kind="ici", peer_worker=n.worker, wrap=n.wrap))
    links = [Link(a=a, b=b, kind="ici", wrap=wrap) for a, b, wrap in sorted(local)]
    return tuple(links + sorted(remote, key=lambda l: (l.a, l.peer_worker, l.b)))
