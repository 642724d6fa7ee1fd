"""The report's pictures, drawn with matplotlib's Agg backend (no display needed): record latency with
removal on and off, directory size over time, ledgers re-created by duplicates (docs/simulate.md).

matplotlib is an optional dependency (the ``simulate`` extra). ``draw`` returns the file names it wrote,
or raises ``PicturesUnavailableError`` naming the missing package, which the report then states in place of
the pictures. Why matplotlib rather than hand-written SVG: docs/simulate.md §Pictures.

Not guaranteed: identical bytes between matplotlib versions.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from capture_ledger.impl.simulate._run import SimulationResult

__all__ = ["SOURCE_RECREATED", "PicturesUnavailableError", "draw"]

#: The source's duplicate experiment: ledgers re-created by 1,000 duplicates when finished rollouts were
#: deleted, and when they were retired (docs/source.md §What it measured).
SOURCE_RECREATED = {"delete": 345, "retire": 0, "duplicates": 1000}


class PicturesUnavailableError(RuntimeError):
    """matplotlib is not installed: ``pip install 'capture-ledger[simulate]'``."""


def _pyplot() -> Any:
    if importlib.util.find_spec("matplotlib") is None:
        raise PicturesUnavailableError(
            "matplotlib is not installed, so the report has no pictures; "
            "install it with: pip install 'capture-ledger[simulate]'"
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _latency(plt: Any, result: SimulationResult, path: Path) -> None:
    figure, axes = plt.subplots(figsize=(7, 4))
    for name, outcome in result.arms.items():
        values = sorted(outcome.record_ms)
        if not values:
            continue
        fractions = [(k + 1) / len(values) for k in range(len(values))]
        label = f"{name} (removal: {outcome.removal or 'none'}), mean {outcome.record.mean:.2f} ms"
        axes.plot(values, fractions, label=label, linewidth=1.4)
    axes.set_xscale("log")
    axes.set_xlabel("ledger.record, milliseconds (log scale)")
    axes.set_ylabel("fraction of calls at most this long")
    axes.set_title("Record latency with removal on and off")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _sizes(plt: Any, result: SimulationResult, path: Path) -> None:
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name, outcome in result.arms.items():
        if not outcome.samples:
            continue
        times = [sample[0] for sample in outcome.samples]
        left.plot(times, [sample[1] / 1e6 for sample in outcome.samples], label=name, linewidth=1.4)
        right.plot(times, [sample[3] for sample in outcome.samples], label=name, linewidth=1.4)
    left.set_title("Ledger bytes on disk")
    left.set_ylabel("MB (all servers of the arm)")
    right.set_title("Fence files on disk")
    right.set_ylabel("files")
    for axes in (left, right):
        axes.set_xlabel("seconds since the arm started")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _recreated(plt: Any, result: SimulationResult, path: Path) -> None:
    figure, axes = plt.subplots(figsize=(7, 4))
    labels, shares, notes, colours = [], [], [], []
    for removal in ("delete", "retire"):
        labels.append(f"source: {removal}")
        shares.append(100.0 * SOURCE_RECREATED[removal] / SOURCE_RECREATED["duplicates"])
        notes.append(f"{SOURCE_RECREATED[removal]:,} of {SOURCE_RECREATED['duplicates']:,}")
        colours.append("#999999")
        outcome = result.arms.get(f"duplicates-{removal}")
        if outcome is not None:
            labels.append(f"this run: {removal}")
            sent = max(outcome.duplicates_sent, 1)
            shares.append(100.0 * outcome.recreated_by_duplicates / sent)
            notes.append(f"{outcome.recreated_by_duplicates:,} of {outcome.duplicates_sent:,}")
            colours.append("#d62728" if removal == "delete" else "#2ca02c")
    bars = axes.bar(range(len(shares)), shares, color=colours)
    for bar, share, note in zip(bars, shares, notes, strict=True):
        axes.annotate(note, (bar.get_x() + bar.get_width() / 2, share), ha="center", va="bottom", fontsize=9)
    axes.set_xticks(range(len(labels)), labels, fontsize=9)
    axes.set_ylabel("% of duplicates that re-created their ledger")
    axes.set_title("Duplicates re-creating their ledger: finished rollouts deleted or retired")
    axes.set_ylim(0, max([*shares, 10.0]) * 1.2)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw(result: SimulationResult, folder: Path) -> list[str]:
    """Draw every picture into ``folder``.

    Args:
        result: the simulation's result.
        folder: where the PNG files go (created if missing).

    Returns:
        The file names written, in the report's order.

    Raises:
        PicturesUnavailableError: matplotlib is not installed.
    """
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, painter in (
        ("record-latency.png", _latency),
        ("directory-size.png", _sizes),
        ("recreated-ledgers.png", _recreated),
    ):
        painter(plt, result, folder / name)
        written.append(name)
    return written
