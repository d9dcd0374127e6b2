"""A multi-node Ray cluster on one machine, each node started from its own host snapshot.

Every node is a real ``ray start --block`` process with ``RAY_START_HOOK`` set to our hook and
``RAY_ACCEL_ROOT`` pointing at its snapshot, plus the snapshot's metadata fakes: the same start
path a platform engineer uses on a real cluster (Ray's own ``ray`` command, less the import of Ray
Serve's CLI that only lists a ``serve`` subcommand: see :mod:`.node_process`). Nodes listen on 127.0.0.1
only, each gets its own temp dir and ports, and the cluster its own auth token
(``reference/ray-2.60.md`` section 11), so several clusters can run side by side and none depends
on what an earlier ``ray.init()`` left in the home folder.

Ports come from :func:`ray_accel_ext.testing.ports.free_port` (never one port twice in a
process); a node whose ``ray start`` fails because a port was taken after all (another process
bound it first), or because it timed out registering with a busy GCS, is started again on fresh
ports and a fresh temp dir, up to ``PORT_ATTEMPTS`` starts in all.

Each node also carries the label ``sim.rayaccel.io/node=<name>`` so tests can tell nodes apart;
it is the harness's, not the hook's. Nodes start without the hook's device watcher (one Ray driver
per node) unless ``env`` sets ``RAY_ACCEL_HEALTH_WATCH=1``.

    with SimulatedCluster() as cluster:
        cluster.add_node("tests/data/hosts/nvidia_gpu/h100-sxm-8gpu-dgx", name="h100")
        cluster.add_nodes([(snap, {"name": f"w{i}"}) for i, snap in enumerate(snaps)])
        cluster.connect()
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..host.protocol import GCE_METADATA_HOST_ENV, IMDS_ENDPOINT_ENV, ROOT_ENV
from ..host.snapshot import snapshot_env
from .fake_metadata import MetadataServers
from .node_process import kill_matching, ray_command, retryable_start
from .ports import free_port
from .snapshots import metadata_spec

__all__ = ["SimulatedCluster", "SimNode", "NODE_NAME_LABEL", "HOOK", "PORT_ATTEMPTS", "free_port", "with_this_package"]

HOOK = "ray_accel_ext.ray_hook.start_hook"
NODE_NAME_LABEL = "sim.rayaccel.io/node"
_READY_MARK = "Ray runtime started"
_START_TIMEOUT_S = 120.0


def with_this_package(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with this copy of ray_accel_ext first on ``PYTHONPATH``: ``ray start`` (a console
    script) imports the hook from wherever the package is installed, which need not be the copy
    under test (a source checkout next to an installed one)."""
    here = str(Path(__file__).resolve().parents[2])
    rest = env.get("PYTHONPATH", "")
    return {**env, "PYTHONPATH": here + (os.pathsep + rest if rest else "")}


PORT_ATTEMPTS = 4
#: worker nodes started at once by :meth:`SimulatedCluster.add_nodes`
PARALLEL_STARTS = 3


