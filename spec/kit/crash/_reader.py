"""Reading crash images back through the protocol, in a child process of their own (SPEC.md §Crash,
R-CRASH-1..4, R-STATE-3; docs/crash-target.md §Reading an image back).

``TargetReader`` starts ``python -m capture_ledger.spec.kit.crash._reader``, a long-lived child that imports
the target's factory once and then, for each image it is sent, materializes it into a fresh directory (on
``/dev/shm`` when there is one: images need no durability), opens a **fresh handle** on it through the
factory, reads every rollout ID through the protocol — ``manifest``, ``has_rows`` and ``admit`` where the
ledger has them — closes the handle and removes the directory. A fresh directory per image keeps whatever a
ledger caches by path or by directory inode from one image to the next; no handle outlives its image. What
the target does — raise when opened, raise or return nonsense when read, hang — is part of the ``Reading``,
never an exception: a read that takes longer than the budget kills the child (``Reading.hung``), a child
that dies is noted (``Reading.died``); either way the next image gets a new child.

Requests and answers are length-prefixed pickles on the child's standard input and output (the child is our
own program). ``probe_operations`` asks a fresh handle on an empty directory which protocol methods it has.

Not guaranteed: that a target leaves nothing behind outside its directory (its module-level state lives as
long as the child), or that a child killed after a hang released what it held.
"""

from __future__ import annotations

import os
import pickle
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capture_ledger.spec.crash.durability import DiskImage

__all__ = ["BATCH", "READ_BUDGET", "IdReading", "Reading", "TargetReader", "main"]

#: Seconds one image may take to be read back before it counts as a hang.
READ_BUDGET = 10.0
#: Images sent to the child in one request.
BATCH = 64
_PROBE_CALL = "crash-probe"
_METHODS = ("record", "record_failure", "admit", "manifest", "has_rows", "retire", "delete")


@dataclass(kw_only=True, frozen=True, slots=True)
class IdReading:
    """One rollout ID read back: each call's outcome as ``("ok", value)``, ``("retired",)`` (it raised
    ``RolloutRetiredError``) or ``("raised", text)``; ``None`` when the ledger has no such method. A
    manifest's value is ``(records as canonical JSON, failures as (model_call_id, reason))``; admit's is
    whether it admitted."""

    manifest: tuple[Any, ...]
    has_rows: tuple[Any, ...] | None
    admit: tuple[Any, ...] | None


@dataclass(kw_only=True, frozen=True, slots=True)
class Reading:
    """What a fresh handle read from one image: per ID, or why nothing could be read (``opened``: the
    factory raised; ``hung``; ``died``)."""

    ids: tuple[tuple[str, IdReading], ...] = ()
    opened: str | None = None
    hung: str | None = None
    died: str | None = None
    closed: str | None = None

    @property
    def unreadable(self) -> str | None:
        """Why the image could not be read at all, or ``None``."""
        if self.opened is not None:
            return f"opening the ledger raised {self.opened}"
        return self.hung or self.died


# ------------------------------------------------------------------------------------------ the child
def _settle(value: Any, runner: Any) -> Any:
    import inspect

    if not inspect.isawaitable(value):
        return value

    async def wait() -> Any:
        return await value

    return runner.run(wait())


def _call(method: Any, runner: Any, *args: Any) -> tuple[Any, ...]:
    from capture_ledger.spec.core.errors import RolloutRetiredError

    try:
        return ("ok", _settle(method(*args), runner))
    except RolloutRetiredError:
        return ("retired",)
    except Exception as error:
        return ("raised", f"{type(error).__name__}: {error}")


def _read_id(ledger: Any, rid: str, runner: Any) -> IdReading:
    from capture_ledger.spec.core.rows import canonical_json

    manifest = _call(ledger.manifest, runner, rid)
    if manifest[0] == "ok":
        try:
            value = manifest[1]
            records = tuple(canonical_json(r) for r in value["records"])
            failures = tuple((str(f["model_call_id"]), str(f["reason"])) for f in value["failures"])
            manifest = ("ok", (records, failures))
        except Exception as error:
            manifest = ("raised", f"the manifest is not a Manifest ({type(error).__name__}: {error})")
    has_rows = _call(ledger.has_rows, runner, rid) if callable(getattr(ledger, "has_rows", None)) else None
    admit = None
    if callable(getattr(ledger, "admit", None)):
        admit = _call(ledger.admit, runner, rid, _PROBE_CALL)
        if admit[0] == "ok":
            admit = ("ok", admit[1] is not None)
    return IdReading(manifest=manifest, has_rows=has_rows, admit=admit)


