"""The requirements the conformance kit judges: their sentences, which operations each needs, and one
failure class per requirement (SPEC.md §Conformance, R-KIT-1..8).

* ``sentence(requirement_id)`` quotes a requirement's text from the packaged SPEC.md, so that a verdict
  says what was broken in the spec's own words.
* ``SCOPE`` lists the requirements the kit can find broken, and for each the protocol methods it needs:
  ``checked(operations, handles)`` splits them into those a run on a (possibly partial) ledger checks and
  those it cannot. A requirement counts as checked when the kit exercises at least one case of it: a
  ledger without ``retire`` is still checked on R-READ-4's Absent and Live cases, never on its Retired one.
* ``breaks(requirement_id)`` is the ``NonConformance`` subclass of one requirement, and ``fail`` the one
  place every verdict of the machine is raised. Hypothesis tells bugs apart by exception class and raise
  site, so one site with a class per requirement makes its bugs exactly the broken requirements.

Outside the kit's scope, and so in neither list: §States and §Errors (judged through the operations that
reach them), §Concurrency (``check-history``, ``stress``), §Store, §Crash and §HTTP (their own tools).
R-WRITE-6 and R-RETIRE-3 are in scope but never checked: they concern the fenced Live state, which no
sequence of calls reaches (R-STATE-2).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import ClassVar, NoReturn

from capture_ledger.spec.core.protocol import OPERATIONS

__all__ = [
    "SCOPE",
    "UNTOLERABLE",
    "NonConformance",
    "Scope",
    "breaks",
    "checked",
    "fail",
    "sentence",
]

_WRITES = ("record", "record_failure")
_REMOVALS = ("retire", "delete")
_NEVER = ("never",)  # no method has this name: the requirement is never checked


@dataclass(kw_only=True, frozen=True, slots=True)
class Scope:
    """A requirement the kit can find broken, and what it needs to check it.

    Attributes:
        requirement: its ID in SPEC.md.
        needs: protocol methods that must all be checked.
        any_of: protocol methods of which at least one must be checked (none: no further condition).
        handles: the handles per workspace it needs (R-KIT-4 needs two).
    """

    requirement: str
    needs: tuple[str, ...] = ()
    any_of: tuple[str, ...] = ()
    handles: int = 1

    def is_checked(self, operations: Iterable[str], handles: int) -> bool:
        """Whether a run checking ``operations`` with ``handles`` handles exercises this requirement."""
        chosen = set(operations)
        return (
            handles >= self.handles
            and all(name in chosen for name in self.needs)
            and (not self.any_of or any(name in chosen for name in self.any_of))
        )


#: The requirements the kit can find broken, in SPEC.md's order.
SCOPE: tuple[Scope, ...] = (
    Scope(requirement="R-ID-1", any_of=OPERATIONS),
    Scope(requirement="R-ID-2", any_of=OPERATIONS),
    Scope(requirement="R-ID-3", needs=("admit",)),
    Scope(requirement="R-BATCH-1", any_of=_REMOVALS),
    Scope(requirement="R-BATCH-2", any_of=_REMOVALS),
    Scope(requirement="R-BATCH-3", any_of=_REMOVALS),
    Scope(requirement="R-BATCH-4", any_of=_REMOVALS),
    Scope(requirement="R-WRITE-1", needs=("record",)),
    Scope(requirement="R-WRITE-2", needs=("record",), any_of=("manifest", "has_rows")),
    Scope(requirement="R-WRITE-3", needs=("record",)),
    Scope(requirement="R-WRITE-4", needs=("retire",), any_of=_WRITES),
    Scope(requirement="R-WRITE-5", needs=("retire",), any_of=_WRITES),
    Scope(requirement="R-WRITE-6", needs=_NEVER),
    Scope(requirement="R-WRITE-7", needs=("record_failure",)),
    Scope(requirement="R-WRITE-8", needs=("record", "record_failure")),
    Scope(requirement="R-ADMIT-1", needs=("admit",)),
    Scope(requirement="R-ADMIT-2", needs=("admit", "retire")),
    Scope(requirement="R-READ-1", needs=("manifest",)),
    Scope(requirement="R-READ-2", needs=("manifest",), any_of=_WRITES),
    Scope(requirement="R-READ-3", needs=("manifest", "retire")),
    Scope(requirement="R-READ-4", needs=("has_rows",)),
    Scope(requirement="R-RETIRE-1", needs=("retire",), any_of=_WRITES),
    Scope(requirement="R-RETIRE-2", needs=("retire",)),
    Scope(requirement="R-RETIRE-3", needs=_NEVER),
    Scope(requirement="R-RETIRE-4", needs=("retire",)),
    Scope(requirement="R-DELETE-1", needs=("delete",), any_of=_WRITES),
    Scope(requirement="R-DELETE-2", needs=("delete",)),
    Scope(requirement="R-DELETE-3", needs=("delete",), any_of=_WRITES),
    Scope(requirement="R-KIT-4", handles=2),
    Scope(requirement="R-KIT-7"),
    Scope(requirement="R-KIT-8"),
    Scope(requirement="R-KIT-14"),
)

#: Requirements whose failure ends a run: the kit cannot go on past a factory or ``close`` that fails or a
#: resource the ledger exhausted (R-KIT-7), a call that hung (R-KIT-8) or a ledger that behaves differently
#: on one program twice (R-KIT-14), so ``--all`` stops there.
UNTOLERABLE = frozenset({"R-KIT-7", "R-KIT-8", "R-KIT-14"})


def checked(operations: Iterable[str], handles: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The requirements of ``SCOPE`` a run checks, and those it does not, in SPEC.md's order.

    Args:
        operations: the protocol methods the run checks.
        handles: handles per workspace.
    """
    chosen = tuple(operations)
    yes = tuple(s.requirement for s in SCOPE if s.is_checked(chosen, handles))
    return yes, tuple(s.requirement for s in SCOPE if s.requirement not in yes)


