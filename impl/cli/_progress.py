"""Progress of a long command on standard error: what runs now and for how long (``tqdm``).

``Progress(enabled)`` is a context manager; ``phase(text)`` says what runs now, ``tick(n)`` counts work
done when the command knows it. A background thread redraws the line twice a second, so that a layer
that reports nothing for a minute still shows its elapsed time. Nothing is drawn when ``enabled`` is false:
the commands pass ``showing(json=...)``, true only when standard error is a terminal and ``--json`` is
not given, so that piped output and machine-read runs stay quiet.

``tqdm`` rather than ``rich``: measured here (``python -X importtime``, three runs each, load 4-6), both
import in 44-62 ms, and ``tqdm`` needs no other package (``rich`` brings ``markdown-it-py`` and
``pygments``).

Not guaranteed: the line's wording; any drawing when standard error is not a terminal.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import Any

__all__ = ["Progress", "showing"]


def showing(*, json: bool) -> bool:
    """Whether to draw progress: standard error is a terminal and the output is not ``--json``."""
    return not json and sys.stderr.isatty()


class Progress:
    """A one-line progress display on standard error, or nothing (see the module docstring)."""

    def __init__(self, enabled: bool, *, label: str, total: int | None = None) -> None:
        self._enabled = enabled
        self._bar: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._label = label
        self._total = total

    def __enter__(self) -> Progress:
        if self._enabled:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self._total,
                desc=self._label,
                file=sys.stderr,
                leave=False,
                dynamic_ncols=True,
                bar_format="{desc}: {n_fmt}{total_fmt_}{postfix} [{elapsed}]".replace(
                    "{total_fmt_}", "/{total_fmt}" if self._total else ""
                ),
            )
            self._thread = threading.Thread(target=self._redraw, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._bar is not None:
            self._bar.close()

    def _redraw(self) -> None:
        while not self._stop.wait(0.5):
            self._bar.refresh()

    def phase(self, text: str) -> None:
        """Say what runs now."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=True)

    def tick(self, count: int = 1) -> None:
        """Count ``count`` more units of work done."""
        if self._bar is not None:
            self._bar.update(count)

    def note(self, text: str) -> None:
        """Print a line above the progress line (a layer's result)."""
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