def _materialize(directory: Path, image: DiskImage) -> None:
    directory.mkdir()
    for name in image.directories:
        (directory / name).mkdir(parents=True, exist_ok=True)
    for name, data in image.files:
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _serve(
    factory: Any, options: dict[str, Any], directory: Path, image: DiskImage, ids: Sequence[str]
) -> Reading:
    import asyncio

    _materialize(directory, image)
    runner = asyncio.Runner()
    try:
        try:
            ledger = _settle(factory(directory, **options), runner)
        except Exception as error:
            return Reading(opened=f"{type(error).__name__}: {error}")
        readings = tuple((rid, _read_id(ledger, rid, runner)) for rid in ids)
        closed = None
        close = getattr(ledger, "close", None)
        if callable(close):
            try:
                _settle(close(), runner)
            except Exception as error:
                closed = f"{type(error).__name__}: {error}"
        return Reading(ids=readings, closed=closed)
    finally:
        runner.close()
        shutil.rmtree(directory, ignore_errors=True)


def _send(stream: Any, value: object) -> None:
    data = pickle.dumps(value)
    stream.write(len(data).to_bytes(8, "little") + data)
    stream.flush()


def _exactly(stream: Any, size: int) -> bytes | None:
    """``size`` bytes from ``stream`` (a pipe may return fewer per read); ``None`` at its end."""
    found = bytearray()
    while len(found) < size:
        chunk = stream.read(size - len(found))
        if not chunk:
            return None
        found += chunk
    return bytes(found)


def _receive(stream: Any) -> Any:
    head = _exactly(stream, 8)
    body = None if head is None else _exactly(stream, int.from_bytes(head, "little"))
    return None if body is None else pickle.loads(body)


def main() -> int:
    """The child: serve readings until the parent closes standard input."""
    from capture_ledger.spec.kit._targets import load_target

    inbox, outbox = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a ledger's prints must not reach the answers
    setup = _receive(inbox)
    try:
        factory = load_target(setup["target"])
    except Exception as error:
        _send(outbox, {"error": f"{type(error).__name__}: {error}"})
        return 3
    _send(outbox, {"ready": True})
    base = Path(setup["base"])
    count = 0
    while (request := _receive(inbox)) is not None:
        count += 1
        if request == "probe":
            _send(outbox, _probe(factory, setup["options"], base, count))
            continue
        images, ids = request
        for image in images:  # one answer per image, as soon as it is read
            count += 1
            _send(outbox, _serve(factory, setup["options"], base / f"image-{count}", image, ids))
    return 0


def _probe(factory: Any, options: dict[str, Any], base: Path, count: int) -> list[str] | str:
    import asyncio

    directory = base / f"probe-{count}"
    directory.mkdir()
    runner = asyncio.Runner()
    try:
        ledger = _settle(factory(directory, **options), runner)
        found = [name for name in _METHODS if callable(getattr(ledger, name, None))]
        close = getattr(ledger, "close", None)
        if callable(close):
            _settle(close(), runner)
        return found
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    finally:
        runner.close()
        shutil.rmtree(directory, ignore_errors=True)


# ----------------------------------------------------------------------------------------- the parent
def _scratch_base() -> Path:
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="capture-ledger-images-", dir=base))


