"""NeMo Gym 0.7.0's capture ledgers behind the ``CaptureLedger`` protocol (SPEC.md §Protocol; docs/gym.md).

``open_gym_file_store(workspace)`` opens Gym's ``FileLineageStore`` on the workspace directory;
``open_gym_memory_store(workspace)`` opens a handle on Gym's ``InMemoryLineageStore``, one store per
workspace shared by every handle opened on it (the workers of one model server in one process), made on
the first open and closed (Gym's ``close()`` wipes every ledger of it) when the last handle closes.

The adapter has exactly the four ledger methods Gym has, ``record``, ``record_failure``, ``manifest`` and
``has_rows``, as coroutines (Gym's are), plus ``close``; no ``admit``, ``retire`` or ``delete`` (Gym has no
fence), so the kit judges the requirements those four reach. It translates only:

* our row into Gym's commit: the row as ASCII canonical JSON (sorted keys, so that Gym's "identical" is
  R-WRITE-3's), carried in ``CallRecord.response_id`` (a free string Gym stores and returns unchanged);
  Gym's own ``model_call_id`` and ``staging_key`` columns get the row's (a row without a staging key gets
  ``f"{rollout_id}/{model_call_id}"``, what Gym's ``staging_key`` computes, without its checks); fixed
  valid custody columns (a text-mode call of one token, digests the SHA-256 of the carried text); empty
  request and response items. Gym's pydantic models validate these columns, and their
  ``ValidationError`` (a ``ValueError``) passes through;
* a row that no commit can carry losslessly (not a mapping; a key that is not a ``str``; a value JSON would
  convert or cannot write: a ``tuple``, ``bytes``, a subclass of a JSON type, NaN or an infinity) is refused
  by the adapter with ``TypeError`` or ``ValueError`` before Gym sees it;
* Gym's manifest into ours: each record's carried row decoded, each failure's call and reason, and the
  rollout ID; Gym's other columns and ``schema_version`` are dropped.

Everything else is Gym's: which rollout IDs it accepts and the exception it raises for the others, its
conflict error (a plain ``ValueError``), that ``record_failure`` validates nothing, and that a record after
a failure of the same call conflicts. Gym's import replaces ``builtins.print``, moves the current directory
to the end of ``sys.path`` and gives the root logger a handler, so it happens inside the factories, never
at import; run Gym verifications in a child process (``capture-ledger verify``).

Not guaranteed: anything about Gym versions other than 0.7.0; the key order of a returned row (Gym's
carrier is canonical, so rows come back with sorted keys; equal as dicts).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from capture_ledger.spec.core.protocol import Manifest

__all__ = ["GymLedger", "open_gym_file_store", "open_gym_memory_store", "to_commit", "to_manifest"]

#: The row's keys that are Gym's own columns: Gym validates them, the adapter does not.
_GYM_COLUMNS = ("model_call_id", "staging_key")
_SCALARS = (str, int, bool, type(None))


def _refuse_unencodable(value: object, path: str) -> None:
    """Raise unless ``value`` is exactly JSON, so that the carried text is the row itself."""
    if type(value) in _SCALARS:
        return
    if type(value) is float:
        if not math.isfinite(value):
            raise ValueError(f"row value at {path} is {value!r}: no Gym commit can carry it (JSON has none)")
        return
    if type(value) is list:
        for index, item in enumerate(value):
            _refuse_unencodable(item, f"{path}[{index}]")
        return
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError(f"row key {key!r} at {path} is not a str: no Gym commit can carry it")
            _refuse_unencodable(item, f"{path}.{key}")
        return
    raise TypeError(
        f"row value at {path} is a {type(value).__name__}: JSON would convert it, so no Gym commit carries it"
    )


def to_commit(rollout_id: object, row: object) -> Any:
    """Gym's ``CaptureLedgerCommit`` that carries ``row`` for ``rollout_id``.

    Raises:
        TypeError, ValueError: the row cannot be carried (the adapter), or Gym's models refuse a column
            (pydantic's ``ValidationError``, a ``ValueError``; Gym's ``staging_key`` helper).
    """
    from nemo_gym.token_id_capture.staging.records import CallRecord, CaptureLedgerCommit

    if not isinstance(row, Mapping):
        raise TypeError(
            f"a row must be a mapping (a JSON object) to be carried in a Gym commit, not {type(row).__name__}"
        )
    plain = dict(row)
    _refuse_unencodable({k: v for k, v in plain.items() if k not in _GYM_COLUMNS}, "row")
    text = json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    call = plain.get("model_call_id")
    key = plain.get("staging_key")
    record = CallRecord(
        model_call_id=call,
        parent_call_id=None,
        prev_len=0,
        delta_len=1,
        cum_len=1,
        weight_version=0,
        digest=digest,
        extras_digest=digest,
        # Gym's staging_key(rollout_id, call), without its checks: Gym's models and store do the checking.
        staging_key=f"{rollout_id}/{call}" if key is None else key,
        mode="text",
        chain_hash=digest,
        cumulative_hash=digest,
        response_id=text,
    )
    return CaptureLedgerCommit(rollout_id=rollout_id, record=record, request_items=[], response_items=[])


def to_manifest(manifest: Mapping[str, Any]) -> Manifest:
    """Our ``Manifest`` of Gym's: the carried rows, the failures, the rollout ID."""
    return {
        "rollout_id": manifest["rollout_id"],
        "records": [json.loads(record["response_id"]) for record in manifest["records"]],
        "failures": [
            {"model_call_id": failure["model_call_id"], "reason": failure["reason"]}
            for failure in manifest["failures"]
        ],
    }


