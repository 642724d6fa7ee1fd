"""The conformance kit against ``FileLineageStore`` (SPEC.md R-KIT-1..6, R-STORE-7).

Three handles on one directory act as three workers of one model server, and the kit's ``reopen`` rule
replaces a handle mid-run, as a restarted worker would; with one handle the kit opens a fresh directory
per example. The active profile is ``ci`` unless CAPTURE_LEDGER_PROFILE says otherwise (tests/conftest.py).

Testing the tests: store variants with one guard switched off must be rejected by the same kit.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from capture_ledger.impl.store.file_store import FileLineageStore, open_file_store
from capture_ledger.impl.study import StoreVariant
from capture_ledger.spec.kit.sequential import check_ledger
from hypothesis import Phase, settings


def test_file_store_conforms_with_three_handles() -> None:
    check_ledger(open_file_store, handles=3)


def test_file_store_conforms_with_one_handle() -> None:
    check_ledger(open_file_store, handles=1)


def _open_variant(variant: StoreVariant, workspace: Path) -> FileLineageStore:
    return FileLineageStore(workspace, ordering=variant.ordering(), stripes=4)


@pytest.mark.parametrize(
    ("guard", "handles"),
    [
        # Without the fence lookup, a late write after retire starts a new ledger (R-WRITE-4, R-CONC-2).
        ("fence_lookup_on_write", 1),
        # Without the admission check, a retired rollout is admitted for capture (R-ADMIT-2).
        ("admit_checks_fence", 1),
        # Without validation, a handle serves rows another handle removed (R-STORE-7).
        ("cache_coherence", 3),
    ],
)
def test_kit_rejects_a_store_with_a_guard_switched_off(guard: str, handles: int) -> None:
    variant = StoreVariant(**{guard: False})
    with pytest.raises(AssertionError, match="does not conform"):
        check_ledger(
            functools.partial(_open_variant, variant),
            handles=handles,
            # No shrinking: finding the counterexample is the point here, and shrinking fsync-heavy
            # steps costs minutes.
            settings=settings(
                settings(),
                max_examples=200,
                derandomize=True,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                report_multiple_bugs=False,
            ),
        )
