"""The layer rules of docs/architecture.md ("Layers"), checked on the source: every import of a
package module, lazy ones (inside a function) and ``TYPE_CHECKING`` ones too, goes from a wing to
itself or to a wing its row of :data:`INTENDED` names. An exception is an entry of
:data:`ALLOWED`, which says why."""

from __future__ import annotations

from tests.support.imports import import_sites, package_modules

# Which wing a module belongs to: the longest matching prefix of its dotted name.
WINGS = {
    "ray_accel_ext": "facade",
    **{f"ray_accel_ext.{m}": "foundation" for m in (
        "errors", "problems", "trust_codes", "findings", "labels", "values", "model", "bounds", "redact", "compat")},
    "ray_accel_ext.host": "host",
    "ray_accel_ext.hw": "hw",
    "ray_accel_ext.skus": "skus",
    "ray_accel_ext.backend": "contract",
    "ray_accel_ext.backends": "backends",
    # TPU's worker-side helper lives with its family (docs/tpu.md) but is delivery into workers.
    "ray_accel_ext.backends.tpu.worker": "worker",
    "ray_accel_ext.backends.nvidia_gpu.worker": "worker",
    "ray_accel_ext.telemetry": "telemetry",
    "ray_accel_ext.node": "node",
    "ray_accel_ext.ray_hook": "node",  # the published hook path, a re-export of node/hook.py
    "ray_accel_ext.worker": "worker",
    # The one ray.nodes() reader: placement reads the node table, the rest of cluster/ reads placement.
    "ray_accel_ext.cluster.nodes": "node-table",
    "ray_accel_ext.cluster": "cluster",
    "ray_accel_ext.placement": "placement",
    "ray_accel_ext.transport": "transport",
    "ray_accel_ext.train": "train",
    "ray_accel_ext.testing": "testing",
    "ray_accel_ext.conformance": "conformance",
    "ray_accel_ext.tools": "tools",
}

_VENDOR = {"foundation", "host", "hw", "contract"}  # what a vendor's backend may import (docs/vendors.md)
_NODE = _VENDOR | {"skus", "telemetry", "node"}
_CLUSTER = _NODE | {"worker", "node-table", "placement", "cluster"}
# wing -> the wings it may import besides itself. Arrows point down; nothing imports backends/
# (entry points load them, in-tree families like vendors' packages) and only tools/ and
# conformance/ import the test kit's consumers above the node path.
INTENDED: dict[str, frozenset[str]] = {
    "foundation": frozenset(),
    "host": frozenset({"foundation"}),
    "hw": frozenset({"foundation", "host"}),
    "skus": frozenset({"foundation", "host"}),  # host/regular.py: extra SKU files read as regular files only
    "contract": frozenset({"foundation", "host", "hw"}),
    "backends": frozenset(_VENDOR | {"skus"}),
    "telemetry": frozenset({"foundation"}),
    "node": frozenset(_NODE - {"node"}),
    "facade": frozenset(_NODE),
    "worker": frozenset(_NODE),
    "node-table": frozenset({"foundation"}),
    "placement": frozenset(_NODE | {"node-table"}),
    "cluster": frozenset(_NODE | {"node-table", "placement"}),
    "transport": frozenset(_CLUSTER),
    "train": frozenset(_CLUSTER | {"transport"}),
    "testing": frozenset(_NODE),
    "conformance": frozenset(_NODE | {"testing"}),
    "tools": frozenset(_CLUSTER | {"facade", "transport", "train", "conformance"}),
}

# (importing module, imported module) -> why it may cross its wing's row. An entry no import
# matches any more fails the test: delete it with the import.
ALLOWED = {
    # The demo command runs on the simulated cluster it is built on (test_architecture.py).
    ("ray_accel_ext.tools.commands.demo", "ray_accel_ext.testing.cluster"): "the demo's engine is the kit",
    # A snapshot's recorded cloud metadata is served on loopback by the kit's server, for the demo's
    # nodes and for `--root SNAPSHOT` (tools/commands/_common.py host_for).
    ("ray_accel_ext.tools.commands.demo", "ray_accel_ext.testing.fake_metadata"): "snapshot metadata served by the kit",
    # Lazy, in the claim registry when its claims or line change: the cluster's metrics process
    # sets its gauges now instead of at its next tick (cluster/exporter.py refresh_soon).
    ("ray_accel_ext.placement.claims", "ray_accel_ext.cluster.exporter"): "ask the metrics process to refresh",
}


def wing_of(module: str) -> str:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        wing = WINGS.get(".".join(parts[:n]))
        if wing is not None:
            return wing
    raise AssertionError(f"{module} is in no wing: add its prefix to WINGS in tests/meta/test_layers.py")


def _crossings() -> list[tuple[str, int, str, str]]:
    """(importer, line, imported module, the import as written) for every import across wings."""
    modules = package_modules()
    out = []
    for name, path in modules.items():
        for site in import_sites(name, path):
            for target in sorted(site.targets(modules)):
                if wing_of(target) != wing_of(name):
                    out.append((name, site.line, target, site.text()))
    return out


def test_every_wing_has_a_row():
    assert set(WINGS.values()) == set(INTENDED), "WINGS and INTENDED name different wings"
    for wing, allowed in INTENDED.items():
        assert allowed <= set(INTENDED), f"{wing} may import unknown wings {sorted(allowed - set(INTENDED))}"


def test_imports_follow_the_layers():
    broken = []
    for importer, line, target, text in _crossings():
        src, dst = wing_of(importer), wing_of(target)
        if dst in INTENDED[src] or (importer, target) in ALLOWED:
            continue
        rule = ", ".join(sorted(INTENDED[src])) or "nothing outside it"
        broken.append(f"{importer} line {line}: `{text}` imports {target} (wing {dst}); "
                      f"wing {src} may import only {rule}")
    assert not broken, ("imports against the layers of docs/architecture.md (move the code to the layer that "
                        "owns it, or add a commented ALLOWED entry):\n" + "\n".join(broken))


def test_no_stale_allowance():
    used = {(importer, target) for importer, _, target, _ in _crossings()}
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"ALLOWED entries no import needs any more (delete them): {stale}"
