"""A bounded, bursty HTTP load generator for loopback only.

Sends ``bursts`` bursts of ``burst_size`` concurrent GET requests (``?id=<n>``) to
``http://127.0.0.1:<port><path>``, pausing ``pause_s`` between bursts; stops by itself after the
last burst or after ``max_seconds``, whichever comes first. Never retries: every request is
reported once, with its HTTP status (or the error) and the JSON body.

    python examples/serve_slice/loadgen.py --port 8000 --bursts 6 --burst-size 12
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

__all__ = ["run_load"]


def _one(url: str, rid: int, timeout_s: float, out: list[dict[str, Any]], lock: threading.Lock) -> None:
    t0 = time.monotonic()
    record: dict[str, Any] = {"id": rid}
    try:
        with urllib.request.urlopen(f"{url}?id={rid}", timeout=timeout_s) as resp:
            record.update(status=resp.status, body=json.loads(resp.read().decode()))
    except urllib.error.HTTPError as exc:
        record.update(status=exc.code, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - reported, never retried
        record.update(status=None, error=f"{type(exc).__name__}: {exc}")
    record["latency_s"] = time.monotonic() - t0
    with lock:
        out.append(record)


def run_load(
    port: int,
    *,
    path: str = "/",
    bursts: int = 6,
    burst_size: int = 12,
    pause_s: float = 0.5,
    max_seconds: float = 60.0,
    timeout_s: float = 30.0,
) -> list[dict[str, Any]]:
    """Run the bursts against 127.0.0.1 and return one record per request sent."""
    if bursts < 1 or burst_size < 1:
        raise ValueError("bursts and burst_size must be >= 1")
    url = f"http://127.0.0.1:{int(port)}{path}"
    out: list[dict[str, Any]] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + max_seconds
    threads: list[threading.Thread] = []
    rid = 0
    for _ in range(bursts):
        if time.monotonic() >= stop_at:
            break
        burst = []
        for _ in range(burst_size):
            t = threading.Thread(target=_one, args=(url, rid, min(timeout_s, max(0.1, stop_at - time.monotonic())), out, lock))
            rid += 1
            t.start()
            burst.append(t)
        threads += burst
        for t in burst:
            t.join(max(0.0, stop_at - time.monotonic()) + 1)
        time.sleep(min(pause_s, max(0.0, stop_at - time.monotonic())))
    for t in threads:
        t.join(max(0.0, stop_at - time.monotonic()) + timeout_s)
    return sorted(out, key=lambda r: r["id"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/")
    parser.add_argument("--bursts", type=int, default=6)
    parser.add_argument("--burst-size", type=int, default=12)
    parser.add_argument("--pause", type=float, default=0.5)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    records = run_load(args.port, path=args.path, bursts=args.bursts, burst_size=args.burst_size,
                       pause_s=args.pause, max_seconds=args.max_seconds)
    routes = Counter(r.get("body", {}).get("route", "lost") for r in records)
    print(json.dumps({"sent": len(records), "ok": sum(r.get("status") == 200 for r in records), "routes": routes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
