"""The KFD topology: ``/sys/class/kfd/kfd/topology/nodes/<N>/properties`` and ``io_links``.

Every file is ``<key> <decimal>`` lines (``kfd_topology.c`` ``sysfs_show_32bit_prop``,
``reference/hardware.md`` 2.6). One node per CPU socket and per GPU (per compute partition when
the GPU is partitioned); GPUs are the nodes with ``simd_count > 0``, as JAX counts them
(``jax/_src/hardware_utils.py`` ``num_available_amd_gpus``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import HostReadError
from ...host import Host

NODES = "/sys/class/kfd/kfd/topology/nodes"
AMD_VENDOR_ID = 0x1002
IOLINK_TYPE_XGMI = 11  # CRAT_IOLINK_TYPE_XGMI, drivers/gpu/drm/amd/amdkfd/kfd_crat.h


@dataclass(frozen=True)
class GpuNode:
    """One KFD GPU node: its node id and the properties discovery uses."""

    node: int
    props: dict[str, int]

    @property
    def pci_address(self) -> str:
        loc = self.props.get("location_id", 0)  # (bus << 8) | devfn
        bus, devfn = loc >> 8, loc & 0xFF
        return f"{self.props.get('domain', 0):04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"

    @property
    def device_id(self) -> str:
        return f"0x{self.props.get('device_id', 0):04x}"

    @property
    def gfx_target(self) -> str | None:
        v = self.props.get("gfx_target_version")
        if not v:
            return None
        return f"gfx{v // 10000}{(v // 100) % 100}{v % 100:x}"


def parse_properties(text: str, path: str) -> dict[str, int]:
    """``key value`` lines -> {key: int}; raises HostReadError on a malformed line."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, _, value = line.strip().partition(" ")
        try:
            out[key] = int(value)
        except ValueError:
            raise HostReadError(path, f"malformed line {line.strip()[:60]!r}") from None
    return out


def node_ids(host: Host) -> list[int]:
    """KFD node ids in numeric order (the order ROCr enumerates agents in)."""
    return sorted(int(n) for n in host.listdir(NODES) if n.isdigit())


def read_node(host: Host, node: int) -> dict[str, int]:
    path = f"{NODES}/{node}/properties"
    return parse_properties(host.read_text(path), path)


def is_amd_gpu(props: dict[str, int]) -> bool:
    return props.get("simd_count", 0) > 0 and props.get("vendor_id") == AMD_VENDOR_ID


def xgmi_peers(host: Host, node: int) -> list[int]:
    """KFD node ids this node has an XGMI io_link to."""
    peers = []
    for link in host.listdir(f"{NODES}/{node}/io_links"):
        path = f"{NODES}/{node}/io_links/{link}/properties"
        props = parse_properties(host.read_text(path), path)
        if props.get("type") == IOLINK_TYPE_XGMI and "node_to" in props:
            peers.append(props["node_to"])
    return peers
