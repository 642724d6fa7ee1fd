"""Whatever a ledger does across examples is a verdict, never a crash of the kit (SPEC.md R-KIT-7, R-KIT-14;
docs/kit.md §Whatever the ledger does).

State that outlives an example, a resource the ledger exhausts, handles it never closes: the kit answers
with a ``LedgerVerdict`` naming a requirement, never ``KitError`` (``FlakyStrategyDefinition``, ``Flaky``).
The outside review's ledger is here as it was reported: the real ``FileLineageStore`` wrapped with a
per-handle manifest cache and no ``close()``, three handles, run by ``capture-ledger verify`` in a child
process whose descriptor limit is low enough that its unreleased handles would exhaust it within a few
examples (before the kit dropped its references at teardown, exit 2 ``FlakyStrategyDefinition``); it is in
the slow tier, and ``test_teardown_keeps_no_reference_to_a_handle`` is the fast tier's check of the cause.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import resource
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.reference import ReferenceLedger
from capture_ledger.spec.kit import PROFILES
from capture_ledger.spec.kit.sequential import conformance_machine, judge_ledger
from hypothesis import Phase, settings

SEARCH = settings(PROFILES["ci"], max_examples=60)
NO_SHRINK = settings(SEARCH, phases=[Phase.explicit, Phase.reuse, Phase.generate])
ROOT = Path(__file__).resolve().parents[3]


# ------------------------------------------------------------------------------------- exhaustion
class RecordRunsOutOfDescriptors(ReferenceLedger):
    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        raise OSError(24, "Too many open files")


class ManifestRunsOutOfMemory(ReferenceLedger):
    def manifest(self, rollout_id: str) -> Any:
        raise RuntimeError("could not read the manifest") from MemoryError()


@pytest.mark.parametrize(
    ("ledger", "resource_words"),
    [
        (RecordRunsOutOfDescriptors, "file descriptors of the process (EMFILE)"),
        (ManifestRunsOutOfMemory, "memory (MemoryError)"),  # found in the chain of causes
    ],
)
def test_an_exhausted_resource_is_reported_as_such_with_the_handles_open(
    ledger: type[ReferenceLedger], resource_words: str
) -> None:
    verdict = judge_ledger(lambda workspace: ledger(), settings=SEARCH)
    (broken,) = verdict.broken
    assert broken.requirement == "R-KIT-7"
    assert f"{resource_words} exhausted" in broken.message
    assert "1 handle(s) open in this example" in broken.message
    assert not broken.shrunk  # exhaustion builds up across examples: not re-run
    assert broken.counterexample.splitlines()[-1] == "state.teardown()"


class Counted(ReferenceLedger):
    """Followed by a weak reference: the kit must not keep it alive past its example."""


def test_teardown_keeps_no_reference_to_a_handle() -> None:
    """Without ``close``, a handle is released only when the last reference goes: the kit's must go at
    teardown (by reference counting alone, the cycle collector off), or its descriptors pile up."""
    machine: Any = conformance_machine(lambda workspace: Counted(), handles=2)
    state = machine()
    refs = [weakref.ref(handle) for handle in state._handles]
    state.first_rollout(rollout_id="a")
    state.every_known_rollout_reads_as_the_model_says()
    gc.disable()
    try:
        state.teardown()
        assert [ref() for ref in refs] == [None, None]
    finally:
        gc.enable()


# ------------------------------------------------------------------------------------ flakiness
_OPENED = itertools.count()


class OneBadHandle(ReferenceLedger):
    """The 5th handle this process opens reads every manifest without its records: state outliving an
    example, so the failing program passes when run again."""

    def __init__(self) -> None:
        super().__init__()
        self.bad = next(_OPENED) == 5

    def manifest(self, rollout_id: str) -> Any:
        found = super().manifest(rollout_id)
        return {**found, "records": []} if self.bad else found


_CALLS = itertools.count()


class DriftingHasRows(ReferenceLedger):
    """Every 97th ``has_rows`` call of the process answers ``False``: the same program fails at another
    step, or not at all, each time it runs."""

    def has_rows(self, rollout_id: str) -> bool:
        found = super().has_rows(rollout_id)
        return False if next(_CALLS) % 97 == 96 else found


@pytest.mark.parametrize("ledger", [OneBadHandle, DriftingHasRows])
def test_a_ledger_that_behaves_differently_on_one_program_gets_r_kit_14(
    ledger: type[ReferenceLedger],
) -> None:
    verdict = judge_ledger(lambda workspace: ledger(), settings=SEARCH)
    (broken,) = verdict.broken
    assert broken.requirement == "R-KIT-14", broken.message
    assert "Flaky" in broken.message and "SPEC.md R-KIT-14: " in broken.message
    assert not broken.shrunk
    # The failing run's program, as the machine ran it: it runs again (and may pass, which is the point).
    program = broken.counterexample.replace("open_ledger = ...", "open_ledger = factory  #")
    namespace: dict[str, Any] = {"factory": lambda workspace: ReferenceLedger()}
    exec(program, namespace)
    assert broken.steps >= 1


# ---------------------------------------------------------------------- the outside review's ledger
CACHED_STORE = '''
from capture_ledger.impl.store.file_store import FileLineageStore


class CachedStore:
    """A per-handle manifest cache, forgotten only on this handle's own writes; no close()."""

    def __init__(self, workspace):
        self._store = FileLineageStore(workspace)
        self._cache = {}

    def _forget(self, ids):
        for rollout_id in ids if isinstance(ids, (list, tuple)) else [ids]:
            if isinstance(rollout_id, str):
                self._cache.pop(rollout_id, None)

    def record(self, rollout_id, row):
        self._forget(rollout_id)
        return self._store.record(rollout_id, row)

    def record_failure(self, rollout_id, model_call_id, reason):
        self._forget(rollout_id)
        return self._store.record_failure(rollout_id, model_call_id, reason)

    def admit(self, rollout_id, model_call_id):
        return self._store.admit(rollout_id, model_call_id)

    def manifest(self, rollout_id):
        if rollout_id not in self._cache:
            self._cache[rollout_id] = self._store.manifest(rollout_id)
        return self._cache[rollout_id]

    def has_rows(self, rollout_id):
        return self._store.has_rows(rollout_id)

    def retire(self, rollout_ids):
        self._forget(rollout_ids)
        return self._store.retire(rollout_ids)

    def delete(self, rollout_ids):
        self._forget(rollout_ids)
        return self._store.delete(rollout_ids)


