"""A reliability campaign against the store and ``serve``: bounded, loopback only, printing its figures
(SPEC.md R-CRASH-1..4, R-STORE-8, R-STORE-12, R-STORE-13, R-HTTP-3, R-HTTP-7; docs/store.md, docs/http.md).

Run:  python benchmarks/reliability_campaign.py [kill|disk-full|fuzz|slow|all] [--kills 300]
      [--requests 5000] [--connections 1100] [--seed 1]

- ``kill``: a storm of SIGKILLs. Each round forks two writer processes on one directory (disjoint IDs, a
  fixed operation sequence each: record, record_failure, retire, delete), kills both at a random moment,
  and reads every ID back with a fresh handle: each must be in the state its *returned* calls leave, or
  the in-flight call's pre-, post- or path state (R-CRASH-4); ``check()`` may report only what a
  crash leaves, and after ``check(fix=True)`` every ID must still be in a state the contract allows.
  Printed: kills, calls returned, IDs checked, violations (must be 0).
- ``disk-full``: a 6 MB tmpfs (root; skipped with a reason otherwise) filled through the store by records
  until ``ENOSPC``; every returned record must be there, no failed record may have left a row (R-STORE-13),
  then retire and delete of everything must succeed (R-STORE-12) and records succeed again. Printed:
  records returned, ENOSPC failures, lost or phantom rows (must be 0), removals.
- ``fuzz``: ``--requests`` requests to a real ``serve`` on loopback: lone surrogates (escaped and raw),
  NUL, ``..`` and ``%2e%2e`` paths, 10k-deep nesting, repeated keys, 10 MB bodies, wrong content types and
  charsets, BOMs and UTF-16, near-miss tokens, slow bodies, and valid calls. Oracle: no 5xx, every answer
  a 200 body or the error shape, every refused request leaves the directory byte for byte unchanged.
  Printed: requests per status, 5xx (must be 0), changed-by-refused (must be 0).
- ``slow``: ``--connections`` connections that never send a byte, more than the worker's open-file limit
  of 1,024, then an authenticated client's manifest reads. Printed: how many were refused at once (503),
  timed out (408), the client's answers, and the ``EMFILE`` lines in the server's log (must be 0).

Nothing is asserted beyond the exit status (1 when a "must be 0" figure is not); figures depend on the
machine.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import random
import resource
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from capture_ledger.impl import study
from capture_ledger.impl.http import PREFIX, ServerLimits
from capture_ledger.impl.http.client import RolloutControlClient
from capture_ledger.impl.simulate import ServerProcess, load_average
from capture_ledger.impl.store import check
from capture_ledger.impl.store.file_store import FileLineageStore

STRIPES = 8


# ----------------------------------------------------------------------------------------------- kill
def kill_storm(kills: int, seed: int) -> bool:
    storm = study.kill_storm(kills, seed)  # the storm itself lives in impl/study/_kill_storm.py
    for note in storm.notes:
        print(f"  {note}")
    print(
        f"kill storm: {storm.kills} SIGKILLs, {storm.returned} calls returned and checked with a fresh "
        f"handle, {storm.checked} IDs judged, {storm.fixed} crash leftovers fixed by check, violations "
        f"{storm.violations} (must be 0)"
    )
    return storm.violations == 0


# ------------------------------------------------------------------------------------------ disk-full
def disk_full() -> bool:
    if os.geteuid() != 0:
        print("disk-full: skipped (mounting a tmpfs needs root)")
        return True
    root = Path(tempfile.mkdtemp(prefix="campaign-full-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(root)], check=False)
    if mounted.returncode != 0:
        print("disk-full: skipped (mount -t tmpfs refused)")
        return True
    try:
        directory = root / "lineage"
        returned: dict[str, list[str]] = {}
        failures = 0
        pad = "p" * 2000
        with FileLineageStore(directory, stripes=STRIPES) as store:
            n = 0
            while failures < 50:
                rollout_id = f"full-{n % 40:02d}"
                try:
                    store.record(rollout_id, {"model_call_id": f"c{n}", "pad": pad})
                    returned.setdefault(rollout_id, []).append(f"c{n}")
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
                    failures += 1
                n += 1
        lost = phantom = 0
        with FileLineageStore(directory, stripes=STRIPES) as fresh:
            for index in range(40):
                rollout_id = f"full-{index:02d}"
                got = [r["model_call_id"] for r in fresh.manifest(rollout_id)["records"]]
                want = returned.get(rollout_id, [])
                lost += len(set(want) - set(got))
                phantom += len(set(got) - set(want))
            ids = [f"full-{index:02d}" for index in range(40)]
            retired = fresh.retire(ids[:20])
            deleted = fresh.delete(ids)
            fresh.record("after", {"model_call_id": "c", "pad": pad})
        findings = [f.kind for f in check(directory)]
        print(
            f"disk-full (6 MB tmpfs): {sum(map(len, returned.values()))} records returned, {failures} ENOSPC "
            f"failures, lost {lost}, phantom rows of failed records {phantom} (both must be 0); retire of 20 "
            f"and delete of 40 on the full disk: {len(retired['removed'])} and {len(deleted['removed'])} "
            f"removed; a record afterwards succeeded; check findings {findings}"
        )
        return lost == 0 and phantom == 0 and not findings
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------------------------------- fuzz
def _listing(directory: Path) -> list[tuple[str, bytes]]:
    return sorted((p.name, p.read_bytes()) for p in directory.iterdir() if not p.name.startswith("."))


def _raw(url: str, data: bytes, *, read_timeout: float = 30.0) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=read_timeout) as sock:
        with contextlib.suppress(OSError):  # the server answered and closed before taking it all
            sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except OSError:
            pass
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1") else 0
    return status, body


def fuzz(requests: int, seed: int) -> bool:
    rng = random.Random(seed)
    token = secrets.token_urlsafe(16)
    statuses: Counter[int] = Counter()
    kinds: Counter[str] = Counter()
    changed = bad_shape = 0
    root = Path(tempfile.mkdtemp(prefix="campaign-fuzz-"))
    directory = root / "lineage"
    with FileLineageStore(directory) as store:
        for rollout_id in ("live-a", "live-b", "live-c"):
            store.record(rollout_id, {"model_call_id": "m0", "staging_key": None})
    limits = ServerLimits(body_timeout=1.0, header_timeout=2.0)
    auth = {"Authorization": f"Bearer {token}"}
    retire = f"{PREFIX}/rollouts/retire"
    big = b'{"rollout_ids": ["' + b"a" * (10 * 1024 * 1024) + b'"]}'

    def body_case() -> tuple[str, bytes, dict[str, str]]:
        json_type = {"Content-Type": "application/json"}
        choice = rng.randrange(12)
        if choice == 0:
            return "surrogate-escape", b'{"rollout_ids": ["\\ud800"]}', json_type
        if choice == 1:
            return "surrogate-raw", b'{"rollout_ids": ["\xed\xa0\x80"]}', json_type
        if choice == 2:
            return "nul", b'{"rollout_ids": ["a\\u0000b"]}', json_type
        if choice == 3:
            return "dotdot", b'{"rollout_ids": ["..", "../live-a"]}', json_type
        if choice == 4:
            return "deep", b"[" * 10_000 + b"]" * 10_000, json_type
        if choice == 5:
            return "duplicate-keys", b'{"rollout_ids": [".."], "rollout_ids": ["live-a"]}', json_type
        if choice == 6:
            return "wrong-type", b'{"rollout_ids": ["live-a"]}', {"Content-Type": rng.choice(
                ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1"]
            )}  # fmt: skip
        if choice == 7:
            return "bom-utf16", rng.choice(
                [b'\xef\xbb\xbf{"rollout_ids": ["live-a"]}', '{"rollout_ids": ["live-a"]}'.encode("utf-16")]
            ), json_type  # fmt: skip
        if choice == 8:
            garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
            return "random-bytes", garbage, json_type
        if choice == 9:
            return (
                "not-a-list",
                rng.choice([b'{"rollout_ids": "live-a"}', b"[]", b"null", b'{"x": 1}']),
                json_type,
            )
        if choice == 10:
            return (
                "valid-absent",
                json.dumps({"rollout_ids": [f"absent-{rng.randrange(9)}"]}).encode(),
                json_type,
            )
        return (
            "long-id",
            json.dumps({"rollout_ids": ["x" * rng.choice([200, 201, 5000])]}).encode(),
            json_type,
        )

    ok = True
    with (
        ServerProcess(directory, token=token, limits=limits) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        for _ in range(requests):
            before = _listing(directory)
            kind_roll = rng.random()
            if kind_roll < 0.55:
                kind, body, headers = body_case()
                response = http.post(retire, content=body, headers={**auth, **headers})
                status, answer = response.status_code, response.content
            elif kind_roll < 0.8:
                kind = "path"
                name = rng.choice(
                    ["..", "%2e%2e", "%2E%2E%2Fetc", "a%00b", "%ed%a0%80", ".hidden", "-rf", "a" * 201,
                     "live-a/../live-b", "%252e%252e", "live-b", "absent-1", "\u00e9t\u00e9"]
                )  # fmt: skip
                response = http.get(f"{PREFIX}/rollouts/{name}/manifest", headers=auth)
                status, answer = response.status_code, response.content
            elif kind_roll < 0.95:
                kind = "token"
                token_case = rng.choice(
                    [
                        f"Bearer  {token}",
                        f"Bearer {token}x",
                        f"Bearer {token[:-1]}",
                        "Bearer",
                        f"Basic {token}",
                        "",
                    ]
                )
                response = http.post(
                    retire, content=b'{"rollout_ids": ["live-a"]}',
                    headers={"Authorization": token_case, "Content-Type": "application/json"},
                )  # fmt: skip
                status, answer = response.status_code, response.content
            elif kind_roll < 0.99:
                kind = "10MB"
                head = (
                    f"POST {retire} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(big)}\r\n\r\n"
                ).encode()
                status, answer = _raw(server.url, head + big)
            else:
                kind = "slow-body"
                head = (
                    f"POST {retire} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 64\r\n\r\n"
                ).encode()
                status, answer = _raw(server.url, head + b'{"rollout_ids": ["live-')
            kinds[kind] += 1
            statuses[status] += 1
            try:
                decoded: Any = json.loads(answer) if answer else None
            except ValueError:
                decoded = None
            if status != 200 and not (
                isinstance(decoded, dict) and set(decoded) == {"detail", "error", "rollout_id"}
            ):
                bad_shape += 1
                if bad_shape <= 3:
                    print(f"  not the error shape: {kind} {status} {answer[:120]!r}")
            if status != 200 and _listing(directory) != before:
                changed += 1
            if status >= 500 or status == 0:
                ok = False
                print(f"  {kind}: {status} {answer[:200]!r}")
        log = server.log()
    shutil.rmtree(root, ignore_errors=True)
    five = sum(count for status, count in statuses.items() if status >= 500)
    print(
        f"fuzz: {requests} requests ({dict(sorted(kinds.items()))}); "
        f"statuses {dict(sorted(statuses.items()))}; 5xx or no answer {five + statuses[0]} (must be 0), "
        f"outside the error shape {bad_shape} (must be 0), "
        f"directory changed by a refused request {changed} (must be 0); tracebacks in the server log "
        f"{log.count('Traceback')}"
    )
    return ok and bad_shape == 0 and changed == 0


# ----------------------------------------------------------------------------------------------- slow
def slow(connections: int) -> bool:
    token = secrets.token_urlsafe(16)
    root = Path(tempfile.mkdtemp(prefix="campaign-slow-"))
    directory = root / "lineage"
    with FileLineageStore(directory) as store:
        store.record("live-a", {"model_call_id": "m0", "staging_key": None})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))  # the server's limit: the usual 1,024
    limits = ServerLimits(header_timeout=5.0)
    try:
        server = ServerProcess(directory, token=token, limits=limits).start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, connections + 256), hard))
    held: list[socket.socket] = []
    answers: Counter[str] = Counter()
    try:
        host, port = server.url.removeprefix("http://").split(":")
        for _ in range(connections):
            held.append(socket.create_connection((host, int(port)), timeout=30))
        time.sleep(0.5)
        busy_during: Counter[str] = Counter()
        with RolloutControlClient(server.url, auth_token=token, timeout=10) as client:
            for _ in range(20):
                try:
                    client.manifest("live-a")
                    busy_during["200"] += 1
                except Exception as error:  # counted by kind
                    busy_during[getattr(error, "error", None) or type(error).__name__] += 1

        def read(sock: socket.socket) -> None:
            try:
                data = sock.recv(4096)
                answers[
                    "503" if b" 503 " in data[:20] else "408" if b" 408 " in data[:20] else repr(data[:12])
                ] += 1
            except OSError as error:
                answers[type(error).__name__] += 1

        threads = [threading.Thread(target=read, args=(sock,)) for sock in held]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        with RolloutControlClient(server.url, auth_token=token, timeout=10, retries=3, backoff=0.5) as client:
            after = sum(client.manifest("live-a")["rollout_id"] == "live-a" for _ in range(20))
    finally:
        for sock in held:
            sock.close()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    log = server.log()
    emfile = log.count("EMFILE") + log.count("Too many open files")
    print(
        f"slow connections: {connections} that never send a byte against a worker with 1,024 open files "
        f"(cap 1,024 - 256 = 768 there): answers {dict(answers)}; an authenticated client during the "
        f"flood: {dict(busy_during)}; after the head timeout: {after}/20 answered; EMFILE lines in the "
        f"server log {emfile} (must be 0); server log {len(log)} bytes"
    )
    return emfile == 0 and after == 20


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "part", nargs="?", default="all", choices=["kill", "disk-full", "fuzz", "slow", "all"]
    )
    parser.add_argument("--kills", type=int, default=300)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--connections", type=int, default=1100)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {load_average()}")
    results = []
    if args.part in ("kill", "all"):
        results.append(kill_storm(args.kills, args.seed))
    if args.part in ("disk-full", "all"):
        results.append(disk_full())
    if args.part in ("fuzz", "all"):
        results.append(fuzz(args.requests, args.seed))
    if args.part in ("slow", "all"):
        results.append(slow(args.connections))
    print(f"load {load_average()}; {'all figures as they must be' if all(results) else 'FAILED'}")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
