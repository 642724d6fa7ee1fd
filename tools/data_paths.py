"""Count the hops of the four data paths of docs/architecture.md: which project modules one request runs
through, and how often it crosses from one package group to another.

Usage (from the repository root, in an environment with the project installed)::

    python tools/data_paths.py [retire|verify|stress|crash ...] [--json]

Each path runs once in this process under ``sys.setprofile`` (and ``threading.setprofile``): every call
from one ``capture_ledger`` function into another is an edge between their modules. Reported per path:
``modules`` (distinct project modules whose code ran), ``crossings`` (distinct caller -> callee module
edges whose two modules are in different groups: ``spec.core``, ``spec.kit``, ``impl.study``, ...) and
``bounces`` (group pairs crossed in both directions). Child processes (the stress workers, strace's
driver, the crash reader) are not followed: the figures are this process's path only.

Not measured: time (a path's cost is in the benchmarks), or calls that do not cross a module.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GROUP_DEPTH = {"spec": 3, "impl": 3, "reference": 2, "adapters": 2}


def _group(module: str) -> str:
    parts = module.split(".")[1:]
    return ".".join(parts[: GROUP_DEPTH.get(parts[0], 2) - 1]) if parts else module


class _Edges:
    def __init__(self) -> None:
        self.modules: set[str] = set()
        self.edges: set[tuple[str, str]] = set()

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        if not callee.startswith("capture_ledger."):
            return
        self.modules.add(callee)
        caller_frame = frame.f_back
        while caller_frame is not None:
            caller = caller_frame.f_globals.get("__name__", "")
            if caller.startswith("capture_ledger."):
                if caller != callee:
                    self.edges.add((caller, callee))
                return
            caller_frame = caller_frame.f_back

    def figures(self) -> dict[str, Any]:
        crossing = {(a, b) for a, b in self.edges if _group(a) != _group(b)}
        pairs = {(_group(a), _group(b)) for a, b in crossing}
        bounces = sorted({tuple(sorted(p)) for p in pairs if (p[1], p[0]) in pairs})
        return {
            "modules": len(self.modules),
            "crossings": len(crossing),
            "group_pairs": sorted(f"{a} -> {b}" for a, b in pairs),
            "bounces": [f"{a} <-> {b}" for a, b in bounces],
        }


def _traced(run: Callable[[], object]) -> dict[str, Any]:
    edges = _Edges()
    threading.setprofile(edges.hook)
    sys.setprofile(edges.hook)
    try:
        run()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return edges.figures()


def _main(argv: list[str]) -> int:
    from capture_ledger.impl.cli.main import main

    return main(argv)


def _retire() -> None:
    from capture_ledger.impl import FileLineageStore, RolloutControlClient, create_app

    try:
        from capture_ledger.impl.simulate import ServerThread
    except ImportError:  # the layout before the test servers moved
        from capture_ledger.impl.http.serving import ServerThread  # type: ignore[attr-defined,no-redef]
    with tempfile.TemporaryDirectory() as directory:
        store = FileLineageStore(directory)
        store.record("r1", {"model_call_id": "m1"})
        with ServerThread(create_app(store, auth_token="t")) as server:
            client = RolloutControlClient(server.url, auth_token="t", timeout=30.0)
            assert client.retire(["r1"]) == {"removed": ["r1"], "absent": []}
        store.close()


PATHS: dict[str, Callable[[], object]] = {
    "retire": _retire,
    "verify": lambda: _main(["verify", "--handles", "1"]),
    "stress": lambda: _main(
        ["stress", "examples.directory_ledger:open_ledger", "--processes", "2", "--ops", "20", "--seed", "1"]
    ),
    "crash": lambda: _main(
        ["crash", "--target", "examples.directory_ledger:open_ledger", "--workload", "record-new"]
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", metavar="PATH", help=f"some of {', '.join(PATHS)} (default: all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    unknown = [p for p in args.paths if p not in PATHS]
    if unknown:
        parser.error(f"unknown paths {unknown}; choose from {', '.join(PATHS)}")
    os.chdir(ROOT)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("CAPTURE_LEDGER_PROFILE", "ci")
    results = {}
    for name in args.paths or PATHS:
        with contextlib.redirect_stdout(io.StringIO()):  # the commands' own output is not the figures
            results[name] = _traced(PATHS[name])
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for name, found in results.items():
            print(f"{name}: {found['modules']} modules, {found['crossings']} crossings between groups")
            for bounce in found["bounces"]:
                print(f"  bounces {bounce}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
