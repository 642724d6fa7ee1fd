"""What a simulation runs: the scenario's numbers and the arms that run side by side (docs/simulate.md).

``Scenario()`` holds the source's numbers (docs/source.md §What it measured): 20,000 rollouts of 4 calls,
1,024 in flight, retired in batches of 256, and the experiment in which a quarter of 4,000 rollouts is
sent twice, as a client retry does. ``Scenario.quick()``, what ``capture-ledger simulate`` runs unless
given ``--source``, is the same mix at an eighth of the scale (about a minute on two cores);
``Scenario.ci()`` is the small scenario the test suite runs.

A run has two phases, each of two **arms** that run at the same time on servers of their own, so that
each comparison is made under the same load (the machine may be shared):

1. ``removal`` (the scenario's ``removal``, retire by default) next to ``baseline`` (no removal): record
   latency with removal on and off, what is left with and without removal;
2. ``duplicates-delete`` next to ``duplicates-retire``: ledgers that duplicates re-create when finished
   rollouts are deleted, and when they are retired;
3. ``one-per-request-combined`` next to ``one-per-request-alone``: the source's first step, one retire
   request per finished rollout (batch 1), with the file store's combined removals on and off
   (``combine_removals``, docs/group-commit.md): what combining saves per rollout at that scale.

Every arm uses the same knobs (calls, in flight, batch, duplicates, abandoned attempts, failed calls,
wrong-server requests); arms differ in their number of rollouts and their removal (and the third phase's
in its batch and its combining). Not guaranteed: that
the source's workload had the same mix of failures and abandoned attempts (it does not say).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["REMOVALS", "Arm", "Removal", "Scenario"]

#: How finished and abandoned attempts are removed.
Removal = Literal["retire", "delete"]
REMOVALS: tuple[Removal, ...] = ("retire", "delete")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """The knobs of one simulation run.

    Attributes:
        servers: ``serve`` servers per arm, each with its own lineage directory.
        workers: worker processes per server.
        rollouts: rollouts of the first phase's arms.
        calls: model calls per rollout.
        in_flight: rollouts running at once, per arm.
        batch: IDs per removal request; 1 sends one request per rollout.
        duplicates: fraction of rollouts sent twice (a client retry: the same ID, a second execution).
        abandon: fraction of attempts abandoned part-way; their agents keep writing after the removal.
        failures: fraction of model calls that fail (``record_failure`` instead of ``record``).
        wrong_server: fraction of finished attempts whose removal is also sent to a server with another
            directory, which must report them ``absent``.
        removal: how the first phase's removal arm removes.
        baseline: run the first phase's arm without removal.
        duplicate_rollouts: rollouts of each arm of the second phase; 0 skips it.
        combining_rollouts: rollouts of each arm of the third phase (one retire request per rollout,
            combining on and off); 0 skips it.
        flush_seconds: a removal batch not full after this long is sent anyway (a training step ends).
        seed: the seed of every random choice.
        timeout: seconds the whole run may take before it is stopped.
    """

    servers: int = 2
    workers: int = 2
    rollouts: int = 20_000
    calls: int = 4
    in_flight: int = 1024
    batch: int = 256
    duplicates: float = 0.25
    abandon: float = 0.02
    failures: float = 0.02
    wrong_server: float = 0.02
    removal: Removal = "retire"
    baseline: bool = True
    duplicate_rollouts: int = 4_000
    combining_rollouts: int = 4_000
    flush_seconds: float = 2.0
    seed: int = 0
    timeout: float = 1800.0

    def __post_init__(self) -> None:
        counts = {
            "servers": self.servers,
            "workers": self.workers,
            "calls": self.calls,
            "in_flight": self.in_flight,
            "batch": self.batch,
        }
        for name, value in counts.items():
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.rollouts < 0 or self.duplicate_rollouts < 0 or self.combining_rollouts < 0:
            raise ValueError("rollouts must not be negative")
        for name in ("duplicates", "abandon", "failures", "wrong_server"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a fraction between 0 and 1, got {value}")
        if self.removal not in REMOVALS:
            raise ValueError(f"removal must be one of {', '.join(REMOVALS)}, not {self.removal!r}")
        if self.batch > 4096:
            raise ValueError("batch must be at most 4096 (MAX_LEDGER_BATCH)")
        if self.timeout <= 0 or self.flush_seconds <= 0:
            raise ValueError("timeout and flush_seconds must be positive")

    @classmethod
    def quick(cls) -> Scenario:
        """The command's default: the source's mix at an eighth of its scale, about a minute here.

        2,500 rollouts per arm of the first phase and 500 per arm of the duplicate experiment (the source's
        20,000 and 4,000), 256 in flight (the source's 1,024 would keep most of them in flight at once);
        batches, calls and every fraction as the source's.
        """
        return cls(
            rollouts=2_500, in_flight=256, duplicate_rollouts=500, combining_rollouts=500, timeout=600.0
        )

    @classmethod
    def ci(cls) -> Scenario:
        """The small scenario of the test suite: every behaviour, a few hundred rollouts, seconds."""
        return cls(
            rollouts=240,
            calls=3,
            in_flight=48,
            batch=16,
            duplicate_rollouts=120,
            combining_rollouts=0,
            abandon=0.05,
            failures=0.05,
            wrong_server=0.05,
            flush_seconds=0.5,
            timeout=300.0,
        )

    def with_(self, **changes: object) -> Scenario:
        """A copy with ``changes`` (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def arms(self) -> list[list[Arm]]:
        """The phases, each a list of arms that run at the same time."""
        phases: list[list[Arm]] = []
        first = [Arm(name=self.removal, rollouts=self.rollouts, removal=self.removal)]
        if self.baseline:
            first.append(Arm(name="baseline", rollouts=self.rollouts, removal=None))
        if self.rollouts:
            phases.append(first)
        if self.duplicate_rollouts:
            phases.append(
                [
                    Arm(name="duplicates-delete", rollouts=self.duplicate_rollouts, removal="delete"),
                    Arm(name="duplicates-retire", rollouts=self.duplicate_rollouts, removal="retire"),
                ]
            )
        if self.combining_rollouts:
            phases.append(
                [
                    Arm(
                        name="one-per-request-combined",
                        rollouts=self.combining_rollouts,
                        removal="retire",
                        batch=1,
                        combine=True,
                    ),
                    Arm(
                        name="one-per-request-alone",
                        rollouts=self.combining_rollouts,
                        removal="retire",
                        batch=1,
                        combine=False,
                    ),
                ]
            )
        return phases


@dataclass(kw_only=True, frozen=True, slots=True)
class Arm:
    """One arm: its name, its rollouts, and how it removes them (``None``: never, the baseline); ``batch``
    overrides the scenario's IDs per request, ``combine`` the servers' ``combine_removals`` (``None``: the
    scenario's batch, the store's default)."""

    name: str
    rollouts: int
    removal: Removal | None
    batch: int | None = None
    combine: bool | None = None
