"""The matrix every crash study fills: rows (a store configuration, or a traced target) × workloads ×
persistence models, one exploration per cell and model (SPEC.md §Crash, R-CRASH-1..4, R-STATE-3).

``CrashCell`` is one row on one workload: its recording and one ``CrashExploration`` per model.
``CrashStudy`` holds the cells and answers what both studies ask of them — the seam study of our own store
(``impl.study.crash.Study``) and the study of any ledger traced from outside (``TargetStudy``), which add
only what is theirs: which clauses a row breaks under a model, its verdict (``result``: the ``worst`` of its
explorations' results, a ``Violation`` being the row's shortest counterexample), the shortest
counterexamples with their recordings, the totals, what no model could follow, the faults requested and
injected and those never injected (``not_exercised``: such a cell is "unknown"), and the exit status of the
crash commands (``exit_code``). It is the ``MatrixSource`` the pictures take (``matrix_svg``,
``matrix_table``). The Markdown sections both reports share are ``report``'s.

Not guaranteed: anything the explorations do not (a sampled cell without a violation is ``Unknown``, never
``Ok``; coverage is the recorded schedules of the workloads run).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capture_ledger.spec.core.verdicts import EXIT_OK, Ok, Unknown, Verdict, Violation, exit_code, worst
from capture_ledger.spec.kit.crash._exploration import CrashExploration, violation_of
from capture_ledger.spec.kit.crash._judgement import CrashViolation
from capture_ledger.spec.kit.crash._positions import describe_fault
from capture_ledger.spec.kit.crash._trace import Recording

__all__ = ["CrashCell", "CrashStudy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashCell:
    """One row of a study on one workload: its recording and one exploration per model.

    ``config`` is the row's label, as the recording's configuration names it (a store configuration, or a
    traced target's name); ``record_seconds`` the time recording it took (tracing, for a target).
    """

    config: str
    workload: str
    recording: Recording
    explorations: tuple[CrashExploration, ...]
    record_seconds: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashStudy:
    """Every cell of a crash study, its axes and its figures (see the module docstring).

    Attributes:
        cells: in study order: row by row, workload by workload.
        models: the persistence models, strongest first as ``spec.crash.durability.MODELS`` lists them.
        configs: the rows' labels (store configurations, or targets).
        workloads: the workloads run.
        seconds: wall time of the whole study, recording included.
        budget: most images judged per crash point.
        seed: the sampling seed.
        notes: free remarks a report prints.
    """

    cells: tuple[CrashCell, ...]
    models: tuple[str, ...]
    configs: tuple[str, ...]
    workloads: tuple[str, ...]
    seconds: float
    budget: int
    seed: int
    notes: tuple[str, ...] = field(default=())

    def explorations(self, config: str | None = None, model: str | None = None) -> list[CrashExploration]:
        """The explorations of row ``config`` under ``model`` (each ``None``: all), in study order."""
        return [
            e
            for cell in self.cells
            if config is None or cell.config == config
            for e in cell.explorations
            if model is None or e.model == model
        ]

    def clauses(self, config: str, model: str) -> frozenset[str]:
        """The clauses row ``config`` breaks under ``model``, over every workload."""
        found: set[str] = set()
        for e in self.explorations(config, model):
            found |= e.clauses
        return frozenset(found)

    def matrix(self) -> dict[str, dict[str, frozenset[str]]]:
        """row → model → clauses broken."""
        return {c: {m: self.clauses(c, m) for m in self.models} for c in self.configs}

    def result(self, config: str, model: str) -> Verdict:
        """Row ``config`` under ``model`` as a checker's result: the ``worst`` of its explorations' results,
        a ``Violation`` being its shortest counterexample over the workloads, an ``Ok`` listing every clause
        judged (sorted); ``Unknown`` when no workload ran on it."""
        found = self.explorations(config, model)
        if not found:
            return Unknown(reason=f"no workload ran on {config} under {model}")
        example = self.shortest(config, model)
        if example is not None:
            return violation_of(example)
        verdict = worst(e.result for e in found)
        if isinstance(verdict, Ok):
            ran = ", ".join(dict.fromkeys(e.workload for e in found))
            return Ok(checked=tuple(sorted(verdict.checked)), detail=f"{ran} under {model}: every image")
        return verdict

    def verdict(self, config: str, model: str) -> str:
        """``violation``, ``ok`` (every image of every workload judged) or ``unknown`` (some sampled or not
        followed, or nothing ran): the kind of ``result``."""
        return self.result(config, model).kind

    def model_verdict(self, config: str, model: str) -> str:
        """Row ``config`` under ``model`` in a word: ``broken`` (a clause breaks), ``ok`` (every image of
        every workload judged, none broke), ``none found (sampled)`` (no violation, but some exploration was
        judged on a sample only) or ``unknown`` (an effect no model follows, a requested fault never
        injected, or nothing ran)."""
        result = self.result(config, model)
        if isinstance(result, Violation):
            return "broken"
        if isinstance(result, Ok):
            return "ok"
        found = self.explorations(config, model)
        if found and not any(e.unsupported or e.not_exercised for e in found):
            return "none found (sampled)"
        return "unknown"

    def deciding_model(self) -> str | None:
        """The model whose result decides the crash commands' exit status: the strongest studied
        (``journaled`` when it runs), ``None`` when none was."""
        return self.models[0] if self.models else None

    def shortest(
        self, config: str, model: str | None = None, *, clause: str | None = None
    ) -> CrashViolation | None:
        """The shortest counterexample of row ``config`` (under ``model`` and breaking ``clause``; each
        ``None``: any): fewest effects before the crash, then fewest files, then the strongest model, then
        the workload ``workload_rank`` puts first."""
        models = {m: i for i, m in enumerate(self.models)}
        found = [
            v
            for e in self.explorations(config, model)
            for v in e.examples
            if clause is None or clause in v.clauses
        ]
        return min(
            found,
            key=lambda v: (*v.size(), models.get(v.model, len(models)), self.workload_rank(v.workload)),
            default=None,
        )

    def workload_rank(self, workload: str) -> tuple[int, str]:
        """Where ``workload`` stands when two counterexamples are equally short: the study's order (the
        catalogue's, simplest first, unless the workloads were chosen)."""
        return (self.workloads.index(workload) if workload in self.workloads else len(self.workloads), "")

    def recording_of(self, violation: CrashViolation) -> Recording:
        """The recording ``violation`` was explored from (its row and workload's cell).

        Raises:
            KeyError: no cell of this study has that row and workload.
        """
        for cell in self.cells:
            if cell.config == violation.config and cell.workload == violation.workload:
                return cell.recording
        raise KeyError((violation.config, violation.workload))

    def totals(self) -> tuple[int, int, float]:
        """Images judged, distinct images read, seconds spent exploring."""
        found = self.explorations()
        return (
            sum(e.images for e in found),
            sum(e.distinct for e in found),
            sum(e.seconds for e in found),
        )

    def unsupported(self) -> list[tuple[str, str, str]]:
        """``(row, workload, reason)`` for each recording with an effect no model follows."""
        seen: dict[tuple[str, str], str] = {}
        for cell in self.cells:
            for e in cell.explorations:
                if e.unsupported:
                    seen[cell.config, cell.workload] = e.unsupported
        return [(c, w, r) for (c, w), r in seen.items()]

    def not_exercised(self) -> list[tuple[str, str, str]]:
        """``(row, workload, fault)`` for each requested fault a recording never injected (the operation
        made no such call): that cell's verdict is "unknown", never "ok"."""
        return [
            (cell.config, cell.workload, text)
            for cell in self.cells
            for text in (cell.explorations[0].not_exercised if cell.explorations else ())
        ]

    def faults(self, config: str) -> list[dict[str, object]]:
        """For each workload of row ``config`` that requests faults: the faults requested and those the
        run actually injected (``positions.describe_fault``)."""
        return [
            {
                "workload": cell.workload,
                "requested": [describe_fault(f) for f in cell.recording.workload.faults],
                "injected": [describe_fault(f) for f in cell.recording.injected],
            }
            for cell in self.cells
            if cell.config == config and cell.recording.workload.faults
        ]

    def exit_code(self, model: str | None = None, configs: tuple[str, ...] | None = None) -> int:
        """The crash commands' acceptance: 1 (``exit_code`` of the ``Violation``) when a row of ``configs``
        (default: every row) breaks a clause under ``model`` (default: the strongest studied), else 0. An
        ``Unknown`` cell (sampled, not followed) is reported, not failed: the commands exit 0 on it."""
        chosen = model if model is not None else self.deciding_model()
        if chosen is None:
            return EXIT_OK
        verdict = worst(self.result(c, chosen) for c in (self.configs if configs is None else configs))
        return exit_code(verdict) if isinstance(verdict, Violation) else EXIT_OK
