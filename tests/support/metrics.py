"""Read what a running Ray cluster exports to Prometheus (each node's ``/metrics`` endpoint)."""

from __future__ import annotations

import re
import urllib.request

__all__ = ["scrape_metrics"]


def scrape_metrics(pattern: str = "") -> list[str]:
    """Exposition lines matching ``pattern`` (a regex, from the line start) on every alive node.

    Nodes whose endpoint does not answer are skipped; call again to wait for a scrape.
    """
    import ray

    found: list[str] = []
    for node in ray.nodes():
        port = node.get("MetricsExportPort")
        if not node["Alive"] or not port:
            continue
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            continue
        found += [line for line in text.splitlines() if re.match(pattern, line)]
    return found
