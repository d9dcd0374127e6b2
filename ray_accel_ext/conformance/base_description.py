"""Suite area: description (golden files, consistency, declared capabilities delivered)."""

from __future__ import annotations

import json

import pytest

from ..backend import AcceleratorBackend
from ..errors import DescriptionError, HostReadError
from ..host.snapshot import README_FILE
from ..hw.pci import read_ids
from ..labels import (
    key_prefix,
)
from ..model import NodeDescription
from ..node.answers import LabelBudget, bounded, declaration_errors
from ..node.registry import BackendInfo, validate_backend_class
from ..problems import codes as problem_codes
from ..testing.snapshots import metadata_spec
from ._core import (
    SuiteTests,
    golden_diff,
    open_snapshot,
)
from .base_common import _describe
from .requirements import CAPABILITY_FIELDS, missing, requires, shown_by
from .settings import Snapshot, SuiteConfig

__all__ = ['BaseDescriptionTests']


def _node_start_refusals(backend: AcceleratorBackend, desc: NodeDescription) -> list[str]:
    """What the node-start process would refuse or cut of this answer (``node/answers.py``): the
    declarations checked again, Ray's resource bounds, the device/link/NIC counts, the label budget."""
    cls = type(backend)
    in_tree = cls.__module__.startswith("ray_accel_ext.backends.")
    validate_backend_class(cls)  # read as a worker reads them: validated first, then declared
    errors = [f"{e} (a node would refuse this backend's answer)"
              for e in declaration_errors(BackendInfo.of(cls), in_tree=in_tree)]
    try:
        kept = bounded(desc, LabelBudget())
    except DescriptionError as exc:
        return [*errors, f"{exc} (a node would refuse this backend's answer)"]
    if kept is not desc:
        errors.append(f"{kept.problems[-1]} (a node would cut them and start degraded)")
    return errors


