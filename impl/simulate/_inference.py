"""The fake inference worker of the simulation: a model route served by the same workers, and written
through the same ledger handle, as the control routes (R-ADMIT-1..2, R-WRITE-1..6, R-STORE-7).

In a model server the capture happens in the server's own worker processes, which also serve the control
routes. ``extend(app, ledger)`` (given to ``capture-ledger serve --extend``) adds one route to the app that
``create_app`` built in each worker, ``POST /simulate/inference``, whose handler does what Gym's capture
path does for one model call:

1. ``admit(rollout_id, model_call_id)``: ``None`` when the rollout is fenced, and then nothing is
   captured (the call is answered, as a model server answers it, but not recorded);
2. the model's work (``generate_ms`` of sleep, default none);
3. ``record(rollout_id, row)`` with a row shaped like Gym's custody rows (``custody_row``: 22 fields, six
   of them SHA-256 digests, about 980 bytes of canonical JSON), or ``record_failure`` for a failed call.

Both calls go through ``app.state.metrics.instrument(ledger)``: the ledger handle the control routes use,
timed into the same registry, so a retire served by this worker drops this worker's cached rows, and
``/metrics`` shows ``record`` latencies. The answer reports the ``record`` call's own duration, measured
in the thread that runs it (``record_ms``), so the driver gets every call's latency, not a histogram.

A call with ``hold: true`` plays an abandoned agent's late write: the handler admits, streams a first
line ``{"admitted": ...}``, then waits until the rollout has no rows any more (the framework removed
it: ``has_rows`` is false or raises ``RolloutRetiredError``), and only then records, and streams the
result. The write is then deterministically late: discarded behind a retire's fence (R-WRITE-4), or a
re-created ledger after a delete. The wait is bounded (``HOLD_TIMEOUT``); a timed-out hold records anyway
and says so.

Not guaranteed: anything of a real model (no tokens, no generation); Gym's exact row semantics (the
digests are hashes of the row's own identity, not of a conversation).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from capture_ledger.spec.core.errors import RolloutRetiredError
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr
from starlette.concurrency import run_in_threadpool

__all__ = ["HOLD_TIMEOUT", "INFERENCE_ROUTE", "InferenceRequest", "custody_row", "extend"]

#: The fake model route (outside the control prefix; the bearer token still applies to it).
INFERENCE_ROUTE = "/simulate/inference"
#: Seconds a held call waits for its rollout's removal before it records anyway.
HOLD_TIMEOUT = 120.0
#: The reason a simulated failed call records.
FAILURE_REASON = "simulated: the model call failed"


class InferenceRequest(BaseModel):
    """One model call of a rollout, as the agent sends it."""

    model_config = ConfigDict(extra="forbid")
    rollout_id: StrictStr
    model_call_id: StrictStr
    #: The call's position in its rollout (0, 1, ...); the row's token lengths follow from it.
    index: StrictInt = 0
    #: The previous call of the rollout, if any.
    parent_call_id: StrictStr | None = None
    #: Record a failure instead of a row.
    fail: StrictBool = False
    #: Wait for the rollout's removal between admission and the write (an abandoned agent's late write).
    hold: StrictBool = False
    #: Milliseconds of simulated model work between admission and the write.
    generate_ms: StrictInt = 0


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()


def custody_row(
    rollout_id: str, model_call_id: str, *, index: int, staging_key: str, parent_call_id: str | None
) -> dict[str, Any]:
    """A row shaped like the custody rows Gym's file-backed lineage store appends (22 fields).

    Args:
        rollout_id: the rollout.
        model_call_id: the call.
        index: the call's position in the rollout.
        staging_key: what admission returned.
        parent_call_id: the previous call of the rollout, if any.

    Returns:
        The row: identity and parent, token lengths, six SHA-256 digests, the staging chain, fingerprints.
    """
    parent = parent_call_id
    prev_len = 512 * index
    delta_len = 384 + 64 * (index % 3)
    digest = _digest("digest", rollout_id, model_call_id)
    chain = [staging_key] if parent is None else [f"{rollout_id}/{parent}", staging_key]
    return {
        "model_call_id": model_call_id,
        "staging_key": staging_key,
        "parent_call_id": parent,
        "weight_version": 7,
        "prev_len": prev_len,
        "delta_len": delta_len,
        "cum_len": prev_len + delta_len,
        "digest": digest,
        "staging_digest": digest,
        "extras_digest": _digest("extras", rollout_id, model_call_id),
        "mode": "text",
        "admitted_at": None,
        "staging_chain": chain,
        "chain_hash": _digest("chain", *chain),
        "cumulative_hash": _digest("cumulative", rollout_id, index),
        "response_id": f"resp-{_digest('response', rollout_id, model_call_id)[:24]}",
        "output_fingerprint": _digest("output", rollout_id, model_call_id)[:32],
        "continuation_fingerprint": None,
        "fingerprint_version": 2,
        "fingerprint": _digest("fingerprint", rollout_id, model_call_id),
        "context_len": 2 * index + 1,
        "context_digest": _digest("context", rollout_id, index),
    }


def _capture(writer: Any, body: InferenceRequest, *, admitted: str | None = None) -> dict[str, Any]:
    """Admit (unless ``admitted`` says the call already was) and write, in the calling thread.

    One thread hop per model call: admission and the write run together, as the capture path of one
    model call does. The durations are measured around each call alone.
    """
    start = time.perf_counter()
    key = admitted if admitted is not None else writer.admit(body.rollout_id, body.model_call_id)
    admit_ms = (time.perf_counter() - start) * 1e3
    if key is None:
        return {"admitted": False, "admit_ms": admit_ms}
    start = time.perf_counter()
    if body.fail:
        writer.record_failure(body.rollout_id, body.model_call_id, FAILURE_REASON)
    else:
        row = custody_row(
            body.rollout_id,
            body.model_call_id,
            index=body.index,
            staging_key=key,
            parent_call_id=body.parent_call_id,
        )
        writer.record(body.rollout_id, row)
    record_ms = (time.perf_counter() - start) * 1e3
    return {
        "admitted": True,
        "staging_key": key,
        "admit_ms": admit_ms,
        "failed": body.fail,
        "record_ms": record_ms,
    }


def extend(app: FastAPI, ledger: Any) -> None:
    """Add the fake inference route to ``app`` (the ``--extend`` hook of ``capture-ledger serve``).

    Args:
        app: the app ``create_app`` built for this worker.
        ledger: the worker's ledger handle (the one the control routes use).
    """
    writer = app.state.metrics.instrument(ledger)

    async def removed(rollout_id: str) -> bool:
        try:
            return not await run_in_threadpool(ledger.has_rows, rollout_id)
        except RolloutRetiredError:
            return True

    async def held(body: InferenceRequest, key: str) -> AsyncIterator[bytes]:
        yield json.dumps({"admitted": True, "staging_key": key}).encode() + b"\n"
        deadline = time.monotonic() + HOLD_TIMEOUT
        pause = 0.01
        while not await removed(body.rollout_id):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(pause)
            pause = min(0.2, pause * 2)
        timed_out = time.monotonic() > deadline
        result = await run_in_threadpool(_capture, writer, body, admitted=key)
        yield json.dumps({**result, "hold_timed_out": timed_out}).encode() + b"\n"

    @app.post(INFERENCE_ROUTE, include_in_schema=False)
    async def infer(body: InferenceRequest) -> Any:
        if body.hold:  # admit now, write once the rollout was removed
            key = await run_in_threadpool(writer.admit, body.rollout_id, body.model_call_id)
            if key is None:
                return JSONResponse({"admitted": False})
            return StreamingResponse(held(body, key), media_type="application/x-ndjson")
        if body.generate_ms > 0:  # the model's work comes between admission and the write
            key = await run_in_threadpool(writer.admit, body.rollout_id, body.model_call_id)
            if key is None:
                return JSONResponse({"admitted": False})
            await asyncio.sleep(body.generate_ms / 1e3)
            return JSONResponse(await run_in_threadpool(_capture, writer, body, admitted=key))
        return JSONResponse(await run_in_threadpool(_capture, writer, body))
