"""Names a package loads on first use (PEP 562), written once for every package that defers its imports.

``lazy_attributes(name, table)`` returns the ``__getattr__`` and ``__dir__`` of package ``name``:
``table`` maps each public name to the module it is loaded from; the first access imports that module,
keeps the value in the package's namespace (so the next access is a plain lookup) and returns it.

Not guaranteed: thread-safety beyond the import lock's (two threads may both look the name up; both get the
same object).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    name: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of package ``name``, loading ``table``'s names on first use.

    Args:
        name: the package's ``__name__``.
        table: public name -> the module (absolute) it is loaded from.

    Returns:
        ``(__getattr__, __dir__)``, to assign at the package's top level.
    """

    def load(attribute: str) -> Any:
        module = table.get(attribute)
        if module is None:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        value = getattr(importlib.import_module(module), attribute)
        setattr(sys.modules[name], attribute, value)
        return value

    def listing() -> list[str]:
        return sorted({*vars(sys.modules[name]), *table})

    return load, listing
