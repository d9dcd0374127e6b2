"""The dashboard server's hardening, over real loopback sockets (no Ray, no browser).

Host header (DNS rebinding), tokens beyond loopback, a fixed connection pool with idle
connections closed, security headers, the page's files only, and a failing source keeping the
last document. Waits are conditions with generous deadlines, never timings.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from ray_accel_ext.cluster.dashboard import COOKIE, TOKEN_ENV, DashboardRefused, DashboardServer, asset_names
from ray_accel_ext.tools.cli import main

DOC = {"schema": 1, "nodes": [], "domains": [], "placement_groups": [], "summary": {"nodes": 0}}


def _get(server, path="/", host=None, headers=None, method="GET"):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True)
        conn.putheader("Host", f"127.0.0.1:{server.port}" if host is None else host)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


@pytest.fixture
def server():
    with DashboardServer(lambda: DOC, refresh_s=3600, max_connections=4, idle_timeout_s=1.0) as s:
        yield s


def test_serves_the_page_files_and_the_document(server):
    status, headers, body = _get(server, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html") and b'src="assets/app.js"' in body
    for name in asset_names():
        status, headers, body = _get(server, "/assets/" + name)
        assert status == 200 and body, name
    assert {"index.html", "app.js", "selector.js", "style.css"} <= set(asset_names())
    status, headers, body = _get(server, "/api/cluster")
    data = json.loads(body)
    assert status == 200 and data["dashboard"]["generation"] == 1 and data["summary"] == {"nodes": 0}
    assert _get(server, "/healthz")[2] == b"ok\n"
    assert _get(server, "/", method="HEAD")[2] == b""


def test_security_headers_allow_only_own_scripts(server):
    _status, headers, _ = _get(server, "/")
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp and headers["X-Content-Type-Options"] == "nosniff"
    assert headers["X-Frame-Options"] == "DENY" and headers["Referrer-Policy"] == "no-referrer"


@pytest.mark.parametrize("path", ["/assets/../server.py", "/assets/server.py", "/assets/", "/etc/passwd", "/api", "/assets/%2e%2e/server.py"])
def test_nothing_but_the_page_files(server, path):
    assert _get(server, path)[0] == 404


@pytest.mark.parametrize("host,status", [
    ("evil.example", 421), ("evil.example:8266", 421), ("127.0.0.1.nip.io", 421), ("", 421),
    ("localhost", 200), ("127.0.0.1:1", 200), ("[::1]:8266", 200), ("10.1.2.3", 200),
])
def test_host_header_is_checked(server, host, status):
    assert _get(server, "/api/cluster", host=host)[0] == status


def test_allowed_host_names_are_served():
    with DashboardServer(lambda: DOC, refresh_s=3600, allowed_hosts=["dash.example"]) as s:
        assert _get(s, "/", host="dash.example:443")[0] == 200
        assert _get(s, "/", host="other.example")[0] == 421


@pytest.mark.needs_ray  # without Ray the command stops at that, before the address check
def test_beyond_loopback_without_a_token_is_refused(monkeypatch, capsys):
    with pytest.raises(DashboardRefused) as err:
        DashboardServer(lambda: DOC, host="0.0.0.0")
    message = str(err.value)
    assert TOKEN_ENV in message and "--token-file" in message and "ssh -L" in message
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert main(["dashboard", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "refusing to serve the dashboard on 0.0.0.0 without a token" in capsys.readouterr().err


def test_token_beyond_loopback(tmp_path):
    token = "s3cr3t-token"
    with DashboardServer(lambda: DOC, host="0.0.0.0", token=token, refresh_s=3600) as s:
        assert _get(s, "/api/cluster")[0] == 401
        assert _get(s, "/api/cluster", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert _get(s, "/api/cluster", headers={"Authorization": f"Bearer {token}"})[0] == 200
        status, headers, _ = _get(s, f"/?token={token}")
        assert status == 303 and headers["Location"] == "/"
        cookie = headers["Set-Cookie"]
        assert cookie.startswith(f"{COOKIE}={token};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert _get(s, "/api/cluster", headers={"Cookie": f"{COOKIE}={token}"})[0] == 200
        assert _get(s, "/?token=wrong")[0] == 401
        assert _get(s, "/healthz")[0] == 200  # for load balancers: says nothing about the cluster
        assert _get(s, "/api/cluster", host="evil.example", headers={"Authorization": f"Bearer {token}"})[0] == 421


def _pool_threads(server) -> int:
    """This server's live handler threads (another test's server may still be winding its down)."""
    prefix = f"ray-accel-dashboard-conn-{server.port}_"
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


def _wait(predicate, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_connections_are_bounded_and_idle_ones_closed():
    # an idle timeout well above how long opening the connections can take on a loaded machine, so
    # that none is closed before the pool is seen full
    with DashboardServer(lambda: DOC, refresh_s=3600, max_connections=4, idle_timeout_s=10.0) as server:
        _bounded_and_closed(server)


def _bounded_and_closed(server):
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(4)]
    try:
        assert _wait(lambda: _pool_threads(server) >= 4)
        # The pool is full of connections waiting for a request head: a real client is served, and
        # the one that waited longest is closed to make room (no 503 for it, no queue).
        assert _get(server, "/healthz")[0] == 200
        idle[0].settimeout(60)
        assert idle[0].recv(1024) == b""
        assert _pool_threads(server) <= 4
        for s in idle[1:]:  # each idle connection is closed by the server after its timeout
            s.settimeout(60)
            assert s.recv(1024) == b""
        assert _get(server, "/healthz")[0] == 200
        assert _pool_threads(server) <= 4
    finally:
        for s in idle:
            s.close()


def test_slowloris_clients_do_not_starve_real_ones():
    """32 sockets sending one header byte every 0.3 s: a per-read timeout never fires; the request
    head's own deadline closes each of them, and real clients are served all along."""
    with DashboardServer(lambda: DOC, refresh_s=3600, max_connections=8, idle_timeout_s=10.0,
                         head_timeout_s=2.0) as server:
        stop = threading.Event()
        closed: list[int] = []

        def drip(i: int) -> None:
            try:
                with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
                    for byte in b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200:
                        if stop.is_set():
                            return
                        sock.sendall(bytes([byte]))
                        time.sleep(0.3)
            except OSError:
                closed.append(i)  # the server closed it (a reset or a broken pipe)

        drippers = [threading.Thread(target=drip, args=(i,), daemon=True) for i in range(32)]
        for t in drippers:
            t.start()
        try:
            statuses = [_get(server, "/healthz")[0] for _ in range(10)]
            assert statuses == [200] * 10, statuses
            assert _wait(lambda: len(closed) == 32), f"{32 - len(closed)} slow clients still connected"
        finally:
            stop.set()



