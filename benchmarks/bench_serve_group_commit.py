"""One-ID retire requests from many concurrent clients through one ``capture-ledger serve`` worker, with
the file store's removals combined, one call at a time, and with group commit only, side by side in one run
(R-STORE-4, R-STORE-9; docs/http.md, docs/group-commit.md).

Run:  python benchmarks/bench_serve_group_commit.py [--clients 256] [--ids 4096] [--rounds 2]
      [--threads 40,256] [--modes combine,one-at-a-time,group commit]  (BENCH_DIR: where)

For each round, and in each round for each configuration in turn (so that both see the same machine
load): a fresh directory with ``--ids`` Live rollouts (one row each, written directly through a
``FileLineageStore``), ``capture-ledger serve --workers 1`` on it (``combine``: removals combined;
``one-at-a-time``: neither combined nor sharing syncs; ``group commit``: sharing syncs only; the store
opened by this module's factory for the mode, ``--ledger bench_serve_group_commit:open_<mode>``, so that the
mode does not depend on which options the server's command line carries; and ``--threads N`` for each
thread-pool size of ``--threads``), and ``--clients`` concurrent clients
(aiohttp, one connection each) that retire the IDs one per request until none is left. Printed per
configuration: requests per second, p50 and p99 latency of a request, the ratios to one-at-a-time, the
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
import os
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


#: configuration -> (combine_removals, group_commit), as ``serve --combine/--no-combine`` and
#: ``--group-commit/--no-group-commit`` pass them.
MODES: dict[str, tuple[bool, bool]] = {
    "combine": (True, False),
    "one-at-a-time": (False, False),
    "group commit": (False, True),
}


def open_combine(directory: str | os.PathLike[str]) -> FileLineageStore:
    """The served store of the ``combine`` mode (``serve --ledger`` target: the mode is explicit)."""
    return FileLineageStore(directory, combine_removals=True, group_commit=False)


def open_one_at_a_time(directory: str | os.PathLike[str]) -> FileLineageStore:
    """The served store of the ``one-at-a-time`` mode."""
    return FileLineageStore(directory, combine_removals=False, group_commit=False)


def open_group_commit(directory: str | os.PathLike[str]) -> FileLineageStore:
    """The served store of the ``group commit`` mode."""
    return FileLineageStore(directory, combine_removals=False, group_commit=True)


def _one(
    root: Path, name: str, *, mode: str, threads: int, ids: int, clients: int, read: bool = False
) -> tuple[float, float, float, str]:
    directory = root / name
    directory.mkdir()
    rollouts = [f"gc-{i:06d}" for i in range(ids)]
    _populate(directory, rollouts)
    token = secrets.token_urlsafe(16)
    combine, group_commit = MODES[mode]
    options = ServeOptions(group_commit=group_commit, combine_removals=combine, threads=threads)
    # The store is opened by this module's factory for the mode (``serve --ledger``), so that the mode does
    # not depend on which of its options the server's command line carries.
    target = f"{Path(__file__).stem}:open_{mode.replace(' ', '_').replace('-', '_')}"
    with ServerProcess(directory, token=token, workers=1, options=options, ledger=target) as server:
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
    parser.add_argument("--modes", default=",".join(MODES), help="configurations, comma-separated")
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parent)  # the serve children import this module's factories
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    pools = [int(t) for t in args.threads.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    configurations = [(mode, threads) for threads in pools for mode in modes]
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_before = load_average()
    figures: dict[tuple[str, int], list[tuple[float, float, float, str]]] = {c: [] for c in configurations}
    ceiling: list[tuple[float, float, float, str]] = []
    fence_sync = "?"
    with tempfile.TemporaryDirectory(prefix="bench-gc-", dir=os.environ.get("BENCH_DIR")) as root:
        for round_ in range(args.rounds):
            for mode, threads in configurations:
                name = f"r{round_}-{mode.replace(' ', '-')}-{threads}"
                figures[(mode, threads)].append(
                    _one(Path(root), name, mode=mode, threads=threads, ids=args.ids, clients=args.clients)
                )
                rate, p50, p99, fence_sync = figures[(mode, threads)][-1]
                print(f"  round {round_ + 1} {name}: {rate:7.0f} req/s, p50 {p50:7.1f} ms, p99 {p99:7.1f} ms")
            name = f"r{round_}-read"
            ceiling.append(
                _one(
                    Path(root),
                    name,
                    mode="one-at-a-time",
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
    print(f"{'mode':>14} {'threads':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}   (median over rounds)")
    medians: dict[tuple[str, int], tuple[float, float, float]] = {}
    for (mode, threads), runs in figures.items():
        medians[(mode, threads)] = (
            statistics.median(r[0] for r in runs),
            statistics.median(r[1] for r in runs),
            statistics.median(r[2] for r in runs),
        )
        rate, p50, p99 = medians[(mode, threads)]
        print(f"{mode:>14} {threads:>8} {rate:8.0f} {p50:8.1f} {p99:8.1f}")
    top = statistics.median(r[0] for r in ceiling)
    print(f"{'ceiling':>14} {40:>8} {top:8.0f}   manifest reads of absent rollouts: the HTTP stack alone")
    for threads in pools:
        base = medians.get(("one-at-a-time", threads))
        for mode in modes:
            if base is None or mode == "one-at-a-time":
                continue
            got = medians[(mode, threads)]
            print(
                f"threads {threads}: {mode} / one-at-a-time throughput {got[0] / base[0]:.2f}x, "
                f"p99 {got[2] / base[2]:.2f} (lower is better)"
            )


if __name__ == "__main__":
    main()