_DEFINITION = re.compile(r"^- \*\*(R-[A-Z]+-\d+)\*\*\s*(.*)$")


@functools.cache
def _sentences() -> dict[str, str]:
    try:
        text = resources.files("capture_ledger.spec").joinpath("SPEC.md").read_text(encoding="utf-8")
    except (OSError, ModuleNotFoundError):  # not packaged: messages then cite the ID alone
        return {}
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        match = _DEFINITION.match(line)
        if match:
            current = parts.setdefault(match.group(1), [match.group(2)])
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line.strip())  # a continuation line of the same bullet
        else:
            current = None
    return {requirement: " ".join(words) for requirement, words in parts.items()}


def sentence(requirement: str) -> str:
    """The text of ``requirement`` in the packaged SPEC.md, whitespace joined; ``""`` if it has none."""
    return _sentences().get(requirement, "")


class NonConformance(AssertionError):  # noqa: N818 -- a verdict, not an error
    """The ledger under study did something the model does not allow: a verdict (R-KIT-6, R-KIT-7).

    Each broken requirement has its own subclass (``breaks``), whose ``requirement`` names it.
    """

    requirement: ClassVar[str] = ""


_CLASSES: dict[str, type[NonConformance]] = {}


def breaks(requirement: str) -> type[NonConformance]:
    """The ``NonConformance`` subclass of ``requirement``, the same class object on every call."""
    kind = _CLASSES.get(requirement)
    if kind is None:
        kind = type(f"NonConformance[{requirement}]", (NonConformance,), {"requirement": requirement})
        kind.__module__ = __name__
        _CLASSES[requirement] = kind
    return kind


def fail(requirement: str, what: str) -> NoReturn:
    """Raise the verdict that ``requirement`` is broken, ``what`` saying how.

    The one raise site of the machine's verdicts. Never call it while handling an exception: the handled
    exception would become the verdict's ``__context__``, and Hypothesis would tell apart failures of one
    requirement by it.
    """
    raise breaks(requirement)(f"{requirement}: {what}")
