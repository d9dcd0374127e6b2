"""The simulated-cluster kit never gives one port twice and survives a collision Ray reports.

Binding port 0 and closing the socket once handed two components of one node the same port, and
``ray start`` refused to start ("Ray component ... is trying to use a port number ... that is used
by other components"). The kit now hands each port out once per process, and a node whose start
fails on a taken port is started again on fresh ports; the real-Ray test below makes the first
start of a node collide on purpose and shows the node comes up on the second.
"""

from __future__ import annotations

import re
import socket
import urllib.request

import pytest

from ray_accel_ext.testing.ports import _band, free_port, is_port_collision

# Ray 2.60's own words for a taken port (ray/_private/parameter.py, ray/_private/services.py, and
# the OS error a component's bind reports).
RAY_SAYS = (
    "ValueError: Ray component metrics_export is trying to use a port number 24017 that is used by other "
    "components.\nPort information: ...",
    "ValueError: Failed to bind to 127.0.0.1:8265 because it's already occupied. You can use `ray start "
    "--dashboard-port ...`",
    "OSError: [Errno 98] Address already in use",
)


def test_ports_are_never_handed_out_twice_and_nobody_listens_on_them():
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    start, end = _band()
    assert all(start <= p < end for p in ports)  # below the kernel's ephemeral range
    for p in ports[:50]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))  # free: nobody listens


def test_a_port_someone_listens_on_is_skipped():
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        assert busy not in {free_port() for _ in range(200)}


@pytest.mark.parametrize("log", RAY_SAYS)
def test_rays_port_messages_are_recognised(log):
    assert is_port_collision(log)


def test_other_start_failures_are_not_port_collisions():
    assert not is_port_collision("RuntimeError: the hook failed\nray start exited with 1")


@pytest.mark.ray
def test_a_node_whose_ports_collided_is_started_again():
    ray = pytest.importorskip("ray")
    from ray_accel_ext.testing.cluster import SimulatedCluster
    from tests.support.paths import HOSTS

    class CollidingOnce(SimulatedCluster):
        """Gives the first start of every node one port for two components, as bind-and-close could."""

        def _argv(self, node, head, num_cpus, extra_args):
            argv = super()._argv(node, head, num_cpus, extra_args)
            if node.extra.get("attempt", 0) == 0:
                listen = next(a for a in argv if a.startswith("--dashboard-agent-listen-port="))
                argv = [re.sub(r"^--metrics-export-port=\d+", "--metrics-export-port=" + listen.split("=")[1], a)
                        for a in argv]
            return argv

    with CollidingOnce() as cluster:
        head = cluster.add_node(HOSTS / "nvidia_gpu" / "no-accelerators", name="head")
        first_log = (cluster.root / "n0" / "ray-start.log").read_text(errors="replace")
        assert re.search(r"is trying to use a port number \d+ that is used by other components", first_log)
        assert head.extra["attempt"] == 1 and "Ray runtime started" in head.log()
        cluster.connect()
        (node,) = [n for n in ray.nodes() if n["Alive"]]
        # the metrics agent got a port of its own and answers on it
        with urllib.request.urlopen(f"http://127.0.0.1:{node['MetricsExportPort']}/metrics", timeout=30) as resp:
            assert resp.status == 200
