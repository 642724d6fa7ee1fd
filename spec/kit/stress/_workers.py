"""Worker processes for ``capture-ledger stress --processes`` and ``--kill`` (SPEC.md R-CONC-1, R-KIT-4,
R-KIT-12, R-CRASH-1..4).

``python -m capture_ledger.spec.kit.stress._workers TARGET [KEY=VALUE ...]`` is one worker: it loads the
target once, then reads one JSON command per line on standard input. A ``round`` command names the
workspace, the seed, the round, the mix's settings and which process it is: the worker draws the round's
scenes (every process draws the same ones, ``mix.draw_round``), runs its own clients' columns (its threads)
on its own handles (``running.run_round``), and appends each call to a JSON-lines journal as it begins and
again when it ends (so a killed worker's journal reads as its history, the call in flight unreturned), then
answers ``done``. A ``read`` command opens a fresh handle on a workspace and reads every rollout ID back
(``manifest``, ``has_rows``, ``admit`` where present), one JSON line per call, for the kill mode.
``kill_after`` in a ``round`` command makes the worker SIGKILL itself a seeded delay (up to 3 ms) after its
``kill_after``-th call began, unless the round ends first; the parent then ends the round for the others
at the next scene (``stop`` instead of ``go``), so the read-back sees what the kill left.

Every worker stamps calls with ``time.monotonic_ns`` (CLOCK_MONOTONIC, one clock for the machine), so the
parent merges the journals into one history. The processes start every scene together: when its own
threads have met at a scene's barrier, a worker prints ``scene`` and waits for the parent's ``go``, which
the parent sends once every live worker has printed ``scene`` (or ``done``, or died).

Not guaranteed: that a kill lands inside a call (it is a timer, not a hook into the ledger).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capture_ledger.spec.concurrency.history import event_from_json, event_to_json
from capture_ledger.spec.kit.stress._mix import MixSettings, draw_round
from capture_ledger.spec.kit.stress._running import Call, run_round

__all__ = ["call_from_json", "call_to_json", "main", "read_journal"]


def call_to_json(call: Call) -> str:
    """One JSON line for a call: ``event_to_json``'s object, ``raised``, ``ended``, ``hung``, ``handle``."""
    data = json.loads(event_to_json(call.event))
    data.update(raised=call.raised, ended=call.ended, hung=call.hung, handle=call.handle)
    return json.dumps(data, sort_keys=True)


def call_from_json(line: str) -> Call:
    """The call of a ``call_to_json`` line.

    Raises:
        ValueError: not such a line.
    """
    data = json.loads(line)
    event = event_from_json(line)
    ended = data.get("ended")
    return Call(
        event=event,
        raised=str(data.get("raised") or ""),
        ended=float(ended) if ended is not None else None,
        hung=bool(data.get("hung")),
        handle=str(data.get("handle") or ""),
    )


def read_journal(path: Path) -> list[Call]:
    """A worker's journal as calls: the ended line of a call replaces its begun line; a torn last line is
    skipped (the worker was killed while writing it)."""
    if not path.exists():
        return []
    found: dict[tuple[int, float], Call] = {}
    for line in path.read_text(encoding="utf-8").split("\n")[:-1]:
        if line.strip():
            call = call_from_json(line)
            found[(call.event.client, call.event.invoked)] = call
    return list(found.values())


class _Journal:
    """Appends calls to a file, one ``write`` per line (a killed process keeps the page cache)."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def __call__(self, call: Call) -> None:
        with self._lock:
            os.write(self._fd, (call_to_json(call) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def _killer(after: int, delay_us: int, timers: list[threading.Timer]) -> Callable[[Call], None]:
    begun = [0]
    lock = threading.Lock()

    def on_call(call: Call) -> None:
        if call.event.returned is not None or call.raised:
            return
        with lock:
            begun[0] += 1
            if begun[0] != after:
                return
        timer = threading.Timer(delay_us / 1e6, lambda: os.kill(os.getpid(), signal.SIGKILL))
        timer.daemon = True
        timers.append(timer)
        timer.start()

    return on_call


def _round(factory: Callable[[Path], Any], command: dict[str, Any]) -> None:
    settings = MixSettings(**command["settings"])
    scenes = draw_round(settings, command["seed"], command["round"])
    threads, process = command["threads"], command["process"]
    mine = [scene[process * threads : (process + 1) * threads] for scene in scenes]
    journal = _Journal(Path(command["journal"]))
    hooks: list[Callable[[Call], None]] = [journal]
    timers: list[threading.Timer] = []
    if command.get("kill_after"):
        hooks.append(_killer(command["kill_after"], command.get("kill_delay_us", 300), timers))

    def observe(call: Call) -> None:
        for hook in hooks:
            hook(call)

    def meet() -> bool:
        # Every process's clients start each scene together: tell the parent, wait for its go (or stop).
        sys.stdout.write("scene\n")
        sys.stdout.flush()
        return sys.stdin.readline().strip() == "go"

    try:
        run_round(
            factory,
            Path(command["workspace"]),
            mine,
            handles=command["handles"],
            budget=command["budget"],
            client_base=process * threads,
            observer=observe,
            between_scenes=meet,
        )
    finally:
        for timer in timers:
            timer.cancel()  # the round ended first: this worker is not killed after it
        journal.close()


def _read(factory: Callable[[Path], Any], command: dict[str, Any]) -> list[str]:
    """Read every ID back through a fresh handle: one ``call_to_json`` line per call."""
    from capture_ledger.spec.core.model import Admit, HasRows, Operation, ReadManifest

    ops: list[Operation] = []
    for rid in command["ids"]:
        ops += [ReadManifest(rid), HasRows(rid)]
        if "admit" in command["operations"]:
            ops.append(Admit(rid, "read-back"))
    scenes = [((op,),) for op in ops]  # one client, one call per scene: in order
    record = run_round(factory, Path(command["workspace"]), scenes, handles=1, budget=command["budget"])
    return [call_to_json(call) for call in record.calls]


def main(argv: list[str] | None = None) -> int:
    """Serve commands until standard input ends (see the module docstring)."""
    from capture_ledger.spec.kit._targets import bind_options, load_target, parse_options

    arguments = sys.argv[1:] if argv is None else argv
    target, pairs = arguments[0], arguments[1:]  # the pairs were checked by ``stress`` (parse_options)
    logging.getLogger("capture_ledger").addHandler(logging.NullHandler())  # discarded writes warn, by design
    options = parse_options(pairs)
    factory = bind_options(load_target(target), options)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        command = json.loads(line)
        if command["kind"] == "round":
            _round(factory, command)
            out.write("done\n")
        else:
            for answer in _read(factory, command):
                out.write(answer + "\n")
            out.write("done\n")
        out.flush()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
