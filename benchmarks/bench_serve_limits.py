"""p50/p99 of ``capture-ledger serve`` under 128 clients: the server before the reliability work and after
it, with each HTTP parser and event loop uvicorn offers, side by side in one run (R-HTTP-7; docs/http.md).

Run:  python benchmarks/bench_serve_limits.py [--clients 128] [--requests 4000] [--rounds 2]
      [--before COMMIT]

Configurations, alternating within each round so that all see the same machine load:

- ``before``: the server as it was at ``--before`` (default: the commit before the HTTP limits), from
  ``git archive`` on ``PYTHONPATH``, with uvicorn's parser h11 and the asyncio loop (``httptools`` and
  ``uvloop`` hidden from it by stub modules that fail to import, as on a machine without them);
- ``after h11/asyncio``, ``after h11/uvloop``, ``after httptools/uvloop``: this tree, limits on, the
  parser and loop chosen through ``$CAPTURE_LEDGER_SERVE_LIMITS`` (``impl/http/limits.py``).

Each configuration: a fresh directory with ``--requests`` Live rollouts (one row each), ``serve
--workers 1`` on it, ``--clients`` concurrent clients (aiohttp, one kept-alive connection each) that read
every rollout's manifest (the worker's CPU ceiling: no file written), then retire each one with a one-ID
request (fsync-bound). Printed: requests per second, p50 and p99 in ms, answers other than 200 (must be 0),
per workload and configuration; the medians over the rounds; the date and ``/proc/loadavg`` before and
after. Nothing is asserted: the figures depend on the disk and on the other jobs of the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import secrets
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
from capture_ledger.impl.http import LIMITS_ENV, PREFIX, REMOVAL_ROUTES, ServerLimits
from capture_ledger.impl.simulate import ServerProcess, latency, load_average
from capture_ledger.impl.store.file_store import FileLineageStore

ROOT = Path(__file__).resolve().parents[1]
#: The last commit before the server's limits and error shape.
BEFORE = "5a7de9c"
CONFIGURATIONS = ("before", "after h11/asyncio", "after h11/uvloop", "after httptools/uvloop")


def _before_tree(commit: str, into: Path) -> Path:
    """``capture_ledger`` as it was at ``commit``, laid out as the package imports, plus stubs that
    hide httptools and uvloop; the directory to put first on ``PYTHONPATH``."""
    archive = into / "before.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), commit], check=True)
    source = into / "source"
    with tarfile.open(archive) as tar:
        tar.extractall(source, filter="data")
    tree = into / "tree"
    package = tree / "capture_ledger"
    package.mkdir(parents=True)
    (package / "__init__.py").symlink_to(source / "pkg" / "__init__.py")
    for sub in ("spec", "reference", "impl", "adapters"):
        (package / sub).symlink_to(source / sub)
    for hidden in ("httptools", "uvloop"):
        (tree / f"{hidden}.py").write_text(f"raise ImportError('{hidden} hidden by the benchmark')\n")
    probe = "import capture_ledger.impl.http.server as s; print(s.__file__)"
    found = subprocess.run(
        [sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(tree)},
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    if not found.startswith(str(tree)):
        raise RuntimeError(f"PYTHONPATH does not win over the installed package: {found}")
    print(f"before: {commit} from {found}")
    return tree


@contextlib.contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


async def _drive(
    url: str, token: str, ids: list[str], clients: int, *, retire: bool
) -> tuple[float, list[float], int]:
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=600)
    latencies: list[float] = []
    errors = 0
    queue = iter(ids)
    async with aiohttp.ClientSession(
        base_url=url, headers=headers, connector=connector, timeout=timeout
    ) as http:

        async def client() -> None:
            nonlocal errors
            for rollout_id in queue:
                start = time.perf_counter()
                if retire:
                    body = {"rollout_ids": [rollout_id]}
                    async with http.post(f"{PREFIX}{REMOVAL_ROUTES['retire']}", json=body) as response:
                        await response.read()
                else:
                    async with http.get(f"{PREFIX}/rollouts/{rollout_id}/manifest") as response:
                        await response.read()
                errors += response.status != 200
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return time.perf_counter() - start, latencies, errors


def _one(
    root: Path, name: str, configuration: str, before: Path, *, requests: int, clients: int
) -> dict[str, tuple[float, float, float, int]]:
    directory = root / name
    ids = [f"lim-{i:06d}" for i in range(requests)]
    with FileLineageStore(directory) as store:
        for rollout_id in ids:
            store.record(rollout_id, {"model_call_id": "m0", "staging_key": f"{rollout_id}/m0"})
    token = secrets.token_urlsafe(16)
    if configuration == "before":
        env = _environment(PYTHONPATH=str(before), **{LIMITS_ENV: None})
    else:
        parser, loop = configuration.removeprefix("after ").split("/")
        env = _environment(PYTHONPATH=None, **{LIMITS_ENV: ServerLimits(http=parser, loop=loop).to_json()})
    results: dict[str, tuple[float, float, float, int]] = {}
    with env, ServerProcess(directory, token=token, workers=1) as server:
        for workload in ("manifest", "retire"):
            seconds, latencies, errors = asyncio.run(
                _drive(server.url, token, ids, clients, retire=workload == "retire")
            )
            figures = latency(latencies)
            results[workload] = (len(ids) / seconds, figures.p50 * 1e3, figures.p99 * 1e3, errors)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=128, help="concurrent clients (default: 128)")
    parser.add_argument("--requests", type=int, default=4000, help="requests per workload and configuration")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every configuration (default: 2)")
    parser.add_argument("--before", default=BEFORE, help=f"the commit to measure as 'before' ({BEFORE})")
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_before = load_average()
    figures: dict[tuple[str, str], list[tuple[float, float, float, int]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-limits-") as scratch:
        root = Path(scratch)
        before = _before_tree(args.before, root)
        for round_ in range(args.rounds):
            for index, configuration in enumerate(CONFIGURATIONS):
                name = f"r{round_}-{index}"
                for workload, result in _one(
                    root, name, configuration, before, requests=args.requests, clients=args.clients
                ).items():
                    figures.setdefault((configuration, workload), []).append(result)
                    rate, p50, p99, errors = result
                    print(
                        f"  round {round_ + 1} {configuration:24} {workload:8}: {rate:6.0f} req/s, "
                        f"p50 {p50:7.1f} ms, p99 {p99:7.1f} ms, {errors} not 200"
                    )
    print(
        f"\n{started}; load before {load_before}, after {load_average()}; {args.clients} clients, one serve "
        f"worker, {args.requests} requests per workload, {args.rounds} round(s); medians over the rounds:"
    )
    print("| configuration | workload | req/s | p50 ms | p99 ms | not 200 |\n|---|---|---:|---:|---:|---:|")
    for (configuration, workload), runs in figures.items():
        rate = statistics.median(r[0] for r in runs)
        p50 = statistics.median(r[1] for r in runs)
        p99 = statistics.median(r[2] for r in runs)
        errors = sum(r[3] for r in runs)
        print(f"| {configuration} | {workload} | {rate:.0f} | {p50:.1f} | {p99:.1f} | {errors} |")


if __name__ == "__main__":
    main()
