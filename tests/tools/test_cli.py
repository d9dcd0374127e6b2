"""``ray-accel`` explains itself: plain help, global flags anywhere, one-line errors with exit 2/1.

Run as users run it: ``python -m ray_accel_ext.tools.cli`` in a child process (stderr, exit status and
the absence of a traceback are what is checked), with Ray hidden from that process where the case
is "Ray is not installed".
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from ray_accel_ext.tools.cli import COMMANDS, plain_text
from tests.support.paths import HOSTS

SNAPSHOT = HOSTS / "nvidia_gpu" / "l4-single-pcie"
NO_RAY = "import sys; sys.modules['ray'] = None; from ray_accel_ext.tools.cli import main; sys.exit(main(sys.argv[1:]))"


def ray_accel(*argv: str, without_ray: bool = False) -> subprocess.CompletedProcess:
    code = NO_RAY if without_ray else "import sys; from ray_accel_ext.tools.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "RAY_ADDRESS": "127.0.0.1:9", "PYTHONPATH": sys.path[0]})


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1, proc.stderr
    return errors[0]


@pytest.mark.parametrize("command", [None, *[c.replace("_", "-") for c in COMMANDS]])
def test_help_is_plain_text(command):
    proc = ray_accel(*([command] if command else []), "--help")
    assert proc.returncode == 0, proc.stderr
    for markup in ("``", ":mod:", ":func:", ":class:", ":meth:", ":data:", ":exc:"):
        assert markup not in proc.stdout, (command, markup)


def test_plain_text_unwraps_roles_and_literals():
    doc = "Uses :func:`~ray_accel_ext.worker.my_devices` and :mod:`ray_accel_ext.cluster.health`, ``--format json``::"
    assert plain_text(doc) == "Uses my_devices and ray_accel_ext.cluster.health, --format json:"


@pytest.mark.parametrize("argv", [
    ("-v", "ray-args", "--root", str(SNAPSHOT)),
    ("ray-args", "--root", str(SNAPSHOT), "-v"),
    ("ray-args", "--verbose", "--root", str(SNAPSHOT)),
])
def test_verbose_before_or_after_the_subcommand(argv):
    proc = ray_accel(*argv)
    assert proc.returncode == 0, proc.stderr
    assert "INFO ray_accel_ext" in proc.stderr  # discovery details, logged only with -v


def test_quiet_without_verbose():
    proc = ray_accel("ray-args", "--root", str(SNAPSHOT))
    assert proc.returncode == 0 and "INFO" not in proc.stderr


@pytest.mark.parametrize("command", [("cluster",), ("health", "status"), ("demo",), ("dashboard", "--port", "0")])
def test_ray_missing_is_one_line_and_status_1(command):
    proc = ray_accel(*command, without_ray=True)
    assert proc.returncode == 1, proc.stderr
    line = _one_error_line(proc)
    assert "needs Ray, which is not installed" in line and "pip install 'ray-accel-ext[ray]'" in line


@pytest.mark.parametrize("argv, message", [
    (("dashboard", "--port", "99999"), "port 99999 is outside 0-65535"),
    (("dashboard", "--port", "http"), "not a port number: 'http'"),
    (("discover", "--budget", "-1"), "must be above 0"),
    (("discover", "--root", "/nonexistent/host"), "--root /nonexistent/host: not a directory"),
    (("doctor", "--root", "/nonexistent/host"), "--root /nonexistent/host: not a directory"),
    (("no-such-command",), "invalid choice"),
    ((), "the following arguments are required: COMMAND"),
])
def test_usage_errors_are_one_line_and_status_2(argv, message):
    proc = ray_accel(*argv)
    assert proc.returncode == 2, proc.stderr
    assert message in _one_error_line(proc)


@pytest.mark.needs_ray  # the dashboard command checks for Ray before it binds the port
def test_busy_port_is_one_line_and_status_1():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = ray_accel("dashboard", "--port", str(port))
    assert proc.returncode == 1, proc.stderr
    assert f"port {port} on 127.0.0.1 is in use" in _one_error_line(proc)


def _free_port() -> int:
    """A loopback port nobody listens on: bound, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("command", [("cluster",), ("cluster", "--format", "json"), ("dashboard", "--port", "0"),
                                     ("health", "status")])
def test_a_wrong_cluster_address_ends_at_once_naming_it(command):
    address = f"127.0.0.1:{_free_port()}"
    proc = ray_accel(*command[:1], "--address", address, *command[1:])
    assert proc.returncode == 1, proc.stderr
    line = _one_error_line(proc)
    assert f"no Ray cluster at {address}" in line and "check that the head node is up" in line
    assert "Failed to get cluster ID" not in proc.stderr and "http://" not in proc.stdout


def test_a_wrong_ray_address_variable_is_named_too():
    proc = ray_accel("cluster")  # RAY_ADDRESS=127.0.0.1:9 in ray_accel's environment
    assert proc.returncode == 1, proc.stderr
    assert "no Ray cluster at 127.0.0.1:9" in _one_error_line(proc)


def test_an_address_that_is_no_ray_cluster_ends_within_the_timeout():
    with socket.socket() as other:  # a port some other service listens on: connections are accepted, never answered
        other.bind(("127.0.0.1", 0))
        other.listen()
        address = f"127.0.0.1:{other.getsockname()[1]}"
        proc = ray_accel("cluster", "--address", address, "--timeout", "5")
    assert proc.returncode == 1, proc.stderr
    line = _one_error_line(proc)
    assert f"no Ray cluster answered at {address} within 5 s" in line and "not a Ray GCS" in line