@dataclass
class SimNode:
    """One simulated node: its name, snapshot, environment and ``ray start`` process."""

    name: str
    snapshot: Path | None
    env: dict[str, str]
    temp_dir: Path
    log_path: Path
    process: subprocess.Popen | None = None
    servers: MetadataServers | None = None
    node_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def log(self) -> str:
        """What ``ray start`` printed (hook log lines included)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


class SimulatedCluster:
    """Head plus worker nodes started with ``ray start`` through the hook; see the module doc."""

    def __init__(
        self,
        *,
        base_env: Mapping[str, str] | None = None,
        hook: bool = True,
        object_store_mb: int = 80,
        system_config: str | None = None,
    ) -> None:
        self.base_env = dict(os.environ if base_env is None else base_env)
        for key in ("RAY_ADDRESS", ROOT_ENV, GCE_METADATA_HOST_ENV, IMDS_ENDPOINT_ENV):
            self.base_env.pop(key, None)
        self.hook = hook
        self.object_store_bytes = object_store_mb * 1024 * 1024
        self.system_config = system_config
        self.root = Path(tempfile.mkdtemp(prefix="rasim", dir="/tmp"))
        self.port = free_port()
        self.nodes: list[SimNode] = []
        self._saved_env: dict[str, str | None] = {}
        self._connected = False

    def _auth_env(self) -> dict[str, str]:
        # Ray reads the driver's auth mode once per process, so a token cluster would need the
        # mode set before `import ray`; an explicit "disabled" works for any driver and keeps the
        # outcome independent of a ~/.ray/auth_token left by an earlier ray.init().
        return {"RAY_AUTH_MODE": "disabled"}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> "SimulatedCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def node_env(self, node: SimNode) -> dict[str, str]:
        return node.env

    def _prepare(self, snapshot, name, env) -> SimNode:
        index = len(self.nodes)
        while (self.root / f"n{index}").exists():  # a node removed and started again (a retry)
            index += 1
        name = name or (Path(snapshot).name if snapshot else f"node{index}")
        temp_dir = self.root / f"n{index}"
        temp_dir.mkdir(parents=True)
        node_env = dict(self.base_env)
        node_env.update(self._auth_env())
        node_env["RAY_USAGE_STATS_ENABLED"] = "0"
        # The hook's device watcher is one more Ray driver per node; a test that wants it passes
        # env={"RAY_ACCEL_HEALTH_WATCH": "1"} (tests/cluster/test_device_health_ray.py).
        node_env["RAY_ACCEL_HEALTH_WATCH"] = "0"
        if self.hook:
            node_env["RAY_START_HOOK"] = HOOK
        servers = None
        if snapshot is not None:
            snapshot = Path(snapshot).resolve()
            node_env[ROOT_ENV] = str(snapshot)
            # What the pod/VM environment held (TPU_NAME, ...): Ray's own code in the raylet's
            # workers reads some of it (ray.util.tpu reads TPU_NAME on the slice head).
            node_env.update(snapshot_env(snapshot, {}))
            spec = metadata_spec(snapshot)
            if spec:
                servers = MetadataServers(spec).start()
                node_env.update(servers.env())
        node_env.update(env or {})
        return SimNode(name, snapshot, with_this_package(node_env), temp_dir, temp_dir / "ray-start.log", servers=servers)

    def _argv(self, node: SimNode, head: bool, num_cpus: float, extra_args: Sequence[str]) -> list[str]:
        argv = [
            *ray_command(self.root / "bin"), "start", "--block",
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={num_cpus:g}",
            f"--object-store-memory={self.object_store_bytes}",
            f"--temp-dir={node.temp_dir}",
            "--disable-usage-stats",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
            "--node-manager-port=0",
            "--object-manager-port=0",
            "--min-worker-port=0",
            "--max-worker-port=0",
            f"--labels={NODE_NAME_LABEL}={node.name}",
        ]
        if head:
            # --no-monitor: no autoscaler for a fixed set of nodes (a hidden `ray start` flag, in
            # python/ray/scripts/scripts.py from 2.55 on; about 0.5 s of CPU per cluster saved).
            argv += ["--head", f"--port={self.port}", "--include-dashboard=false", f"--ray-client-server-port={free_port()}",
                     "--no-monitor"]
            if self.system_config:
                argv.append(f"--system-config={self.system_config}")
        else:
            argv += [f"--address={self.address}", "--include-log-monitor=false"]
        return argv + list(extra_args)

    def _launch(self, node: SimNode, head: bool, num_cpus: float, extra_args: Sequence[str]) -> None:
        node.extra["start"] = (head, num_cpus, tuple(extra_args))
        argv = self._argv(node, head, num_cpus, extra_args)
        with open(node.log_path, "wb") as log:
            node.process = subprocess.Popen(
                argv, env=node.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=node.temp_dir,
            )

    def _relaunch(self, node: SimNode) -> None:
        """Start ``node`` again on fresh ports and a fresh temp dir (its last start lost a port)."""
        self.kill_node(node, stop_servers=False)
        attempt = node.extra.get("attempt", 0) + 1
        node.extra["attempt"] = attempt
        node.temp_dir = node.temp_dir.with_name(f"{node.temp_dir.name.split('-')[0]}-r{attempt}")
        node.temp_dir.mkdir(parents=True)
        node.log_path = node.temp_dir / "ray-start.log"
        head, num_cpus, extra_args = node.extra["start"]
        if head:
            self.port = free_port()
        self._launch(node, head, num_cpus, extra_args)

    def _poll_start(self, node: SimNode, deadline: float) -> float | None:
        """None once ``node`` is up; else the deadline to keep waiting to (a new one after a
        retryable failure, started again at once). Raises when it failed for good or ran out."""
        if _READY_MARK in node.log():
            return None
        if node.process is not None and node.process.poll() is not None:
            log = node.log()
            if retryable_start(log) and node.extra.get("attempt", 0) + 1 < PORT_ATTEMPTS:
                self._relaunch(node)
                return time.monotonic() + _START_TIMEOUT_S
            raise RuntimeError(f"ray start for node {node.name!r} exited with {node.process.returncode}:\n{log[-4000:]}")
        if time.monotonic() >= deadline:
            raise TimeoutError(f"node {node.name!r} not up within {_START_TIMEOUT_S:.0f}s:\n{node.log()[-4000:]}")
        return deadline

    def _wait_ready(self, node: SimNode, deadline: float) -> None:
        while (deadline := self._poll_start(node, deadline)) is not None:
            time.sleep(0.1)

    def add_node(
        self,
        snapshot: str | os.PathLike[str] | None = None,
        *,
        name: str | None = None,
        num_cpus: float = 1,
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> SimNode:
        """Start one node (the first one is the head) and wait until it is up."""
        return self.add_nodes([(snapshot, {"name": name, "num_cpus": num_cpus, "env": env, "extra_args": extra_args})])[0]

    def add_nodes(self, specs: Iterable[tuple[Any, Mapping[str, Any]]]) -> list[SimNode]:
        """Start several nodes (a head first if there is none yet), at most ``PARALLEL_STARTS`` at
        a time: more at once on a small machine overloads the head's GCS, whose registration
        deadline then ends node starts ("The current node timed out during startup"). Every
        starting node is watched together, so one that failed in a way worth retrying is started
        again at once, with a deadline of its own."""
        started: list[SimNode] = []
        queued: list[tuple[SimNode, Mapping[str, Any]]] = []
        for snapshot, opts in specs:
            opts = dict(opts)
            head = not self.nodes
            node = self._prepare(snapshot, opts.get("name"), opts.get("env"))
            self.nodes.append(node)
            if head:
                self._launch(node, True, opts.get("num_cpus") or 1, opts.get("extra_args") or ())
                self._wait_ready(node, time.monotonic() + _START_TIMEOUT_S)
                started.append(node)
            else:
                queued.append((node, opts))
        order = [node for node, _ in queued]
        starting: list[tuple[SimNode, float]] = []
        while queued or starting:
            while queued and len(starting) < PARALLEL_STARTS:
                node, opts = queued.pop(0)
                self._launch(node, False, opts.get("num_cpus") or 1, opts.get("extra_args") or ())
                starting.append((node, time.monotonic() + _START_TIMEOUT_S))
            starting = [(node, left) for node, deadline in starting
                        if (left := self._poll_start(node, deadline)) is not None]
            time.sleep(0.1)
        if self._connected:
            self._resolve_node_ids()
        return started + order

    def connect(self, **init_kwargs: Any):
        """``ray.init`` this process into the cluster (auth token set for the driver)."""
        import ray

        for key, value in self._auth_env().items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        ctx = ray.init(address=self.address, _node_ip_address="127.0.0.1", **init_kwargs)
        self._connected = True
        self.wait_for_nodes()
        self._resolve_node_ids()
        return ctx

    def wait_for_nodes(self, timeout_s: float = 60.0) -> None:
        import ray

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            alive = [n for n in ray.nodes() if n["Alive"]]
            if len(alive) >= len(self.nodes):
                return
            time.sleep(0.2)
        raise TimeoutError(f"only {len(alive)} of {len(self.nodes)} nodes registered")

    def _resolve_node_ids(self) -> None:
        import ray

        by_name = {n["Labels"].get(NODE_NAME_LABEL): n["NodeID"] for n in ray.nodes() if n["Alive"]}
        for node in self.nodes:
            node.node_id = by_name.get(node.name, node.node_id)

    def node(self, name: str) -> SimNode:
        return next(n for n in self.nodes if n.name == name)

    def ray_node(self, name: str) -> dict[str, Any]:
        """``ray.nodes()`` entry of a simulated node."""
        import ray

        node_id = self.node(name).node_id
        return next(n for n in ray.nodes() if n["NodeID"] == node_id)

    def kill_node(self, node: SimNode, *, stop_servers: bool = True) -> None:
        """Stop one node hard (its process group and every process under its temp dir)."""
        if node.process is not None and node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(node.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=10)
        kill_matching(str(node.temp_dir))
        if stop_servers and node.servers is not None:
            node.servers.stop()
            node.servers = None

    def remove_node(self, node: SimNode, *, timeout_s: float = 60.0) -> None:
        """Stop one node as a machine is shut down and forget it: SIGTERM, so its raylet leaves
        the cluster and the GCS marks it dead at once (``EXPECTED_TERMINATION``, Ray's
        ``python/ray/tests/test_node_death.py``); then wait, while connected, until the node table
        says so. A node stopped with :meth:`kill_node` stays alive to the GCS until its health
        checks fail (``health_check_failure_threshold`` 5, every 3 s), and work placed on it
        meanwhile dies with it; use this where later tests share the cluster."""
        if node.process is not None and node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(node.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=timeout_s / 2)
        self.kill_node(node)  # whatever did not stop on SIGTERM
        self.nodes.remove(node)
        if not (self._connected and node.node_id):
            return
        import ray

        deadline = time.monotonic() + timeout_s
        while any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"node {node.name!r} still alive to the GCS {timeout_s:.0f}s after it was stopped")
            time.sleep(0.2)

    def disconnect(self) -> None:
        """``ray.shutdown`` this process's driver and restore its environment; the nodes keep
        running, and :meth:`connect` joins them again (one cluster shared by several test modules)."""
        if self._connected:
            import ray

            with contextlib.suppress(Exception):
                ray.shutdown()
            self._connected = False
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()

    def shutdown(self) -> None:
        """Disconnect the driver and stop every node; removes the temp dirs."""
        self.disconnect()
        for node in reversed(self.nodes):
            self.kill_node(node)
        kill_matching(str(self.root))
        shutil.rmtree(self.root, ignore_errors=True)