def open_cached(workspace):
    return CachedStore(workspace)
'''

#: Each store handle holds 65 descriptors: with three handles an example holds 195, so this limit leaves
#: room for the handles of about two examples besides the interpreter's own.
DESCRIPTOR_LIMIT = 600


def _verify_with_limit(
    tmp_path: Path, target: str, limit: int, *arguments: str
) -> subprocess.CompletedProcess[str]:
    def lower() -> None:  # in the child, before it runs anything
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))

    env = {**os.environ, "CAPTURE_LEDGER_PROFILE": "ci"}
    command = [sys.executable, "-m", "capture_ledger.impl.cli.main", "verify", target, "--json", *arguments]
    return subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=lower,
        check=False,
    )


@pytest.mark.slow  # three real store handles per example, shrunk: about a minute on a loaded machine
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs preexec_fn to lower the child's descriptor limit")
def test_the_reviews_cached_store_without_close_is_r_kit_4_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "cached_store.py").write_text(textwrap.dedent(CACHED_STORE), encoding="utf-8")
    done = _verify_with_limit(
        tmp_path, "cached_store:open_cached", DESCRIPTOR_LIMIT, "--handles", "3", "--max-examples", "30"
    )
    assert done.returncode == 1, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert [b["requirement"] for b in summary["broken"]] == ["R-KIT-4"], summary["broken"]
    assert "which made the change, reads it as the model says" in summary["broken"][0]["message"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs preexec_fn to lower the child's descriptor limit")
def test_a_ledger_leaking_a_descriptor_per_handle_is_told_it_exhausted_them(tmp_path: Path) -> None:
    target = "capture_ledger.reference.mutants:open_leaks_descriptor_per_handle"
    done = _verify_with_limit(tmp_path, target, 64, "--max-examples", "200")
    assert done.returncode == 1, done.stderr[-2000:]
    (broken,) = json.loads(done.stdout)["broken"]
    assert broken["requirement"] == "R-KIT-7"
    assert "EMFILE" in broken["message"] and "exhausted" in broken["message"]
    assert "closed by close()" in broken["message"]  # it has a close(), which closes nothing
    assert "a soft limit of 64" in broken["message"]
