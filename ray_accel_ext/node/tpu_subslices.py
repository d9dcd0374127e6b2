"""TPU subslices: the aligned blocks of whole hosts a slice divides into, and the
``ray.io/tpu-subslice-<shape>`` labels of a host. Pure.

A subslice is a sub-shape of a slice's chip grid (``2x4`` of a ``4x4``) made of whole hosts, so a
shape over one host's chip block (``tpu.rayaccel.io/chips-per-host-bounds``) is a block of hosts
of the host grid (``tpu.rayaccel.io/host-bounds``). Shapes, host grids and blocks are read x, y, z
(the order of the topology string and of a chip's coordinates) and numbered x-minor
(``x + X*y + X*Y*z``), the TPU runtime's and JAX's order.

The labels are the ones Ray's newest TPU code computes for a worker
(``python/ray/_private/accelerators/tpu.py``: ``_get_physical_worker_id_from_coords``,
``_build_subslice_labels``; docs/tpu.md names the copy read): for each shape of Ray's list
(:data:`RAY_SHAPES_2D`, :data:`RAY_SHAPES_3D`) smaller than the slice that tiles it, the index of
the block holding this host, its place taken from its chips' smallest coordinate. Ray assumes
hosts of 2x2(x1) chips; here the block is the host's real one (a TPU7x container's 1x2x1, an
8-chip v5e/v6e host's 2x4x1), which gives Ray's answer wherever Ray's assumption holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..labels import TPU_SUBSLICE_PREFIX

__all__ = ["RAY_SHAPES_2D", "RAY_SHAPES_3D", "parse_shape", "subslice_key", "subslice_workers",
           "worker_of_coords", "subslice_labels"]

# The sub-shapes Ray's subslice code knows (the keys of its worker-grid tables, ascending). A 2D
# slice whose topology is not among them (v5e 2x8, v3 16x32 and 32x32) Ray does not subslice.
RAY_SHAPES_2D = ("2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
RAY_SHAPES_3D = ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16",
                 "8x16x16", "16x16x16", "16x16x24")

Dims = tuple[int, int, int]


def parse_shape(text: str) -> Dims:
    """``"2x4"`` -> (2, 4, 1); ``"2x2x2"`` -> (2, 2, 2). Raises ValueError."""
    parts = text.strip().lower().split("x")
    if not 2 <= len(parts) <= 3 or not all(p.isascii() and p.isdecimal() and int(p) > 0 for p in parts):
        raise ValueError(f"not a TPU shape: {text!r} (expected AxB or AxBxC)")
    dims = [int(p) for p in parts] + [1] * (3 - len(parts))
    return dims[0], dims[1], dims[2]


def subslice_key(shape: str, topology: str) -> str:
    """The label key of ``shape`` on a slice of ``topology``, written as Ray writes it: ``AxB`` on a
    2D slice, ``AxBxC`` on a 3D one (``ray.io/tpu-subslice-2x2x1``)."""
    dims = parse_shape(shape)
    n = 2 if len(topology.strip().lower().split("x")) == 2 and dims[2] == 1 else 3
    return TPU_SUBSLICE_PREFIX + "x".join(map(str, dims[:n]))


def _block_grid(topology: str, chip_block: str, host_bounds: str, shape: str) -> tuple[Dims, Dims, Dims]:
    """(hosts per block, blocks per axis, host grid) of ``shape``; ValueError when it does not fit."""
    topo, block, hosts, sub = (parse_shape(t) for t in (topology, chip_block, host_bounds, shape))
    if any(t % s for s, t in zip(sub, topo)):
        raise ValueError(f"subslice {shape} does not tile topology {topology}")
    if any(s % b for s, b in zip(sub, block)):
        raise ValueError(f"subslice {shape} is not whole hosts of {chip_block} chips")
    per = (sub[0] // block[0], sub[1] // block[1], sub[2] // block[2])
    if any(h % p for h, p in zip(hosts, per)):
        raise ValueError(f"subslice {shape} does not tile the host grid {host_bounds}")
    counts = (hosts[0] // per[0], hosts[1] // per[1], hosts[2] // per[2])
    return per, counts, hosts


def _position(index: int, grid: Dims) -> Dims:
    """The x-minor index ``index`` of ``grid`` as (x, y, z)."""
    return index % grid[0], index // grid[0] % grid[1], index // (grid[0] * grid[1])


def _index(pos: Sequence[int], grid: Sequence[int]) -> int:
    return pos[0] + grid[0] * (pos[1] + grid[1] * pos[2])


def subslice_workers(topology: str, chip_block: str, host_bounds: str, shape: str) -> list[tuple[int, ...]]:
    """The worker ids of every ``shape`` block of a slice, in block index order. Raises ValueError
    for a shape that does not tile the slice in whole hosts."""
    per, counts, hosts = _block_grid(topology, chip_block, host_bounds, shape)
    out = []
    for index in range(math.prod(counts)):
        b = _position(index, counts)
        out.append(tuple(sorted(
            _index((b[0] * per[0] + x, b[1] * per[1] + y, b[2] * per[2] + z), hosts)
            for z in range(per[2]) for y in range(per[1]) for x in range(per[0]))))
    return out


def worker_of_coords(coords: Sequence[Sequence[int]], chip_block: str, host_bounds: str) -> int:
    """A host's place in the host grid (x-minor) from its chips' slice coordinates: the smallest
    coordinate on each axis over the chip block. Raises ValueError when it is off the grid."""
    if not coords:
        raise ValueError("no chip coordinates")
    block, hosts = parse_shape(chip_block), parse_shape(host_bounds)
    pos = [min((c[i] if len(c) > i else 0) for c in coords) // block[i] for i in range(3)]
    if any(p >= h for p, h in zip(pos, hosts)):
        raise ValueError(f"chip coordinates {tuple(pos)} blocks out are off the host grid {hosts}")
    return _index(pos, hosts)


def _ray_subslices(topology: str) -> tuple[str, ...]:
    """Ray's shapes of the slice's dimensionality, or none where Ray does not subslice it."""
    if len(topology.strip().lower().split("x")) == 2:
        return RAY_SHAPES_2D if topology.strip().lower() in RAY_SHAPES_2D else ()
    return RAY_SHAPES_3D


def subslice_labels(topology: str, chip_block: str, host_bounds: str, worker: int) -> dict[str, str]:
    """``ray.io/tpu-subslice-<shape>`` -> the index of the block of ``shape`` that holds host
    ``worker`` (its x-minor place in the host grid), for every shape of Ray's smaller than the slice
    that tiles it in whole hosts."""
    out: dict[str, str] = {}
    try:
        topo, hosts = parse_shape(topology), parse_shape(host_bounds)
    except ValueError:
        return out
    if not 0 <= worker < math.prod(hosts):
        return out
    pos = _position(worker, hosts)
    for shape in _ray_subslices(topology):
        if parse_shape(shape) == topo:
            continue
        try:
            per, counts, _ = _block_grid(topology, chip_block, host_bounds, shape)
        except ValueError:
            continue
        out[subslice_key(shape, topology)] = str(_index([p // q for p, q in zip(pos, per)], counts))
    return out
