"""Targets: ``module:callable`` names of ledger factories, as ``verify`` and ``serve --ledger`` take them
(SPEC.md R-KIT-1).

``load_target("mypkg.ledgers:open_ledger")`` imports ``mypkg.ledgers`` (the current directory is put on
``sys.path`` first, so a project's own modules import) and returns its ``open_ledger``; a dotted attribute
(``module:Class.opener``) is followed part by part. Anything that stops it is a ``TargetError`` (a
``ValueError``) whose message quotes the target as the user wrote it and says what went wrong: not of the
form ``module:callable``, no such module, importing the module raised (the error's class and message, and
which module was missing when it was a dependency), no such attribute, or not callable. The dispatcher
prints it and exits 2.

Not guaranteed: that the callable opens a ledger (the commands find out when they call it); the messages'
wording.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["OptionError", "TargetError", "bind_options", "load_target", "parse_options"]

_EXAMPLE = "mypkg.ledgers:open_ledger"


class TargetError(ValueError):
    """A target that cannot be loaded; the message names it as written.

    Attributes:
        target: the target as the user wrote it.
    """

    def __init__(self, target: str, problem: str) -> None:
        super().__init__(f"cannot load target {target!r}: {problem}")
        self.target = target


class OptionError(TargetError):
    """An ``--option`` that is not ``KEY=VALUE`` (a ``TargetError``: it cannot be bound to the target)."""

    def __init__(self, pair: str) -> None:
        ValueError.__init__(self, f"--option takes KEY=VALUE, not {pair!r}")
        self.target = pair


def _described(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _is_the_module_or_a_parent(missing: str | None, module_name: str) -> bool:
    return missing is not None and (module_name == missing or module_name.startswith(missing + "."))


def load_target(target: str) -> Callable[[Path], Any]:
    """Import ``module:callable`` and return the callable.

    Args:
        target: ``module:attribute``, the attribute possibly dotted (``module:Class.opener``).

    Returns:
        The callable the target names.

    Raises:
        TargetError: the target is malformed, its module is missing or raised while importing, the
            attribute is missing, or it is not callable.
    """
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name.strip() or not attribute.strip():
        raise TargetError(target, f"a target is module:callable, e.g. {_EXAMPLE}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as error:
        if isinstance(error, ModuleNotFoundError) and _is_the_module_or_a_parent(error.name, module_name):
            raise TargetError(target, f"no module named {error.name!r}") from error
        raise TargetError(target, f"importing {module_name} raised {_described(error)}") from error
    walked = module_name
    missing = object()
    for part in attribute.split("."):
        try:
            found = getattr(value, part, missing)
        except Exception as error:  # a module's __getattr__ may load more, and fail
            raise TargetError(target, f"reading {walked}.{part} raised {_described(error)}") from error
        if found is missing:
            raise TargetError(target, f"{walked} has no attribute {part!r}")
        value, walked = found, f"{walked}.{part}"
    if not callable(value):
        raise TargetError(target, f"{walked} is a {type(value).__name__}, not a callable")
    factory: Callable[[Path], Any] = value
    return factory


def parse_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``--option KEY=VALUE`` pairs as keyword arguments for a factory.

    Args:
        pairs: the pairs as written; a value that reads as JSON is taken as JSON, else as text.

    Returns:
        Key to value (a later pair wins over an earlier one with the same key).

    Raises:
        TargetError: a pair without ``=`` or without a key.
    """
    found: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise OptionError(pair)
        try:
            found[key] = json.loads(value)
        except ValueError:
            found[key] = value
    return found


def bind_options(factory: Callable[..., Any], options: dict[str, Any]) -> Callable[[Path], Any]:
    """``factory`` called with ``options`` as keyword arguments; a coroutine function stays one.

    Args:
        factory: what ``load_target`` returned.
        options: what ``parse_options`` returned.

    Returns:
        A callable taking only the workspace; ``factory`` itself when there are no options.
    """
    if not options:
        return factory
    if inspect.iscoroutinefunction(factory):

        async def opened(workspace: Path) -> Any:
            return await factory(workspace, **options)

        return opened
    return lambda workspace: factory(workspace, **options)
