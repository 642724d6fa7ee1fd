"""The conformance kit's verdict on one ledger: which requirements were checked, which are broken, each
with its counterexample (SPEC.md §Conformance, R-KIT-6).

A ``LedgerVerdict`` is plain data: ``to_json()`` is the object ``capture-ledger verify --json`` prints,
``report()`` the text of the ``AssertionError`` that ``check_ledger`` raises, and ``result`` the shared
verdict of every checker (``spec.core.verdicts``), from which ``verify`` takes its exit status. Each
``Broken`` names its requirement, says what the ledger did, quotes the requirement's text from SPEC.md,
and carries a counterexample that is a program: pasted into a Python session (with the factory
importable), it fails again with the same requirement.

Not guaranteed: the wording of messages (``requirement`` and the JSON keys are stable).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capture_ledger.spec.core.verdicts import Ok, Verdict, Violation
from capture_ledger.spec.kit._operations import ProtocolCheck
from capture_ledger.spec.kit._requirements import sentence

__all__ = ["Broken", "LedgerVerdict", "count_steps", "quoted"]


def quoted(requirement: str) -> str:
    """``requirement``'s text from SPEC.md as one indented line, or ``""`` when SPEC.md lacks it."""
    text = sentence(requirement)
    return f"  SPEC.md {requirement}: {text}" if text else ""


def count_steps(text: str) -> int:
    """The number of steps of a counterexample program (rule calls, without the initial rollout, the
    rollouts drawn, the read-back checks and the teardown)."""
    return sum(
        1
        for line in text.splitlines()
        if "state." in line
        and not any(skip in line for skip in ("teardown", "every_known_rollout", "first_rollout"))
        and "another_rollout" not in line
    )


@dataclass(kw_only=True, frozen=True, slots=True)
class Broken:
    """One broken requirement.

    Attributes:
        requirement: its ID (``R-...``).
        message: what the ledger did, then the requirement's text from SPEC.md.
        counterexample: a runnable program that ends in the failure (shrunk unless ``shrunk`` is false).
        steps: the program's steps (``count_steps``).
        shrunk: false for a hung call, which is not re-run (R-KIT-8).
    """

    requirement: str
    message: str
    counterexample: str
    steps: int
    shrunk: bool = True


@dataclass(kw_only=True, frozen=True, slots=True)
class LedgerVerdict:
    """The kit's report on the ledgers one factory opens (``result``: the same as a shared verdict).

    Attributes:
        target: the factory, named as the caller wrote it.
        handles: handles per workspace.
        operations: the protocol methods checked.
        checked: requirements the run exercised (``requirements.checked``), in SPEC.md's order.
        not_checked: requirements of the kit's scope it could not exercise here.
        broken: each broken requirement once, in the order found.
        examples: examples run (machines built), over every round.
        steps: rule calls run, over every round.
        seconds: wall time.
        protocol: the start-up protocol check of one handle, when the factory opened one.
    """

    target: str
    handles: int
    operations: tuple[str, ...]
    checked: tuple[str, ...]
    not_checked: tuple[str, ...]
    broken: tuple[Broken, ...]
    examples: int
    steps: int
    seconds: float
    protocol: ProtocolCheck | None = None

    @property
    def conforms(self) -> bool:
        """Whether no requirement was found broken."""
        return not self.broken

    @property
    def result(self) -> Verdict:
        """The shared verdict: a ``Violation`` of the first broken requirement, its counterexample the
        runnable program (``witness``: the ``Broken``); else ``Ok`` with the requirements checked."""
        if self.broken:
            first = self.broken[0]
            return Violation(
                requirement=first.requirement, counterexample=first.counterexample, witness=first
            )
        detail = f"{self.target}: {self.examples} examples, {self.steps} steps"
        return Ok(checked=self.checked, detail=detail)

    def to_json(self) -> dict[str, Any]:
        """The ``verify --json`` object."""
        return {
            "target": self.target,
            "conforms": self.conforms,
            "operations": list(self.operations),
            "checked": list(self.checked),
            "not_checked": list(self.not_checked),
            "broken": [
                {
                    "requirement": b.requirement,
                    "message": b.message,
                    "counterexample": b.counterexample,
                    "steps": b.steps,
                }
                for b in self.broken
            ],
            "examples": self.examples,
            "seconds": round(self.seconds, 3),
            "handles": self.handles,
            "steps": self.steps,
        }

    def report(self) -> str:
        """The verdict as text: every broken requirement with its counterexample."""
        if self.conforms:
            return (
                f"the ledger opened by {self.target} conforms to the capture-ledger spec "
                f"(handles={self.handles}): {len(self.checked)} requirements checked"
            )
        head = (
            f"the ledger opened by {self.target} does not conform to the capture-ledger spec "
            f"(handles={self.handles}); broken: {', '.join(b.requirement for b in self.broken)}"
        )
        parts = [head]
        for broken in self.broken:
            note = "" if broken.shrunk else " (not shrunk: a hung call is not re-run)"
            parts.append(
                f"\n{broken.message}\n\nCounterexample{note} (paste into a Python session):\n"
                f"{broken.counterexample}"
            )
        return "\n".join(parts)
