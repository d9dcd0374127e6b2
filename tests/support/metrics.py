"""Read what a running Ray cluster exports to Prometheus (each node's ``/metrics`` endpoint)."""

from __future__ import annotations

import re
import urllib.request

__all__ = ["scrape_metrics", "scrape_texts", "scrape_spacing_s", "our_exposition", "RAY_LABELS"]

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


def scrape_metrics(*patterns: str) -> list[str] | tuple[list[str], ...]:
    """Exposition lines matching each regex (from the line start) on every alive node, all from one
    scrape: a list for one pattern, a tuple of lists for several.

    Nodes whose endpoint does not answer are skipped; call again to wait for a scrape. One scrape
    for all patterns, because on Ray 2.55 a scrape takes the gauges with it (:func:`scrape_spacing_s`).
    """
    texts = list(scrape_texts().values())
    found = tuple([line for text in texts for line in text.splitlines() if re.match(p, line)] for p in patterns or ("",))
    return found[0] if len(found) == 1 else found


def scrape_spacing_s() -> float:
    """How far apart two scrapes must be for each to see every gauge.

    Ray 2.60 keeps a gauge value for twice the export interval whoever reads it
    (``ray/_private/telemetry/open_telemetry_metric_recorder.py``, ``_resolve_gauge_ttl_seconds``), so
    any spacing does. Ray 2.55.1's recorder hands each gauge value to the first scrape after it
    arrives and clears it (the observable callback, "Clear after reading"): the next scrape sees a
    gauge only after the next export, one ``metrics_report_interval_ms`` later.
    """
    import ray
    from ray._private.telemetry.open_telemetry_metric_recorder import OpenTelemetryMetricRecorder

    if hasattr(OpenTelemetryMetricRecorder, "_resolve_gauge_ttl_seconds"):
        return 0.0
    return ray._config.metrics_report_interval_ms() / 1000.0 + 1.0


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
