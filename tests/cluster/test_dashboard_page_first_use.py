"""What a first-time user of the dashboard sees, in real headless Chromium at 1,400 px: a cluster
that cannot be read is said at the top of the page (and in the terminal); an NVLink domain whose
tray carries no rank label is still drawn with its domain's number of slots; the legend names every
mark; host tables stay inside their column; a device that left the bus is neither free nor
measured; a slice's worker labels sit clear of its hosts; a domain id takes one line on its tile."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys

import pytest

from ray_accel_ext.cluster.dashboard import DashboardServer
from ray_accel_ext.errors import ClusterUnreachable
from tests.support.chromium import Browser, require_chromium
from tests.support.dashboard_checks import READY
from tests.support.synthetic_cluster import demo_snapshots, snapshot_cluster, synthetic_cluster

require_chromium()

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


@pytest.fixture(scope="module")
def synthetic():
    doc = synthetic_cluster(240)
    with DashboardServer(lambda: doc, refresh_s=3600) as server:
        yield server, doc


def test_the_legend_names_every_mark(browser, synthetic):
    server, _ = synthetic
    browser.navigate(server.url, ready=READY)
    legend = browser.evaluate("document.querySelector('.legend').textContent")
    for words in ("free", "held by", "host partly held", "utilisation (bar height)", "missing", "degraded host",
                  "not in the cluster", "placement group"):
        assert words in legend, words
    drawn = browser.evaluate("[...document.querySelectorAll('svg.mini rect.host')].map(r => r.getAttribute('class'))")
    assert any("occ-partly-held" in c for c in drawn)


def test_host_tables_stay_in_their_column_at_1400_px(browser, synthetic):
    server, doc = synthetic
    held = next(n for n in doc["nodes"] if n["holders"])
    browser.navigate(server.url + f"#host={held['node_id']}", ready=READY)
    shown = json.loads(browser.evaluate("""(() => { const col = document.querySelector('.details-col');
      const right = col.getBoundingClientRect().right;
      return JSON.stringify({over: col.scrollWidth - col.clientWidth, width: innerWidth,
        tables: [...col.querySelectorAll('table')].map(t => t.getBoundingClientRect().right - right),
        holders: [...col.querySelectorAll('table.devices td a')].map(a => a.textContent)}); })()"""))
    assert shown["width"] == 1400 and shown["over"] <= 0
    assert all(r <= 0 for r in shown["tables"]), shown["tables"]  # wider ones scroll inside themselves
    names = {h["name"] for h in doc["holders"]} | {h["id"] for h in doc["holders"]}
    assert shown["holders"] and all(any(t.endswith(n) for n in names if n) for t in shown["holders"])


def test_a_missing_device_is_neither_free_nor_measured(browser, synthetic):
    server, doc = synthetic
    dgx = next(n for n in doc["nodes"] if n["hostname"].startswith("dgx-h100") and n["degraded"])
    gone = [r["index"] for r in dgx["devices"]["nvidia_gpu"] if r["state"] == "missing"]
    assert gone
    browser.navigate(server.url + f"#host={dgx['node_id']}&device=nvidia_gpu:{gone[0]}", ready=READY)
    shown = json.loads(browser.evaluate("""JSON.stringify({
      occupancy: [...document.querySelectorAll('.details-col table.occupancy tbody td')].map(c => c.textContent),
      card: document.querySelector('.device-card').textContent,
      cardSparks: document.querySelectorAll('.device-card svg').length,
      row: [...document.querySelectorAll('.details-col table.devices tbody tr')][%d].textContent,
      rowSparks: [...document.querySelectorAll('.details-col table.devices tbody tr')][%d].querySelectorAll('svg').length,
      bars: document.querySelectorAll('.details-col rect.chip.state-missing + rect.util').length})""" % (gone[0], gone[0])))
    total, _reserved, _used, missing, free = (float(x) for x in shown["occupancy"])
    occ = dgx["occupancy"]["GPU"]
    assert missing == len(gone) and free == occ["free"] - len(gone) and total == occ["total"]
    assert "left the bus" in shown["card"] and "utilisation" not in shown["card"] and shown["cardSparks"] == 0
    assert "missing" in shown["row"] and shown["rowSparks"] == 0 and shown["bars"] == 0


def _overlaps(a, b) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


def test_slice_worker_labels_sit_clear_of_the_hosts(browser, synthetic):
    server, doc = synthetic
    slc = next(d for d in doc["domains"] if d["kind"] == "tpu-slice" and d["complete"])
    key = f"{slc['level']}:{slc['id']}"
    browser.navigate(server.url + "#open=" + key, ready=READY)
    shown = json.loads(browser.evaluate(f"""(() => {{
      const pic = document.querySelector('svg.domain-picture[data-domain="{key}"]');
      const box = e => {{ const b = e.getBBox(); return {{x: b.x, y: b.y, width: b.width, height: b.height}}; }};
      return JSON.stringify({{tags: [...pic.querySelectorAll('text.host-tag')].map(t => ({{text: t.textContent, box: box(t)}})),
        frames: [...pic.querySelectorAll('rect.host-box, rect.chip')].map(box),
        title: pic.querySelector('text.axis').textContent}}); }})()"""))
    assert sorted(t["text"] for t in shown["tags"]) == [f"worker {i}" for i in range(len(slc["nodes"]))]
    for tag in shown["tags"]:
        assert not any(_overlaps(tag["box"], f) for f in shown["frames"]), tag
    assert "chip ids per host" in shown["title"]


def test_domain_ids_take_one_line_on_their_tile(browser, synthetic):
    server, doc = synthetic
    browser.navigate(server.url, ready=READY)
    lines = json.loads(browser.evaluate(
        "JSON.stringify([...document.querySelectorAll('article.tile .tile-id code')].map(c => [c.textContent, c.getClientRects().length]))"))
    ids = {d["id"] for d in doc["domains"]}
    assert {t for t, _ in lines} == ids
    assert all(n == 1 for _, n in lines), [x for x in lines if x[1] != 1]
