"""The kernel study over several workloads, configurations and file systems: run, summarize, draw
(SPEC.md §Crash; docs/crash.md §The kernel study).

``kernel_study`` runs ``study.kernel_cell`` for every file system × store configuration × workload inside one
``host.workspace`` (everything torn down after, whatever failed). ``KernelStudy`` answers the questions the
command and the docs ask: ``summary(fs)`` is the JSON object of ``capture-ledger crash --kernel --json``;
``table()`` the kernel-versus-model table in Markdown, ``markdown()`` a whole report; ``verdicts()`` the
clauses broken per file system and store configuration; ``acceptable()`` the command's exit rule;
``comparison_svg`` draws the table.

Not guaranteed: the layout of the table and the picture (they are for people).
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from capture_ledger.impl.study.crash import CONFIGS
from capture_ledger.impl.study.kernel._filesystems import DEFAULT_FILESYSTEMS, FILESYSTEMS, lacking
from capture_ledger.impl.study.kernel._host import MissingSetupError, workspace
from capture_ledger.impl.study.kernel._study import KernelCell, kernel_cell
from capture_ledger.impl.study.kernel._workloads import KERNEL_WORKLOADS

__all__ = ["DEFAULT_CONFIGS", "KernelStudy", "comparison_svg", "kernel_study"]

#: The store configurations run on each file system by default: the default protocol everywhere, and on
#: ext4 without a journal also the two ``fence_sync`` options the README recommends there.
DEFAULT_CONFIGS: dict[str, tuple[str, ...]] = {
    name: ("default", "fence_sync=syncfs", "fence_sync=file")
    if fs.model == "ext4-nojournal"
    else ("default",)
    for name, fs in FILESYSTEMS.items()
}

#: Where a broken clause fails the command: the configuration the README calls safe on that file system
#: (the default protocol on every journaled one).
_PROMISED: dict[str, tuple[str, ...]] = {
    name: ("default",) for name, fs in FILESYSTEMS.items() if fs.model == "journaled"
}


@dataclass(frozen=True, slots=True)
class KernelStudy:
    """Every cell of one run, and its wall time."""

    cells: tuple[KernelCell, ...]
    seconds: float

    def file_systems(self) -> tuple[str, ...]:
        """The file systems run, in order."""
        return tuple(dict.fromkeys(c.fs for c in self.cells))

    def verdicts(self) -> dict[tuple[str, str], frozenset[str]]:
        """The clauses broken per (file system, store configuration), over every workload."""
        found: dict[tuple[str, str], set[str]] = {}
        for cell in self.cells:
            found.setdefault((cell.fs, cell.config), set()).update(cell.clauses)
        return {key: frozenset(value) for key, value in found.items()}

    def outside(self) -> int:
        """Kernel states outside their file system's matching model, over every cell."""
        return sum(c.outside.get(c.model, 0) for c in self.cells)

    def acceptable(self) -> bool:
        """The command's exit rule: every state inside its matching model, and no clause broken by the
        configuration the README calls safe on a journaled file system."""
        promised = any(c.clauses for c in self.cells if c.config in _PROMISED.get(c.fs, ()))
        return self.outside() == 0 and not promised

    def summary(self, fs: str) -> dict[str, object]:
        """The JSON object of ``capture-ledger crash --kernel --json`` for one file system."""
        cells = [c for c in self.cells if c.fs == fs]
        model = FILESYSTEMS[fs].model
        seconds = sum(c.seconds + c.record_seconds for c in cells)
        states = sum(c.states for c in cells)
        judging = sum(c.seconds for c in cells)
        return {
            "fs": fs,
            "model": model,
            "configs": list(dict.fromkeys(c.config for c in cells)),
            "workloads": len({c.workload for c in cells}),
            "crash_states": states,
            "inside_model": sum(c.inside.get(model, 0) for c in cells),
            "broken": [
                {
                    "clause": b.clause,
                    "config": c.config,
                    "workload": c.workload,
                    "state": b.state,
                    "counterexample": b.violation.render(),
                    "timeline": b.timeline,
                }
                for c in cells
                for b in c.broken
            ],
            "outside_model": [
                {"workload": f.workload, "config": f.config, "state": f.state, "timeline": f.timeline}
                for c in cells
                for f in c.findings
                if f.model == model
            ],
            "model_only": sum(c.model_only.get(model, 0) for c in cells),
            "garbage_states": sum(c.garbage for c in cells),
            "manual_fsck": sum(c.manual_fsck for c in cells),
            "not_exercised": [
                {"workload": c.workload, "config": c.config, "fault": f}
                for c in cells
                for f in c.not_exercised
            ],
            "states_per_second": round(states / judging, 1) if judging else 0.0,
            "seconds": round(seconds, 2),
        }

    def table(self) -> str:
        """The kernel-versus-model table: one row per file system, store configuration and workload."""
        lines = [
            "| file system | store | workload | kernel states | inside model | outside | model-only "
            "| NUL states | clauses broken |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in self.cells:
            lines.append(
                f"| {c.fs} ({c.model}) | {c.config} | {c.workload} | {c.states} | {c.inside.get(c.model, 0)} "
                f"| {c.outside.get(c.model, 0)} | {c.model_only.get(c.model, 0)} | {c.garbage} "
                f"| {', '.join(sorted(c.clauses)) or 'none'} |"
            )
        return "\n".join(lines)

    def markdown(self) -> str:
        """A report: the picture, the table, each counterexample and finding with its timeline."""
        parts = ["# The kernel study", "", "![kernel against model](kernel.svg)", "", self.table(), ""]
        for cell in self.cells:
            for broken in cell.broken:
                where = f"{cell.fs} / {cell.config} / {cell.workload} ({broken.state})"
                parts += [f"## {broken.clause}: {where}", ""]
                parts += ["```", broken.violation.render(), "", broken.timeline, "```", ""]
            for finding in cell.findings:
                if finding.model == cell.model:
                    where = f"{cell.fs} / {cell.workload} ({finding.state})"
                    parts += [f"## outside {finding.model}: {where}", ""]
                    parts += ["```", finding.timeline, "```", ""]
        return "\n".join(parts)

    def costs(self) -> list[tuple[int, int, float]]:
        """Per epoch size (writes in flight): crash states built and seconds per state, over every cell."""
        merged: dict[int, tuple[int, float]] = {}
        for cell in self.cells:
            for size, count, spent in cell.costs:
                old = merged.get(size, (0, 0.0))
                merged[size] = (old[0] + count, old[1] + spent)
        return [(size, count, spent / count) for size, (count, spent) in sorted(merged.items())]


def kernel_study(
    *,
    file_systems: Sequence[str] | None = None,
    workloads: Sequence[str],
    configs: Sequence[str] | None = None,
    subsets: int = 16,
    seed: int = 0,
    progress: Callable[[KernelCell], None] | None = None,
    tick: Callable[[str, int, int], None] | None = None,
) -> KernelStudy:
    """Run the kernel study.

    Args:
        file_systems: names in ``FILESYSTEMS`` (default: ``DEFAULT_FILESYSTEMS``, ext4 at 1 KiB blocks).
        workloads: names in ``KERNEL_WORKLOADS``.
        configs: store configurations (``CONFIGS`` labels) for every file system (default:
            ``DEFAULT_CONFIGS`` per file system).
        subsets: the most non-prefix subsets per epoch.
        seed: the subsets' seed.
        progress: called with each finished cell.
        tick: called with (cell label, states done, states in all) while a cell is judged.

    Returns:
        The study.

    Raises:
        MissingSetupError: the machine lacks a named file system's mkfs or kernel support.
        KernelSetupError: the machine could not record or recover.
    """
    started = time.perf_counter()
    cells: list[KernelCell] = []
    names = tuple(file_systems or DEFAULT_FILESYSTEMS)
    reasons = [reason for name in names for reason in lacking(FILESYSTEMS[name])]
    if reasons:
        raise MissingSetupError(list(dict.fromkeys(reasons)))
    with workspace() as root:
        for fs_name in names:
            fs = FILESYSTEMS[fs_name]
            for label in configs or DEFAULT_CONFIGS[fs_name]:
                for name in workloads:
                    cell_root = root / f"{len(cells):03d}"
                    title = f"{fs_name} / {label} / {name}"

                    def ticking(done: int, total: int, title: str = title) -> None:
                        if tick is not None:
                            tick(title, done, total)

                    cell = kernel_cell(
                        KERNEL_WORKLOADS[name],
                        CONFIGS[label],
                        fs,
                        cell_root,
                        subsets=subsets,
                        seed=seed,
                        progress=ticking,
                    )
                    cells.append(cell)
                    if progress is not None:
                        progress(cell)
    return KernelStudy(tuple(cells), time.perf_counter() - started)


_GREEN, _RED, _GREY = "#5cb85c", "#d9534f", "#bbbbbb"


def comparison_svg(result: KernelStudy, *, configs: Sequence[str] = ("default",)) -> str:
    """The kernel-versus-model table as a picture: per workload and file system, a bar of the kernel's
    states (green inside the matching model, red outside) over a grey bar of the model's classes no state
    produced (its looseness). Only cells of the store configurations in ``configs``.

    Returns:
        The SVG document.
    """
    cells = [c for c in result.cells if c.config in configs]
    systems = list(dict.fromkeys(c.fs for c in cells))
    names = list(dict.fromkeys(c.workload for c in cells))
    by_key = {(c.fs, c.workload): c for c in cells}
    widest = max([c.states for c in cells] + [1])
    left, column, row, scale = 170, 230, 34, 180 / widest
    width, height = left + column * len(systems) + 10, 60 + row * len(names) + 40
    body = []

    def text(x: float, y: float, value: str, size: int = 12, anchor: str = "start") -> None:
        body.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-family="monospace">{html.escape(value)}</text>'
        )

    text(10, 20, "kernel crash states against the matching persistence model", 14)
    for i, fs in enumerate(systems):
        text(left + i * column, 45, f"{fs} ({FILESYSTEMS[fs].model})")
    for j, name in enumerate(names):
        y = 60 + j * row
        text(10, y + 16, name)
        for i, fs in enumerate(systems):
            cell = by_key.get((fs, name))
            if cell is None:
                continue
            x = left + i * column
            inside = cell.inside.get(cell.model, 0) * scale
            outside = cell.outside.get(cell.model, 0) * scale
            loose = cell.model_only.get(cell.model, 0) * scale
            body.append(f'<rect x="{x}" y="{y}" width="{inside:.1f}" height="12" fill="{_GREEN}"/>')
            red = x + inside
            body.append(f'<rect x="{red:.1f}" y="{y}" width="{outside:.1f}" height="12" fill="{_RED}"/>')
            body.append(f'<rect x="{x}" y="{y + 14}" width="{loose:.1f}" height="6" fill="{_GREY}"/>')
            text(x + inside + outside + 4, y + 11, f"{cell.states}", 10)
    y = 60 + row * len(names) + 14
    body.append(f'<rect x="10" y="{y}" width="10" height="10" fill="{_GREEN}"/>')
    text(24, y + 9, "inside the model", 11)
    body.append(f'<rect x="160" y="{y}" width="10" height="10" fill="{_RED}"/>')
    text(174, y + 9, "outside (model unsound)", 11)
    body.append(f'<rect x="360" y="{y + 2}" width="10" height="6" fill="{_GREY}"/>')
    text(374, y + 9, "model-only classes (looseness)", 11)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">\n<rect width="100%" height="100%" fill="white"/>\n'
        + "\n".join(body)
        + "\n</svg>\n"
    )
