"""Every guard of the store is studied somewhere. Three explorers keep their lists of guards by hand, so a
new ``StoreVariant`` field fails here until each explorer says what it does with it."""

from __future__ import annotations

import dataclasses

from capture_ledger.impl.store.ordering import StoreVariant
from capture_ledger.impl.study.report import OTHER_GUARDS, STEPS
from capture_ledger.impl.study.scenarios import GUARDS
from capture_ledger.spec.concurrency.steps import GUARD_NAMES

VARIANT_FIELDS = {f.name for f in dataclasses.fields(StoreVariant)}
#: Guards of the store's protocol that only a crash can show; no interleaving of live calls needs them.
DURABILITY_STEPS = {
    "sync_after_fences",
    "sync_when_nothing_written",
    "sync_after_unlinks",
    "fsync_appends",
    "sync_dir_on_create",
    "sync_delete",
}


def test_the_crash_study_ablates_every_store_variant_field() -> None:
    assert set(STEPS) | set(OTHER_GUARDS) == VARIANT_FIELDS
    assert not set(STEPS) & set(OTHER_GUARDS)


def test_the_scheduler_ablates_every_guard_that_is_not_about_durability() -> None:
    assert set(GUARDS) == VARIANT_FIELDS - DURABILITY_STEPS


def test_the_step_model_has_every_scheduling_guard_and_only_the_read_lock_besides() -> None:
    # read_lock: the exploration showed reads must hold the stripe lock; the store always does, so it has no
    # switch to turn off (docs/concurrency.md).
    assert set(GUARD_NAMES) == set(GUARDS) | {"read_lock"}
