"""AWS Trainium and Inferentia (Neuron) backend.

Sources, in order of trust (facts: ``reference/hardware.md`` sections 1.5, 2.8, 5):

* the driver's sysfs: ``/sys/devices/virtual/neuron_device/neuronN`` and ``/dev/neuronN`` (which
  devices exist), ``core_count`` and ``connected_devices`` (root-only), ``info/architecture``;
  the class-level UltraServer files ``/sys/class/neuron_device/{server,node}_id_4``;
* ``/opt/aws/neuron/bin/neuron-ls -j`` when installed (no shell, bounded by a timeout): the only
  map from ``neuronN`` to its PCI function, hence NUMA node, CPUs and nearest EFA;
* PCI ids (vendor ``0x1d0f``) and the instance type (DMI ``product_name``, else EC2 IMDSv2) for the
  SKU, from the SKU database (:mod:`ray_accel_ext.skus`) and ``platform.json`` (:mod:`.skus`);
* optionally EC2 ``DescribeInstanceTopology`` (:mod:`ray_accel_ext.hw.aws_topology`) for rack/block/cluster.

Ray is handed ``neuron_cores`` = the node's *logical* NeuronCores, so Ray's own Neuron manager
keeps setting ``NEURON_RT_VISIBLE_CORES`` per task. Logical cores per device = physical cores /
logical NeuronCore config (``NEURON_LOGICAL_NC_CONFIG``, else neuron-ls, else the generation's
default: 2 on Trainium2). Core ``c`` belongs to device ``c // cores_per_device``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from ...backend import AcceleratorBackend, Capabilities, PciId, poll_faults
from ...errors import CommandError, HostReadError
from ...host import Host
from ...hw.cloud import aws_location
from ...hw.nics import list_rdma_nics, nearest_nics, nics_of, pcie_switch_of
from ...hw.pci import PCI_DEVICES, PciFunction, read_listed_function
from ...hw.pci_index import functions_of, pci_index
from ...model import Device, Location, NodeDescription, Problem, Sku
from ...problems import SKU_UNKNOWN, TOOL_FAILED, TOOL_MISSING
from .._reading import never_raises
from .._sku import UNKNOWN_SKU_MARK
from . import faults
from .read import (
    VIRTUAL_DIR,
    LsDevice,
    SysfsDevice,
    device_numbers,
    parse_core_list,
    parse_neuron_ls,
    read_sysfs_device,
    read_ultraserver,
    run_neuron_ls,
)
from .skus import Generation, NeuronTable, load_table
from .topology import fabric_of, links_down, links_of, note_unreadable, with_coords

__all__ = ["NeuronBackend", "core_ids", "NEURON_LS_TIMEOUT_S", "LNC_ENV", "VISIBLE_CORES_ENV", "CORES_PER_DEVICE_ENV"]

LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"
VISIBLE_CORES_ENV = "NEURON_RT_VISIBLE_CORES"
CORES_PER_DEVICE_ENV = "RAY_ACCEL_NEURON_CORES_PER_DEVICE"
# neuron-ls gets at most this long, and never more than half of what is left of the discovery
# budget, so that a hanging tool still leaves time to describe the node from sysfs.
NEURON_LS_TIMEOUT_S = 1.5
_PREFIX = "neuron.rayaccel.io"


# Read once at import for the declared PCI ids; describe() reads its own copy per run.
_TABLE = load_table()


class NeuronBackend(AcceleratorBackend):
    """AWS Neuron devices (Inferentia1/2, Trainium1/2/3) as Ray ``neuron_cores``."""

    name: ClassVar[str] = "neuron"
    resource_name: ClassVar[str] = "neuron_cores"
    label_prefix: ClassVar[str] = _PREFIX
    visible_devices_env_var: ClassVar[str | None] = VISIBLE_CORES_ENV
    family: ClassVar[str] = "AWS Neuron"
    pci_ids: ClassVar[tuple[PciId, ...]] = (PciId(_TABLE.vendor_id, devices=frozenset(_TABLE.neuron_device_ids())),)
    driver_paths: ClassVar[tuple[str, ...]] = ("/dev/neuron0",)
    driver_hint: ClassVar[str] = (
        "Neuron devices are on the PCI bus but /dev/neuron0 does not exist: install and load the Neuron "
        "driver (`aws-neuronx-dkms`, then `modprobe neuron`); on EKS, the Neuron device plugin"
    )
    capabilities: ClassVar[Capabilities] = Capabilities(topology_links=True, nic_affinity=True, numa_affinity=True, fabric_domains=True,
                                                        provider_location=True, device_visibility=True, uses_network=True)

    # -- detection -----------------------------------------------------------------------------

    def detect(self, host: Host) -> bool:
        """True when the driver shows ``neuronN`` devices or a Neuron PCI function is present."""
        return never_raises(lambda: device_numbers(host) or _neuron_functions(host, load_table()))

    # -- description ---------------------------------------------------------------------------

    def describe(self, host: Host) -> NodeDescription:
        """Devices, cores, NeuronLink links, EFA affinity, UltraServer domain and location."""
        problems: list[Problem | str] = []
        table = load_table()
        numbers = device_numbers(host)
        functions = _neuron_functions(host, table)
        sysfs = {n: read_sysfs_device(host, n, problems) for n in numbers}
        ls, ls_missing = _neuron_ls(host, problems)
        if not numbers:
            numbers = sorted(ls) if ls else list(range(len(functions)))
            problems.append(
                f"the neuron driver shows no devices ({VIRTUAL_DIR}, /dev/neuronN); "
                f"{len(numbers)} found by {'neuron-ls' if ls else 'PCI scan'}"
            )
        location = aws_location(host, problems)

        bdfs = _bdfs(numbers, ls, functions)
        if ls is None and len(numbers) > 1:
            problems.append(Problem(
                code=TOOL_MISSING if ls_missing else TOOL_FAILED,
                message=f"neuron-ls {'not installed' if ls_missing else 'unusable'}: the neuronN -> PCI function map "
                        "is unknown, so NUMA nodes, CPUs and EFA affinity are not reported",
            ))
        pci = _read_pci(host, bdfs, problems)
        gen = _generation(table, numbers, sysfs, functions, location.instance_type, problems)
        lnc = _logical_nc_config(host.env, gen, ls, problems)
        efa = list_rdma_nics(host, problems)

        devices: list[Device] = []
        for index, number in enumerate(numbers):
            physical = _physical_cores(gen, sysfs.get(number), (ls or {}).get(number))
            cores = physical // lnc if physical and physical % lnc == 0 else physical
            if physical and physical % lnc:
                problems.append(f"neuron{number}: {physical} physical cores are not divisible by LNC={lnc}")
            fn = pci.get(number)
            entry = (ls or {}).get(number)
            devices.append(
                Device(
                    index=index,
                    id=fn.address if fn else bdfs.get(number) or f"neuron{number}",
                    pci_address=fn.address if fn else bdfs.get(number),
                    numa_node=fn.numa_node if fn and fn.numa_node is not None else (entry.numa_node if entry else None),
                    cpus=(fn.cpus if fn and fn.cpus else (entry.cpus if entry else ())),
                    pcie_switch=pcie_switch_of(fn) if fn else None,
                    memory_bytes=(entry.memory_bytes if entry and entry.memory_bytes else (gen.memory_bytes if gen else None)),
                    cores=cores,
                    nics=nearest_nics(fn, efa) if fn else (),
                )
            )

        links = links_of(numbers, sysfs, ls, gen, table, problems)
        problems.extend(links_down(numbers, sysfs, ls, gen, table.instance(location.instance_type)))
        us = read_ultraserver(host, problems)
        fabric = fabric_of(host, table, location.instance_type, us, gen, len(devices), problems)
        devices = with_coords(devices, links, fabric)
        note_unreadable(sysfs, ls, gen, links, problems)
        quantity = _visible_quantity(host.env, sum(d.cores or 0 for d in devices), problems)

        return NodeDescription(
            backend=self.name,
            sku=_sku(table, gen, functions),
            resource_name=self.resource_name,
            resource_quantity=quantity,
            devices=tuple(devices),
            interconnect=(gen.interconnect if gen and gen.interconnect else "unknown"),
            links=links,
            nics=nics_of(efa),
            fabric=fabric,
            location=location,
            attributes=_attributes(gen, lnc, devices, location),
            problems=tuple(dict.fromkeys(problems)),
        )

    # -- device faults after start: the driver's hardware ECC counters (:mod:`.faults`) ----------

    def recorded_faults(self, host, devices):
        """Recorded counter readings diffed against the snapshot's sysfs at start."""
        samples = faults.recorded_samples(host)
        if samples is None:
            return super().recorded_faults(host, devices)
        ids = faults.device_names(host, devices)
        baseline = faults.read_counters(host, ids)
        return [e for sample in samples for e in faults.counter_events(ids, baseline, sample)]

    def watch_faults(self, host, devices, on_event, stop) -> bool:
        """The hardware ECC counters polled (every ``RAY_ACCEL_HEALTH_POLL_S``, default 5 s)."""
        live = host()
        ids = faults.device_names(live, devices)
        if not ids:
            return False
        baseline = faults.read_counters(live, ids)
        return poll_faults(lambda: faults.counter_events(ids, baseline, faults.read_counters(host(), ids)),
                           on_event, stop)

    # -- visibility: per NeuronCore, not per device ---------------------------------------------

    def visible_devices_env(self, devices: Sequence[Device]) -> Mapping[str, str]:
        """``NEURON_RT_VISIBLE_CORES`` naming every logical core of ``devices`` (comma list, the
        form Ray sets), plus ``RAY_ACCEL_NEURON_CORES_PER_DEVICE`` so the subset can be read back."""
        env = {VISIBLE_CORES_ENV: ",".join(str(c) for d in devices for c in core_ids(d))}
        per_device = {d.cores for d in devices}
        if len(per_device) == 1 and None not in per_device:
            env[CORES_PER_DEVICE_ENV] = str(per_device.pop())
        return env

    def parse_visible_devices(self, env: Mapping[str, str], devices: Sequence[Device] = ()) -> list[int] | None:
        """Device indices whose cores ``NEURON_RT_VISIBLE_CORES`` names; None means all.

        A core id maps to its device through the node's ``devices`` when given, else through
        ``RAY_ACCEL_NEURON_CORES_PER_DEVICE`` (device = core // cores per device). With neither
        (the variable as Ray sets it, read without the node's description) one core per device
        is assumed.
        """
        text = env.get(VISIBLE_CORES_ENV)
        if text is None:
            return None
        cores = parse_core_list(text) if text.strip() else []
        if devices:
            owner = {c: d.index for d in devices for c in core_ids(d)}
            return sorted({owner[c] for c in cores if c in owner})
        try:
            per_device = max(1, int(env.get(CORES_PER_DEVICE_ENV, "1")))
        except ValueError:
            per_device = 1
        return sorted({c // per_device for c in cores})


def core_ids(device: Device) -> range:
    """Global logical NeuronCore ids of ``device`` (device k with c cores: ``k*c .. k*c+c-1``)."""
    c = device.cores or 0
    return range(device.index * c, device.index * c + c)


# -- helpers ------------------------------------------------------------------------------------


def _neuron_functions(host: Host, table: NeuronTable) -> dict[str, str]:
    """PCI address -> device id of every Neuron PCI function (vendor 0x1d0f, known device id)."""
    ids = table.neuron_device_ids()
    out: dict[str, str] = {}
    for address in functions_of(host, (table.vendor_id,)):
        try:
            vendor, device, _cls = pci_index(host).ids(address)
        except HostReadError:
            continue  # some other function's broken ids must not degrade the Neuron description
        if vendor == table.vendor_id and device in ids:
            out[address] = device
    return out


def _neuron_ls(host: Host, problems: list[Problem | str]) -> tuple[dict[int, LsDevice] | None, bool]:
    """``neuron-ls -j`` by device number, and whether the tool is simply not installed.

    A missing tool is not a problem by itself (the caller reports what it costs); a tool that
    hangs, fails or prints garbage is.
    """
    timeout = min(NEURON_LS_TIMEOUT_S, host.deadline.remaining() / 2)
    try:
        text = run_neuron_ls(host, timeout)
    except CommandError as exc:
        if exc.reason == "not installed":
            return None, True
        problems.append(Problem.of(exc, f"neuron-ls: {exc.reason}"))
        return None, False
    try:
        return parse_neuron_ls(text), False
    except ValueError as exc:
        problems.append(Problem(code=TOOL_FAILED, message=f"neuron-ls -j printed unparsable output: {exc}"[:300]))
        return None, False


def _bdfs(numbers: list[int], ls: dict[int, LsDevice] | None, functions: dict[str, str]) -> dict[int, str]:
    if ls is not None:
        return {n: ls[n].bdf for n in numbers if n in ls and ls[n].bdf}
    # Without neuron-ls only a single device can be paired with its PCI function for sure.
    if len(numbers) == 1 and len(functions) == 1:
        return {numbers[0]: next(iter(functions))}
    return {}


def _read_pci(host: Host, bdfs: dict[int, str], problems: list[Problem | str]) -> dict[int, PciFunction]:
    out: dict[int, PciFunction] = {}
    for number, address in bdfs.items():
        fn = read_listed_function(host, address, problems,
                                  f"neuron{number}: PCI function {address} (from neuron-ls) is not in {PCI_DEVICES}")
        if fn is not None:
            out[number] = fn
    return out


def _generation(
    table: NeuronTable,
    numbers: list[int],
    sysfs: dict[int, SysfsDevice],
    functions: dict[str, str],
    instance_type: str | None,
    problems: list[Problem | str],
) -> Generation | None:
    by_pci = {g.name for g in (table.by_pci_id(d) for d in functions.values()) if g}
    by_sysfs = {g.name for g in (table.by_sysfs_name(s.device_name) for s in sysfs.values()) if g}
    inst = table.instance(instance_type)
    found = by_pci or by_sysfs
    if len(found) > 1:
        problems.append(f"mixed Neuron generations on one node: {sorted(found)}; describing {sorted(found)[0]}")
    name = sorted(found)[0] if found else (inst.generation if inst else None)
    if inst and name and inst.generation != name:
        problems.append(f"instance type {instance_type} carries {inst.generation}, but the devices are {name}")
    if inst and len(numbers) != inst.devices and numbers:
        problems.append(f"instance type {instance_type} has {inst.devices} Neuron devices, found {len(numbers)}")
    if name is None:
        problems.append(Problem(code=SKU_UNKNOWN, message=f"Neuron devices {UNKNOWN_SKU_MARK}: no known PCI device id, "
                                "driver device_name or instance type, so the generation is unknown; they are counted "
                                "from the driver"))
        return None
    return table.generations[name]


def _logical_nc_config(env: Mapping[str, str], gen: Generation | None, ls: dict[int, LsDevice] | None,
                       problems: list[Problem | str]) -> int:
    allowed = gen.logical_nc_configs if gen else (1, 2)
    text = env.get(LNC_ENV)
    if text is not None and text.strip():
        try:
            value = int(text.strip())
        except ValueError:
            value = -1
        if value in allowed:
            return value
        problems.append(f"{LNC_ENV}={text.strip()!r} is not supported here (allowed: {list(allowed)}); ignored")
    from_ls = {e.logical_nc_config for e in (ls or {}).values() if e.logical_nc_config}
    if len(from_ls) == 1 and next(iter(from_ls)) in allowed:
        return next(iter(from_ls))
    if gen is not None and gen.default_logical_nc_config is not None:
        return gen.default_logical_nc_config
    if gen is not None:
        problems.append(f"default logical NeuronCore config of {gen.name} is not confirmed; assuming 1 (set {LNC_ENV})")
    return 1


def _physical_cores(gen: Generation | None, sysdev: SysfsDevice | None, entry: LsDevice | None) -> int | None:
    if sysdev is not None and sysdev.core_count:
        return sysdev.core_count
    if entry is not None and entry.nc_count:
        # nc_count is logical under neuron-ls's own LNC (reference/hardware.md 5.1).
        return entry.nc_count * (entry.logical_nc_config or 1)
    if gen is not None:
        return gen.physical_cores_per_device
    return None


def _visible_quantity(env: Mapping[str, str], total: int, problems: list[Problem | str]) -> int:
    """The cores Ray may hand out when the node starts with ``NEURON_RT_VISIBLE_CORES`` already set."""
    text = env.get(VISIBLE_CORES_ENV)
    if text is None:
        return total
    try:
        visible = [c for c in parse_core_list(text) if c < total] if text.strip() else []
    except ValueError:
        problems.append(f"{VISIBLE_CORES_ENV}={text[:60]!r} is unparsable; offering no cores")
        return 0
    # Ray 2.60 splits the variable on "," only and refuses to start with more cores than entries.
    ray_count = len([x for x in text.split(",") if x.strip()]) if text.strip() else 0
    if ray_count < len(visible):
        problems.append(f"{VISIBLE_CORES_ENV}={text!r} uses ranges, which Ray counts as one core each; offering {ray_count}")
    return min(len(visible), ray_count)


def _sku(table: NeuronTable, gen: Generation | None, functions: dict[str, str]) -> Sku:
    pci_id = sorted(set(functions.values()))[0] if functions else None
    if gen is None:
        return Sku(vendor="aws", name=f"aws-unknown-{pci_id or 'device'}", generation="unknown",
                   ray_accelerator_type=table.ray_accelerator_type, pci_device_id=pci_id, known=False)
    return Sku(
        vendor="aws",
        name=gen.name,
        generation=gen.name,
        ray_accelerator_type=table.ray_accelerator_type,
        product=gen.product,
        memory_bytes=gen.memory_bytes,
        pci_device_id=pci_id,
    )


def _attributes(gen: Generation | None, lnc: int, devices: list[Device], location: Location) -> dict[str, str]:
    out: dict[str, str] = {f"{_PREFIX}/logical-nc-config": str(lnc)}
    cores = {d.cores for d in devices if d.cores}
    if len(cores) == 1:
        out[f"{_PREFIX}/cores-per-device"] = str(next(iter(cores)))
        out[f"{_PREFIX}/physical-cores-per-device"] = str(next(iter(cores)) * lnc)
    if gen is not None:
        out[f"{_PREFIX}/neuroncore"] = gen.neuroncore
        if gen.topology and len(devices) > 1:
            out[f"{_PREFIX}/topology"] = gen.topology
    if location.instance_type:
        out[f"{_PREFIX}/instance-type"] = location.instance_type
    return out
