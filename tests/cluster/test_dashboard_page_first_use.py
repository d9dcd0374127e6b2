"""What a first-time user of the dashboard sees, in real headless Chromium: a cluster that cannot be
read is said at the top of the page (and in the terminal), an NVLink domain whose tray carries no
rank label is still drawn with its domain's number of slots."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys

import pytest

from ray_accel_ext.cluster.dashboard import DashboardServer
from ray_accel_ext.errors import ClusterUnreachable
from tests.support.chromium import Browser, chromium_path
from tests.support.dashboard_checks import READY
from tests.support.synthetic_cluster import demo_snapshots, snapshot_cluster

if chromium_path() is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("chromium not installed (apt-get install -y chromium)")
    pytest.skip("chromium not installed (apt-get install -y chromium)", allow_module_level=True)

UNREACHABLE = "no Ray cluster at auto: Could not find any running Ray instance"


@pytest.fixture(scope="module")
def browser():
    with Browser(width=1400, height=1000) as b:
        yield b


def _unreachable():
    raise ClusterUnreachable(UNREACHABLE)


def test_a_cluster_that_cannot_be_read_is_said_at_the_top(browser):
    with DashboardServer(_unreachable, refresh_s=3600) as server:
        browser.navigate(server.url, ready=READY)
        shown = json.loads(browser.evaluate("""JSON.stringify({
          alert: document.getElementById('alert').hidden ? null : document.getElementById('alert').textContent,
          above: document.getElementById('alert').getBoundingClientRect().bottom <= document.querySelector('main').getBoundingClientRect().top,
          degraded: document.getElementById('degraded').textContent})"""))
    assert shown["alert"] and UNREACHABLE in shown["alert"] and "No Ray cluster could be read" in shown["alert"]
    assert shown["above"], "the message is above the domains, not in the footer only"
    assert "every node discovered" not in shown["degraded"] and "No nodes read" in shown["degraded"]
    assert browser.console == [], browser.console


def test_a_readable_cluster_has_no_alert(browser):
    doc = snapshot_cluster(["nvidia_gpu/l4-single-pcie"])
    with DashboardServer(lambda: doc, refresh_s=3600) as server:
        browser.navigate(server.url, ready=READY)
        assert browser.evaluate("document.getElementById('alert').hidden") is True


def test_an_unlabelled_tray_fills_a_slot_of_its_domain(browser):
    doc = snapshot_cluster(demo_snapshots())
    domain = next(d for d in doc["domains"] if d["kind"] == "nvlink-domain")
    tray = next(n for n in doc["nodes"] if n["node_id"] in domain["nodes"])
    assert "rayaccel.io/fabric-worker" not in tray["labels"] and domain["expected_hosts"] == 18
    key = f"{domain['level']}:{domain['id']}"
    with DashboardServer(lambda: doc, refresh_s=3600) as server:
        browser.navigate(server.url + "#open=all", ready=READY)
        shown = json.loads(browser.evaluate(f"""(() => {{
          const pic = document.querySelector('svg.domain-picture[data-domain="{key}"]');
          const tile = document.querySelector('article.tile[data-domain="{key}"]');
          return JSON.stringify({{absent: pic.querySelectorAll('rect.absent').length, hosts: pic.querySelectorAll('g.host').length,
            spine: pic.querySelector('text.spine-label').textContent, tile: tile.textContent,
            titles: [...pic.querySelectorAll('text')].map(t => t.textContent).filter(t => t.includes('{tray['hostname']}'))}});
        }})()"""))
    assert shown["hosts"] == 1 and shown["absent"] == 17
    assert "1 of 18 trays" in shown["spine"] and "1 of 18 hosts" in shown["tile"]
    assert not any(t.startswith("#18") for t in shown["titles"]) and any("no rank label" in t for t in shown["titles"])


STUB = """import sys
from ray_accel_ext.errors import ClusterUnreachable
from ray_accel_ext.tools import cli
from ray_accel_ext.tools.commands import dashboard

class NoCluster:  # what ClusterSource does when `auto` finds no cluster
    def __init__(self, address=None):
        pass
    def document(self):
        raise ClusterUnreachable({message!r})

dashboard.ClusterSource = NoCluster
sys.exit(cli.main(sys.argv[1:]))
"""


def test_the_terminal_says_the_cluster_cannot_be_read():
    proc = subprocess.Popen([sys.executable, "-c", STUB.format(message=UNREACHABLE), "dashboard", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": sys.path[0]})
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        lines: list[str] = []
        while not any("cannot read the cluster" in line for line in lines):
            events = sel.select(timeout=60)
            assert events, lines
            for key, _ in events:
                line = key.fileobj.readline()
                assert line, (lines, proc.poll())
                lines.append(line)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    url = next(line for line in lines if "http://127.0.0.1:" in line)
    error = next(line for line in lines if "cannot read the cluster" in line)
    assert "Ctrl-C to stop" in url
    assert UNREACHABLE in error and "the page says so at the top" in error