def test_failing_source_keeps_the_last_document():
    calls = {"n": 0}

    def source():
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("cluster unreachable")
        return DOC

    with DashboardServer(source, refresh_s=0.05) as s:
        assert s.wait_for_generation(3)
        data = json.loads(_get(s, "/api/cluster")[2])
        assert data["summary"] == {"nodes": 0} and data["dashboard"]["error"] == "RuntimeError: cluster unreachable"


class _Counted:
    """A value JSON cannot hold natively: the server's serialiser calls ``str`` on it once per serialisation."""

    def __init__(self) -> None:
        self.calls = 0

    def __str__(self) -> str:
        self.calls += 1
        return "counted"


def test_the_document_is_serialised_only_when_a_client_asks_and_once_per_document():
    probe = _Counted()
    doc = {**DOC, "probe": probe}
    fresh = {"on": True}
    with DashboardServer(lambda: dict(doc) if fresh["on"] else doc, refresh_s=0.05) as s:
        at_start = probe.calls  # the first document, both views, before the server answers
        assert at_start == 2
        assert s.wait_for_generation(s.generation + 10)  # ten new documents, no client: none serialised
        assert probe.calls == at_start
        data = json.loads(_get(s, "/api/cluster")[2])
        assert data["probe"] == "counted" and probe.calls == at_start + 1
        fresh["on"] = False  # the same document object from now on: asked again, not serialised again
        assert s.wait_for_generation(s.generation + 2)
        _get(s, "/api/cluster")
        settled = probe.calls
        assert s.wait_for_generation(s.generation + 3)
        for _ in range(3):
            assert json.loads(_get(s, "/api/cluster")[2])["dashboard"]["generation"] >= 3
        assert probe.calls == settled


def test_the_overview_view_keeps_what_the_overview_draws():
    from tests.support.synthetic_cluster import synthetic_cluster

    doc = synthetic_cluster(39)
    with DashboardServer(lambda: doc, refresh_s=3600) as s:
        full = json.loads(_get(s, "/api/cluster")[2])
        lean = json.loads(_get(s, "/api/cluster?view=overview")[2])
    assert lean["view"] == "overview" and lean["dashboard"] == full["dashboard"] and "view" not in full
    assert lean["domains"] == full["domains"] and lean["placement_groups"] == full["placement_groups"]
    for small, node in zip(lean["nodes"], full["nodes"]):
        assert {k: small[k] for k in ("node_id", "hostname", "labels", "occupancy")} == {
            k: node[k] for k in ("node_id", "hostname", "labels", "occupancy")}
        assert "pcie" not in small and all(set(d) <= {"index", "utilization"} for rows in small["devices"].values() for d in rows)
        assert [d["sku"] for d in small["inventory"]["descriptions"]] == [d["sku"] for d in node["inventory"]["descriptions"]]
    assert len(json.dumps(lean)) * 3 < len(json.dumps(full))