class BaseDescriptionTests(SuiteTests):
    """``describe`` gives exactly the golden file, consistent and round-trippable."""

    def test_snapshots_given(self, suite: SuiteConfig) -> None:
        assert any(s.has_devices for s in suite.snapshots), (
            f"no snapshot with {suite.name} devices among {len(suite.snapshots)} snapshot(s) from "
            f"{list(suite.snapshot_sources) or 'nowhere'}; pass --accel-snapshots DIR (or set snapshots = ...) "
            f"pointing at recorded hosts with golden expected.json files"
        )

    def test_snapshots_include_an_empty_host(self, suite: SuiteConfig) -> None:
        assert any(s.expected is not None and not s.has_devices for s in suite.snapshots), (
            f"{suite.name}: no snapshot without {suite.name} devices; ship an 'empty' host snapshot "
            f"(CHECKLIST.md, 'Snapshots') so detection is shown to say False"
        )

    def test_snapshot_documented(self, snapshot: Snapshot) -> None:
        readme = snapshot.path / README_FILE
        assert readme.is_file() and readme.read_text().strip(), (
            f"snapshot {snapshot} has no README.md saying what machine it stands for and where its facts come from"
        )
        assert snapshot.expected is not None, (
            f"snapshot {snapshot} has no readable expected.json; write it with "
            f"'python -m ray_accel_ext.testing.snapshots --update {snapshot.path}' after checking the output by eye"
        )

    def test_matches_golden(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        desc = _describe(backend, device_snapshot, suite)
        diff = golden_diff(device_snapshot.description, desc.golden_dict())
        assert not diff, (
            f"{backend.name}.describe() on snapshot {device_snapshot} differs from its expected.json:\n  "
            + "\n  ".join(diff)
        )

    def test_consistent(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        desc = _describe(backend, device_snapshot, suite)
        errors = desc.consistency_errors()
        if desc.backend != backend.name:
            errors.append(f"backend: {desc.backend!r}, expected the entry-point name {backend.name!r}")
        if desc.resource_name != backend.resource_name:
            errors.append(f"resource_name: {desc.resource_name!r}, but the class declares {backend.resource_name!r}")
        if not desc.devices and not desc.partitions:
            errors.append("devices: empty although detect() is True (and no partitions)")
        for key in desc.attributes:
            if key_prefix(key) != backend.label_prefix:
                errors.append(f"attributes[{key!r}]: outside the backend's label_prefix {backend.label_prefix!r}")
        known = {c.code for c in problem_codes(vendor=False)} | {c.code for c in backend.problem_codes}
        errors += [f"problems[{i}].code: {p.code!r} is neither built in nor in the backend's problem_codes "
                   "(docs/problems.md)" for i, p in enumerate(desc.problems) if p.code not in known]
        errors += _node_start_refusals(backend, desc)
        assert not errors, f"{backend.name} on snapshot {device_snapshot}:\n  " + "\n  ".join(errors)

    def test_round_trip(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        desc = _describe(backend, device_snapshot, suite)
        data = json.loads(json.dumps(desc.to_dict()))
        again = NodeDescription.from_dict(data)
        assert again == desc, (
            f"{backend.name} on snapshot {device_snapshot}: NodeDescription.from_dict(to_dict()) differs:\n  "
            + "\n  ".join(golden_diff(desc.to_dict(), again.to_dict()))
        )

    def _promise(self, cap: str, backend: AcceleratorBackend, snap: Snapshot, suite: SuiteConfig) -> None:
        desc = _describe(backend, snap, suite)
        with open_snapshot(snap) as host:
            gaps = missing(cap, desc, host, snap.description, bool(metadata_spec(snap.path)))
        assert not gaps, (
            f"{backend.name} declares Capabilities({cap}=True) but on snapshot {snap} "
            f"{CAPABILITY_FIELDS[cap]} is not filled in:\n  " + "\n  ".join(gaps)
        )

    @requires("topology_links")
    def test_links_filled(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        self._promise("topology_links", backend, device_snapshot, suite)

    @requires("nic_affinity")
    def test_nic_affinity_filled(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        self._promise("nic_affinity", backend, device_snapshot, suite)

    @requires("numa_affinity")
    def test_numa_affinity_filled(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        self._promise("numa_affinity", backend, device_snapshot, suite)

    @requires("fabric_domains")
    def test_fabric_domain_filled(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        self._promise("fabric_domains", backend, device_snapshot, suite)

    @requires("provider_location")
    def test_provider_location_filled(self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot) -> None:
        self._promise("provider_location", backend, device_snapshot, suite)

    def test_declared_capabilities_are_shown(self, suite: SuiteConfig) -> None:
        snaps = [s for s in suite.snapshots if s.has_devices]
        descs = [(s, _describe(suite.backend_cls(), s, suite)) for s in snaps]
        unshown = [
            cap for cap in suite.backend_cls.capabilities.declared()
            if cap != "uses_network" and not any(shown_by(cap, d) for _, d in descs)
        ]
        assert not unshown, (
            f"{suite.name} declares {', '.join(f'{c}=True' for c in unshown)} but none of its snapshots "
            f"({', '.join(s.id for s in snaps) or 'none'}) shows it ({', '.join(CAPABILITY_FIELDS[c] for c in unshown)} "
            f"empty everywhere); add a snapshot of a machine that has it"
        )

    def test_devices_match_declared_pci_ids(
        self, suite: SuiteConfig, backend: AcceleratorBackend, device_snapshot: Snapshot
    ) -> None:
        if not backend.pci_ids:
            pytest.skip(f"{backend.name} declares no pci_ids: `ray-accel doctor` and the health monitors cannot "
                        "find its devices on the PCI bus (declare them; CHECKLIST.md item 11)")
        desc = _describe(backend, device_snapshot, suite)
        with open_snapshot(device_snapshot) as host:
            for dev in desc.devices:
                if not dev.pci_address:
                    continue
                try:
                    ids = read_ids(host, dev.pci_address)
                except HostReadError as exc:
                    pytest.fail(f"{backend.name}: device {dev.index} of snapshot {device_snapshot} names PCI function "
                                f"{dev.pci_address}, which cannot be read there: {exc}")
                assert any(m.matches(*ids) for m in backend.pci_ids), (
                    f"{backend.name}: device {dev.index} on snapshot {device_snapshot} is PCI function {dev.pci_address} "
                    f"(vendor {ids[0]}, device {ids[1]}, class {ids[2]}), which none of {type(backend).__name__}.pci_ids "
                    f"matches; add its id so doctor and the health monitors recognise it"
                )
