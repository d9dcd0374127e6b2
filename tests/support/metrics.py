"""Read what a running Ray cluster exports to Prometheus (each node's ``/metrics`` endpoint)."""

from __future__ import annotations

import re
import urllib.request

__all__ = ["scrape_metrics", "scrape_texts", "our_exposition", "RAY_LABELS"]

# Labels Ray adds to every series it exports (Ray 2.60's OpenTelemetry recorder and metrics agent).
RAY_LABELS = frozenset({"Component", "NodeAddress", "SessionName", "Version", "WorkerId", "JobId",
                        "otel_scope_name", "otel_scope_schema_url", "otel_scope_version"})


def scrape_texts() -> dict[str, str]:
    """The full exposition text of every alive node that answers, by node id."""
    import ray

    out: dict[str, str] = {}
    for node in ray.nodes():
        port = node.get("MetricsExportPort")
        if not node["Alive"] or not port:
            continue
        try:
            out[node["NodeID"]] = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            continue
    return out


def scrape_metrics(pattern: str = "") -> list[str]:
    """Exposition lines matching ``pattern`` (a regex, from the line start) on every alive node.

    Nodes whose endpoint does not answer are skipped; call again to wait for a scrape.
    """
    found: list[str] = []
    for text in scrape_texts().values():
        found += [line for line in text.splitlines() if re.match(pattern, line)]
    return found


_RAY_LABEL_RE = re.compile(r'(?<=[{,])(?:%s)="(?:[^"\\]|\\.)*",?' % "|".join(sorted(RAY_LABELS)))


def our_exposition(text: str, prefix: str = "ray_rayaccel_", *, without_ray_labels: bool = False) -> str:
    """The ``# HELP``/``# TYPE`` lines and samples of the metrics named ``prefix...`` in ``text``;
    ``without_ray_labels`` drops the labels Ray adds itself (:data:`RAY_LABELS`)."""
    keep = []
    for line in text.splitlines():
        if re.match(rf"# (HELP|TYPE) {re.escape(prefix)}", line):
            keep.append(line)
        elif line.startswith(prefix):
            if without_ray_labels:
                line = _RAY_LABEL_RE.sub("", line).replace(",}", "}")
            keep.append(line)
    return "\n".join(keep) + ("\n" if keep else "")
