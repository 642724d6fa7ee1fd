"""The one result shape of every checker and layer: ``Ok``, ``Violation`` or ``Unknown`` (SPEC.md
§Verdicts), as porcupine's ``CheckResult`` is.

- ``Ok``: the checker exercised what it says (``checked``: requirement IDs; ``detail``: what it ran) and
  found no violation. It proves nothing beyond what it exercised.
- ``Violation``: a requirement (``requirement``, an ``R-...`` ID) is broken; ``counterexample`` is the
  readable (and, where the layer can, runnable) account of one run that shows it, and ``witness`` the
  layer's structured form of it (a history, a crash point, a step list), for tools.
- ``Unknown``: the checker could not decide within its budget (``spent`` says what it spent) or could not
  run (``reason``).

``exit_code`` is the one rule every command uses: 0 for ``Ok``, 1 for ``Violation``, 2 for ``Unknown``
(and for a target that cannot be loaded, which never becomes a verdict). ``worst`` folds several verdicts
into one: any violation wins, else any unknown, else ok.

Not guaranteed: that a ``Violation`` names the only requirement the run breaks (each layer says how it
chooses), or that an ``Ok`` of a sampled search means there is no violation (the layer then says
``Unknown`` or lists what it sampled).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "EXIT_BROKEN",
    "EXIT_OK",
    "EXIT_UNKNOWN",
    "Ok",
    "Unknown",
    "Verdict",
    "Violation",
    "exit_code",
    "worst",
]

#: Exit codes of every command (``exit_code``).
EXIT_OK, EXIT_BROKEN, EXIT_UNKNOWN = 0, 1, 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Ok:
    """No violation in what was exercised; named like porcupine's ``Ok`` (not ``model.Ok``, a call's
    result)."""

    checked: tuple[str, ...] = ()
    detail: str = ""

    @property
    def kind(self) -> Literal["ok"]:
        """``"ok"``, as ``--json`` outputs spell it."""
        return "ok"

    def __repr__(self) -> str:
        return (
            "Ok()"
            if not (self.checked or self.detail)
            else f"Ok(checked={self.checked!r}, detail={self.detail!r})"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    """A requirement broken, with the counterexample that shows it."""

    requirement: str
    counterexample: str
    witness: Any = None

    @property
    def kind(self) -> Literal["violation"]:
        """``"violation"``, as ``--json`` outputs spell it."""
        return "violation"


@dataclass(frozen=True, slots=True, kw_only=True)
class Unknown:
    """No verdict: the budget ran out (``spent``) or the check could not run (``reason``)."""

    spent: str = ""
    reason: str = ""

    @property
    def kind(self) -> Literal["unknown"]:
        """``"unknown"``, as ``--json`` outputs spell it."""
        return "unknown"


Verdict = Ok | Violation | Unknown


def exit_code(verdict: Verdict) -> int:
    """0 for ``Ok``, 1 for ``Violation``, 2 for ``Unknown``: the exit status of every command.

    Args:
        verdict: any checker's result.

    Returns:
        The exit status.
    """
    if isinstance(verdict, Violation):
        return EXIT_BROKEN
    if isinstance(verdict, Unknown):
        return EXIT_UNKNOWN
    return EXIT_OK


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """One verdict for several: the first ``Violation``, else the first ``Unknown``, else an ``Ok`` that
    lists every requirement the ``Ok`` verdicts checked (an empty iterable is ``Ok()``)."""
    found = list(verdicts)
    for kind in (Violation, Unknown):
        for verdict in found:
            if isinstance(verdict, kind):
                return verdict
    checked = tuple(dict.fromkeys(r for v in found if isinstance(v, Ok) for r in v.checked))
    return Ok(checked=checked)