class TargetReader:
    """Reads images with fresh handles in a child process (see the module docstring).

    Args:
        target: the factory, ``module:callable``.
        options: keyword arguments for the factory.
        cwd: the working directory the target imports from.
        budget: seconds one image may take.

    ``reads`` counts images read, ``restarts`` children started after a hang or a death.

    Raises:
        RuntimeError: (from ``start``) the child could not import the factory.
    """

    def __init__(
        self,
        target: str,
        options: dict[str, Any] | None = None,
        *,
        cwd: Path | None = None,
        budget: float = READ_BUDGET,
    ) -> None:
        self.target = target
        self.options = dict(options or {})
        self.cwd = cwd
        self.budget = budget
        self.base = _scratch_base()
        self.cache: dict[tuple[DiskImage, tuple[str, ...]], Reading] = {}
        self.reads = 0
        self.restarts = 0
        self.seconds = 0.0
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the child if none runs.

        Raises:
            RuntimeError: the child could not import the factory.
        """
        if self._process is not None and self._process.poll() is None:
            return
        process = subprocess.Popen(
            [sys.executable, "-m", "capture_ledger.spec.kit.crash._reader"],
            bufsize=0,  # unbuffered: select() on the pipe must see every answer not yet taken
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self.cwd,
        )
        assert process.stdin is not None and process.stdout is not None
        _send(process.stdin, {"target": self.target, "options": self.options, "base": str(self.base)})
        answer = _receive(process.stdout)
        if not isinstance(answer, dict) or "ready" not in answer:
            process.kill()
            process.wait()
            why = answer.get("error") if isinstance(answer, dict) else "the reader exited"
            raise RuntimeError(f"cannot load {self.target}: {why}")
        self._process = process

    def _ask(self, request: object) -> tuple[Any, str | None]:
        """Send ``request`` and wait for the answer; ``(None, why)`` after a hang or a death."""
        self.start()
        process = self._process
        assert process is not None and process.stdin is not None
        try:
            _send(process.stdin, request)
        except (BrokenPipeError, OSError):
            return None, self._lost(f"the reader died (exit {process.poll()})")
        return self._answer(process)

    def _lost(self, why: str) -> str:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
        self._process = None
        self.restarts += 1
        return why

    def operations(self) -> list[str]:
        """The protocol methods a fresh handle has.

        Raises:
            RuntimeError: the factory could not be loaded, raised, or hung.
        """
        answer, why = self._ask("probe")
        if why is not None or isinstance(answer, str):
            raise RuntimeError(f"cannot open {self.target} on an empty directory: {why or answer}")
        return list(answer)

    def read(self, image: DiskImage, ids: Sequence[str]) -> Reading:
        """What a fresh handle reads from ``image`` for ``ids`` (cached by image and IDs)."""
        return self.read_many([image], ids)[0]

    def read_many(self, images: Sequence[DiskImage], ids: Sequence[str]) -> list[Reading]:
        """What fresh handles read from each of ``images`` for ``ids``: the images not cached yet go to the
        child in batches of ``BATCH`` (one round trip each); a batch that hangs or kills the child is read
        again one image at a time, so that the hang or the death is charged to its own image."""
        key = tuple(ids)
        missing = list(dict.fromkeys(i for i in images if (i, key) not in self.cache))
        for first in range(0, len(missing), BATCH):
            self._read_batch(missing[first : first + BATCH], key)
        return [self.cache[image, key] for image in images]

    def _read_batch(self, batch: list[DiskImage], ids: tuple[str, ...]) -> None:
        """Send ``batch`` in one request and take its answers one by one, each within the budget; after a
        hang or a death the image that caused it is charged with it and the rest go to a new child."""
        started = time.perf_counter()
        self.start()
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None
        try:
            _send(process.stdin, (batch, ids))
        except (BrokenPipeError, OSError):
            why: str | None = self._lost(f"the reader died (exit {process.poll()})")
            answered = 0
        else:
            answered, why = 0, None
            for image in batch:
                answer, why = self._answer(process)
                if why is not None:
                    break
                self.cache[image, ids] = answer
                answered += 1
        self.seconds += time.perf_counter() - started
        self.reads += answered
        if why is not None:
            self.reads += 1
            self.cache[batch[answered], ids] = Reading(hung=why) if "answer" in why else Reading(died=why)
            rest = batch[answered + 1 :]
            if rest:
                self._read_batch(rest, ids)

    def _answer(self, process: subprocess.Popen[bytes]) -> tuple[Any, str | None]:
        """The child's next answer within the budget; ``(None, why)`` after a hang or a death."""
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], self.budget)
        if not ready:
            return None, self._lost(
                f"the ledger did not answer within {self.budget:g} s (a hang when reopened)"
            )
        answer = _receive(process.stdout)
        if answer is None:
            return None, self._lost(f"the reader died while reading (exit {process.wait()})")
        return answer, None

    def close(self) -> None:
        """Stop the child and remove the scratch directory."""
        if self._process is not None:
            assert self._process.stdin is not None
            try:
                self._process.stdin.close()
                self._process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
            self._process = None
        shutil.rmtree(self.base, ignore_errors=True)


if __name__ == "__main__":  # pickles must name the module, not __main__: run its importable copy
    from capture_ledger.spec.kit.crash._reader import main as run_child

    sys.exit(run_child())
