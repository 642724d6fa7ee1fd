"""The ``capture-ledger`` command line: the dispatcher (``main``) and one module per command.

Nothing imports this package but the console script; each command imports what it needs when it runs.
"""

from __future__ import annotations

from capture_ledger.impl.cli._options import read_token

__all__ = ["read_token"]
