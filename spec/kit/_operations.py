"""Partial ledgers: which protocol methods a ledger has, and which the kit checks (SPEC.md §Protocol,
R-KIT-1, R-KIT-5).

``check_protocol(ledger)`` reports what a model server's start-up check would: the methods of
``CaptureLedger`` the object lacks, those that are coroutines, and those whose parameters differ from the
protocol's (names, kinds, defaults; annotations are not compared). ``select_operations`` turns a request
(``None``: every method the ledger has) into the tuple of methods the kit checks, in ``OPERATIONS``
order. A ledger without ``retire``, ``delete`` or ``admit`` (NeMo Gym 0.7.0's) is judged on the rest.

Not guaranteed: that a method with the protocol's signature behaves as one (that is what the kit is for);
``check_protocol`` runs the ledger's attribute lookups, so call it where the ledger's code may run (the
kit's worker thread).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from capture_ledger.spec.core.protocol import OPERATIONS, CaptureLedger

__all__ = ["ProtocolCheck", "check_protocol", "select_operations"]


@dataclass(kw_only=True, frozen=True, slots=True)
class ProtocolCheck:
    """How an object measures up to ``CaptureLedger``.

    Attributes:
        type_name: the object's class name.
        present: the protocol's methods it has (callable attributes), in ``OPERATIONS`` order.
        missing: the protocol's methods it lacks.
        coroutines: the present methods that are coroutine functions (the kit awaits them, R-KIT-5).
        differences: one line per present method whose parameters differ from the protocol's.
    """

    type_name: str
    present: tuple[str, ...]
    missing: tuple[str, ...]
    coroutines: tuple[str, ...]
    differences: tuple[str, ...]

    def lines(self) -> list[str]:
        """The check as text, one finding per line."""
        lines = [f"protocol check of {self.type_name}:"]
        lines.append(f"  methods of CaptureLedger: {', '.join(self.present) or 'none'}")
        if self.missing:
            lines.append(
                f"  missing: {', '.join(self.missing)} (the requirements that need them are not checked)"
            )
        if self.coroutines:
            lines.append(f"  coroutines (awaited): {', '.join(self.coroutines)}")
        lines.extend(f"  signature differs: {line}" for line in self.differences)
        return lines


def _parameters(signature: inspect.Signature) -> str:
    shown = []
    for parameter in signature.parameters.values():
        text = parameter.name
        if parameter.kind is parameter.VAR_POSITIONAL:
            text = f"*{text}"
        elif parameter.kind is parameter.VAR_KEYWORD:
            text = f"**{text}"
        elif parameter.kind is parameter.KEYWORD_ONLY:
            text = f"*, {text}"
        if parameter.default is not parameter.empty:
            text = f"{text}={parameter.default!r}"
        shown.append(text)
    return f"({', '.join(shown)})"


def _protocol_signature(name: str) -> str:
    method = getattr(CaptureLedger, name)
    signature = inspect.signature(method)
    parameters = list(signature.parameters.values())[1:]  # without self
    return _parameters(signature.replace(parameters=parameters))


def check_protocol(ledger: Any) -> ProtocolCheck:
    """Compare ``ledger``'s methods with ``CaptureLedger``'s.

    Args:
        ledger: what a factory returned.

    Returns:
        The ``ProtocolCheck``; never raises for what the ledger's attributes do (an attribute whose lookup
        raises counts as missing, a signature that cannot be read is reported as such).
    """
    present, missing, coroutines, differences = [], [], [], []
    for name in OPERATIONS:
        try:
            method = getattr(ledger, name, None)
        except Exception:  # the ledger's __getattr__ raised: the method is not there to call
            method = None
        if not callable(method):
            missing.append(name)
            continue
        present.append(name)
        if inspect.iscoroutinefunction(method):
            coroutines.append(name)
        expected = _protocol_signature(name)
        try:
            actual = _parameters(inspect.signature(method))
        except (TypeError, ValueError):
            differences.append(f"{name}: its signature cannot be read (the protocol: {name}{expected})")
            continue
        if actual != expected:
            differences.append(f"{name}{actual} (the protocol: {name}{expected})")
    return ProtocolCheck(
        type_name=type(ledger).__name__,
        present=tuple(present),
        missing=tuple(missing),
        coroutines=tuple(coroutines),
        differences=tuple(differences),
    )


def select_operations(requested: Iterable[str] | None, present: Iterable[str]) -> tuple[str, ...]:
    """The protocol methods to check, in ``OPERATIONS`` order.

    Args:
        requested: the methods asked for; ``None`` for every one the ledger has (``present``), or all of
            them when it has none (so that the verdict names what is missing).
        present: the methods the ledger has.

    Raises:
        ValueError: a requested name is not a method of the protocol, or none is requested.
    """
    if requested is None:
        chosen = set(present) or set(OPERATIONS)
    else:
        chosen = set(requested)
        unknown = sorted(chosen - set(OPERATIONS))
        if unknown:
            raise ValueError(
                f"not methods of CaptureLedger: {', '.join(unknown)}; choose among {', '.join(OPERATIONS)}"
            )
        if not chosen:
            raise ValueError("choose at least one operation to check")
    return tuple(name for name in OPERATIONS if name in chosen)
