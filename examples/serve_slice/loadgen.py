"""An open-loop bursty HTTP load generator for loopback only.

Bursts arrive as a Poisson process: the gap before each burst is drawn from an exponential
distribution with mean ``mean_gap_s`` (seeded, so a run can be repeated), and a burst does not wait
for the previous one to finish. A burst is ``burst_size`` concurrent ``GET <path>?id=<n>`` requests
to ``http://127.0.0.1:<port>``, each on its own connection (asyncio streams, HTTP/1.1,
``Connection: close``). It stops after ``bursts`` bursts, then keeps going while ``more_while``
(called with the records so far) says so, never past ``max_seconds``. It never retries: every
request is reported once with its burst, send time (``sent_s`` from the start, ``sent_at`` on
``time.monotonic()``), latency, HTTP status (or error) and JSON body.

    python examples/serve_slice/loadgen.py --port 8000 --bursts 6 --burst-size 200 --mean-gap 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

__all__ = ["run_load", "summarize", "percentile"]


async def _one(port: int, path: str, rid: int, burst: int, t0: float, timeout_s: float) -> dict[str, Any]:
    sent = time.monotonic()
    record: dict[str, Any] = {"id": rid, "burst": burst, "sent_s": sent - t0, "sent_at": sent}
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout_s)
        try:
            writer.write(f"GET {path}?id={rid} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            raw = await asyncio.wait_for(reader.read(), max(0.1, timeout_s - (time.monotonic() - sent)))
        finally:
            writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else None
        record["status"] = status
        if b"transfer-encoding: chunked" in head.lower():
            body = _dechunk(body)
        try:
            record["body"] = json.loads(body.decode())
        except ValueError:
            record["error"] = f"unparsable body: {body[:200]!r}"
    except Exception as exc:  # noqa: BLE001 - reported, never retried
        record.update(status=None, error=f"{type(exc).__name__}: {exc}")
    record["latency_s"] = time.monotonic() - sent
    return record


def _dechunk(data: bytes) -> bytes:
    out, rest = b"", data
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2:]
    return out


async def _run(port, path, bursts, burst_size, mean_gap_s, seed, max_seconds, timeout_s, on_burst, more_while):
    rng = random.Random(seed)
    t0 = time.monotonic()
    stop_at = t0 + max_seconds
    records: list[dict[str, Any]] = []
    tasks: dict[asyncio.Task, tuple[int, int]] = {}
    loop = asyncio.get_running_loop()
    burst, rid = 0, 0

    def done(task: asyncio.Task) -> None:
        records.append(task.result())

    while time.monotonic() < stop_at:
        if burst >= bursts and (more_while is None or not await loop.run_in_executor(None, more_while, list(records))):
            break
        for _ in range(burst_size):
            task = asyncio.ensure_future(_one(port, path, rid, burst, t0, timeout_s))
            task.add_done_callback(done)
            tasks[task] = (rid, burst)
            rid += 1
        if on_burst is not None:
            await loop.run_in_executor(None, on_burst, burst)
        burst += 1
        gap = rng.expovariate(1.0 / mean_gap_s) if mean_gap_s > 0 else 0.0
        await asyncio.sleep(min(gap, max(0.0, stop_at - time.monotonic())))
    if tasks:
        _, pending = await asyncio.wait(list(tasks), timeout=timeout_s + 5)
        for task in pending:
            task.remove_done_callback(done)
            task.cancel()
            rid_, burst_ = tasks[task]
            records.append({"id": rid_, "burst": burst_, "status": None, "error": "no answer", "latency_s": timeout_s})
    return sorted(records, key=lambda r: r["id"])


def run_load(
    port: int,
    *,
    path: str = "/",
    bursts: int = 6,
    burst_size: int = 200,
    mean_gap_s: float = 2.0,
    seed: int = 0,
    max_seconds: float = 120.0,
    timeout_s: float = 60.0,
    on_burst: Callable[[int], None] | None = None,
    more_while: Callable[[list[dict[str, Any]]], bool] | None = None,
) -> list[dict[str, Any]]:
    """Send the bursts to 127.0.0.1 and return one record per request sent, by id.

    ``on_burst(i)`` runs (in a thread) right after burst ``i`` is sent, while it is in flight.
    """
    if bursts < 1 or burst_size < 1:
        raise ValueError("bursts and burst_size must be >= 1")
    if mean_gap_s < 0:
        raise ValueError("mean_gap_s must be >= 0")
    return asyncio.run(_run(int(port), path, bursts, burst_size, mean_gap_s, seed, max_seconds, timeout_s,
                            on_burst, more_while))


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by the inclusive method; None for no values."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, round(q) - 1))]


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Requests sent, answered (HTTP 200 with a JSON body), errors, routes and latency."""
    ok = [r for r in records if r.get("status") == 200 and "body" in r]
    latencies = sorted(r["latency_s"] * 1000 for r in ok)
    return {
        "sent": len(records),
        "ok": len(ok),
        "errors": len(records) - len(ok),
        "bursts": len({r["burst"] for r in records}),
        "routes": dict(Counter(r["body"].get("route", "?") for r in ok)),
        "p50_ms": round(percentile(latencies, 50), 1) if latencies else None,
        "p99_ms": round(percentile(latencies, 99), 1) if latencies else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/")
    parser.add_argument("--bursts", type=int, default=6)
    parser.add_argument("--burst-size", type=int, default=200)
    parser.add_argument("--mean-gap", type=float, default=2.0, help="mean seconds between burst starts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    args = parser.parse_args(argv)
    records = run_load(args.port, path=args.path, bursts=args.bursts, burst_size=args.burst_size,
                       mean_gap_s=args.mean_gap, seed=args.seed, max_seconds=args.max_seconds)
    print(json.dumps(summarize(records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