class GymLedger:
    """One handle on a Gym store: its four ledger methods, as coroutines, with the translations above.

    Args:
        store: a ``FileLineageStore`` or ``InMemoryLineageStore``.
        release: what ``close`` does (``store.close()``, or giving back a shared store).
    """

    def __init__(self, store: Any, release: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.store = store
        self._release = release

    async def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        """Gym's ``record`` of the commit carrying ``row``."""
        await self.store.record(to_commit(rollout_id, row))

    async def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        """Gym's ``record_failure``, arguments unchanged."""
        await self.store.record_failure(rollout_id, model_call_id, reason)

    async def manifest(self, rollout_id: str) -> Manifest:
        """Gym's ``manifest``, translated (``to_manifest``)."""
        return to_manifest(await self.store.manifest(rollout_id))

    async def has_rows(self, rollout_id: str) -> bool:
        """Gym's ``has_rows``, unchanged."""
        found: bool = await self.store.has_rows(rollout_id)
        return found

    async def close(self) -> None:
        """Close this handle (see the factories)."""
        await self._release()


def open_gym_file_store(workspace: Path) -> GymLedger:
    """A handle on Gym's ``FileLineageStore(workspace)``; handles on one directory share its files, as
    Gym's workers do. ``close`` is Gym's (it clears the handle's resolver caches)."""
    from nemo_gym.token_id_capture.lineage import FileLineageStore

    store = FileLineageStore(workspace)
    return GymLedger(store, store.close)


_MEMORY_LOCK = threading.Lock()
#: workspace -> [the shared InMemoryLineageStore, handles open on it]
_MEMORY: dict[Path, list[Any]] = {}


def open_gym_memory_store(workspace: Path) -> GymLedger:
    """A handle on the ``InMemoryLineageStore`` of ``workspace``, shared by every handle opened on it.

    Gym's ``close()`` wipes every ledger of the store, so a handle's ``close`` only gives the store back;
    the last one to close calls Gym's ``close()`` and forgets the store.
    """
    from nemo_gym.token_id_capture.lineage import InMemoryLineageStore

    key = Path(workspace)
    with _MEMORY_LOCK:
        entry = _MEMORY.setdefault(key, [InMemoryLineageStore(), 0])
        entry[1] += 1
    store = entry[0]

    released = False

    async def release() -> None:
        nonlocal released
        if released:  # a handle gives the store back once, however often it is closed
            return
        released = True
        with _MEMORY_LOCK:
            entry[1] -= 1
            last = entry[1] == 0
            if last:
                _MEMORY.pop(key, None)
        if last:
            await store.close()

    return GymLedger(store, release)
