"""One-ID retire requests from many concurrent clients through one ``capture-ledger serve`` worker, with
the file store's group commit on and off, side by side in one run (R-STORE-4, R-STORE-9; docs/http.md).

Run:  python benchmarks/bench_serve_group_commit.py [--clients 256] [--ids 4096] [--rounds 2]
      [--threads 40,256]

For each round, and in each round for each configuration in turn (so that both see the same machine
load): a fresh directory with ``--ids`` Live rollouts (one row each, written directly through a
``FileLineageStore``), ``capture-ledger serve --workers 1`` on it (``--no-group-commit`` for "off", and
``--threads N`` for each thread-pool size of ``--threads``), and ``--clients`` concurrent clients
(aiohttp, one connection each) that retire the IDs one per request until none is left. Printed per
configuration: requests per second, p50 and p99 latency of a request, the ratios of "on" to "off", the
store's resolved ``fence_sync`` (from ``/metrics``), the date and ``/proc/loadavg``. Next to them, the
worker's ceiling in the same run: the same clients reading manifests of absent rollouts (no file
written, no sync), i.e. what the HTTP stack alone serves; group commit cannot lift retires above it.

Why threads matter: the server runs each store call in a thread of anyio's pool (40 threads unless
``serve --threads`` says otherwise), so at most that many retires can wait for one shared directory sync
at once; the rest queue for a thread. Nothing here is asserted; the figures depend on the disk and the load.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
from capture_ledger.impl.http import METRICS_ROUTE, PREFIX, REMOVAL_ROUTES
from capture_ledger.impl.http.serving import ServeOptions
from capture_ledger.impl.simulate import ServerProcess, latency, load_average, parse_metrics
from capture_ledger.impl.store.file_store import FileLineageStore


def _populate(directory: Path, ids: list[str]) -> None:
    with FileLineageStore(directory) as store:
        for rollout_id in ids:
            store.record(rollout_id, {"model_call_id": "m0", "staging_key": f"{rollout_id}/m0"})


async def _drive(
    url: str, token: str, ids: list[str], clients: int, *, read: bool = False
) -> tuple[float, list[float], str]:
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=600)
    latencies: list[float] = []
    queue = iter(ids)
    async with aiohttp.ClientSession(
        base_url=url, headers=headers, connector=connector, timeout=timeout
    ) as http:

        async def client() -> None:
            for rollout_id in queue:
                start = time.perf_counter()
                if read:
                    async with http.get(f"{PREFIX}/rollouts/absent-{rollout_id}/manifest") as response:
                        assert response.status == 200, await response.text()
                        await response.read()
                else:
                    body = {"rollout_ids": [rollout_id]}
                    async with http.post(f"{PREFIX}{REMOVAL_ROUTES['retire']}", json=body) as response:
                        answer = await response.json()
                        assert response.status == 200 and answer["removed"] == [rollout_id], answer
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        seconds = time.perf_counter() - start
        async with http.get(f"{PREFIX}{METRICS_ROUTE}") as response:
            text = await response.text()
    return seconds, latencies, parse_metrics(text).info.get("fence_sync", "?")


def _one(
    root: Path, name: str, *, group_commit: bool, threads: int, ids: int, clients: int, read: bool = False
) -> tuple[float, float, float, str]:
    directory = root / name
    directory.mkdir()
    rollouts = [f"gc-{i:06d}" for i in range(ids)]
    _populate(directory, rollouts)
    token = secrets.token_urlsafe(16)
    options = ServeOptions(group_commit=group_commit, threads=threads)
    with ServerProcess(directory, token=token, workers=1, options=options) as server:
        seconds, latencies, fence_sync = asyncio.run(_drive(server.url, token, rollouts, clients, read=read))
    figures = latency(latencies)
    return ids / seconds, figures.p50 * 1e3, figures.p99 * 1e3, fence_sync


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=256, help="concurrent clients (default: 256)")
    parser.add_argument("--ids", type=int, default=4096, help="Live rollouts retired per configuration")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every configuration (default: 2)")
    parser.add_argument(
        "--threads", default="40,256", help="server thread-pool sizes to try (default: 40,256)"
    )
    args = parser.parse_args()
    pools = [int(t) for t in args.threads.split(",")]
    configurations = [(gc, threads) for threads in pools for gc in (True, False)]
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_before = load_average()
    figures: dict[tuple[bool, int], list[tuple[float, float, float, str]]] = {c: [] for c in configurations}
    ceiling: list[tuple[float, float, float, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-gc-") as root:
        for round_ in range(args.rounds):
            for gc, threads in configurations:
                name = f"r{round_}-{'on' if gc else 'off'}-{threads}"
                figures[(gc, threads)].append(
                    _one(
                        Path(root), name, group_commit=gc, threads=threads, ids=args.ids, clients=args.clients
                    )
                )
                rate, p50, p99, fence_sync = figures[(gc, threads)][-1]
                print(f"  round {round_ + 1} {name}: {rate:7.0f} req/s, p50 {p50:7.1f} ms, p99 {p99:7.1f} ms")
            name = f"r{round_}-read"
            ceiling.append(
                _one(
                    Path(root),
                    name,
                    group_commit=True,
                    threads=40,
                    ids=args.ids,
                    clients=args.clients,
                    read=True,
                )
            )
            print(f"  round {round_ + 1} manifest reads (no sync): {ceiling[-1][0]:7.0f} req/s")
    print(
        f"\n{started}; load before {load_before}, after {load_average()}; {args.clients} clients, "
        f"one serve worker, {args.ids} one-ID retire requests per configuration, {args.rounds} round(s); "
        f"fence_sync={fence_sync}"
    )
    print(
        f"{'group commit':>12} {'threads':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}   (median over rounds)"
    )
    medians: dict[tuple[bool, int], tuple[float, float, float]] = {}
    for (gc, threads), runs in figures.items():
        medians[(gc, threads)] = (
            statistics.median(r[0] for r in runs),
            statistics.median(r[1] for r in runs),
            statistics.median(r[2] for r in runs),
        )
        rate, p50, p99 = medians[(gc, threads)]
        print(f"{'on' if gc else 'off':>12} {threads:>8} {rate:8.0f} {p50:8.1f} {p99:8.1f}")
    top = statistics.median(r[0] for r in ceiling)
    print(f"{'ceiling':>12} {40:>8} {top:8.0f}   manifest reads of absent rollouts: the HTTP stack alone")
    for threads in pools:
        on, off = medians[(True, threads)], medians[(False, threads)]
        print(
            f"threads {threads}: on/off throughput {on[0] / off[0]:.2f}x, p99 on/off {on[2] / off[2]:.2f} "
            f"(lower is better)"
        )


if __name__ == "__main__":
    main()
