"""The one simulated cluster the Ray modules of this package share (``test_hook_integration``,
``test_ray_families``, ``test_device_isolation_ray``, ``test_device_isolation_nodes_ray``): its
hosts are listed in :mod:`tests.support.unit_nodes`. Started on first use and stopped after this
package's tests; each module connects its driver for its own tests only."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="package")
def unit_cluster(tmp_path_factory):
    from ray_accel_ext.testing.cluster import SimulatedCluster
    from tests.support.unit_nodes import node_specs

    specs = node_specs(tmp_path_factory.mktemp("unit-nodes"))
    with SimulatedCluster() as c:
        c.add_nodes(specs)
        yield c


@pytest.fixture(scope="module")
def cluster(unit_cluster):
    """The shared cluster with this module's driver connected."""
    unit_cluster.connect()
    yield unit_cluster
    unit_cluster.disconnect()
