"""``check_crashes``: the crash states of any ledger, judged — the library form of ``capture-ledger crash
--target`` and the kit's third layer beside ``check_ledger`` and ``check_concurrency`` (SPEC.md §Crash,
R-CRASH-1..4, R-STATE-3, R-KIT-13; docs/crash-target.md, docs/kit.md).

``check_crashes(open_ledger)`` runs ``study_targets`` on one factory: every workload of the catalogue the
ledger's operations support, each traced with strace in a child process, every image each persistence
model allows read back by a fresh handle in another child process and judged. Because the ledger runs in
child processes, the factory must be importable there by name: a ``module:callable`` string, or a
module-level callable whose ``module:qualname`` names it again (a lambda, a closure, a bound method or a
callable defined in ``__main__`` is a ``TypeError`` saying so). The children import it with ``cwd`` first
on their ``sys.path`` (the current directory unless told), as ``capture-ledger verify`` does.

The answer is a ``CrashVerdict``: the one result shape of every checker (``result``: ``Ok``, ``Violation``,
``Unknown``; the kind is the ``--json`` object's ``verdict``), the ``TargetStudy`` behind it, and what was
not exercised (workloads the ledger cannot run, explorations judged on a sample, traces no model follows,
requested faults never injected).

Not guaranteed: coverage beyond the catalogue's workloads and the schedules the OS gave; that an
``Unknown`` hides no violation; anything about a ledger whose factory cannot be traced (that raises:
``TraceError``, as the command's exit 2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capture_ledger.spec.core.verdicts import Ok, Verdict, Violation, worst
from capture_ledger.spec.crash.durability import MODELS
from capture_ledger.spec.kit._targets import TargetError, load_target
from capture_ledger.spec.kit.crash._study import TargetStudy, study_targets
from capture_ledger.spec.kit.crash._workloads import WORKLOADS
from capture_ledger.spec.kit.crash.strace import PARK_DELAY, Target, TraceError, tracing_problem

__all__ = ["CrashVerdict", "check_crashes", "target_name"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashVerdict:
    """What ``check_crashes`` found.

    Attributes:
        result: ``Violation`` when a clause breaks under some model studied (the strongest such model's
            shortest counterexample: ``requirement`` is its clause, ``R-CRASH-n`` or ``R-STATE-3``,
            ``counterexample`` its rendered timeline, ``witness`` the ``CrashViolation``); else
            ``Unknown`` when some exploration was sampled, held an effect no model follows, or no workload
            ran (``spent`` and ``reason`` say which); else ``Ok``, its ``checked`` the clauses judged.
        target: the ``module:callable`` traced.
        study: the study behind the verdict: the matrix, every exploration, counterexample and recording.
        models: the persistence models studied, strongest first.
        workloads: the workloads run.
        images: crash images judged, over every workload and model.
        seconds: wall time, tracing included.
        skipped: ``(workload, why)`` for each workload not run: the ledger lacks an operation it needs (a
            partial ledger, R-KIT-10), or it writes our own store's format.
        sampled: ``(workload, model)`` for each exploration judged on a seeded sample of its images (beyond
            ``budget`` at some crash point): no violation there proves nothing.
        unsupported: ``(workload, why)`` for each trace with an effect no persistence model follows
            (a shared memory map, ``io_uring``, ...): nothing of it was judged.
        not_exercised: ``(workload, fault)`` for each requested fault the run never injected (the ledger
            made no call of that kind at that position): that workload's verdict is ``Unknown``, never
            ``Ok``, and ``str`` of the verdict names it.
    """

    result: Verdict
    target: str
    study: TargetStudy
    models: tuple[str, ...]
    workloads: tuple[str, ...]
    images: int
    seconds: float
    skipped: tuple[tuple[str, str], ...] = ()
    sampled: tuple[tuple[str, str], ...] = ()
    unsupported: tuple[tuple[str, str], ...] = ()
    not_exercised: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        ran = f"{len(self.workloads)} workload(s) × {len(self.models)} model(s), {self.images} images"
        if isinstance(self.result, Violation):
            return f"violation of {self.result.requirement} ({ran}):\n{self.result.counterexample}"
        if isinstance(self.result, Ok):
            return f"ok: {', '.join(self.result.checked)} hold on {ran} (every image judged)"
        missed = "".join(
            f"\nnot exercised: {w}: {fault} (fault not injected)" for w, fault in self.not_exercised
        )
        return f"unknown ({ran}): {self.result.reason}; {self.result.spent}".rstrip("; ") + missed


def target_name(open_ledger: Callable[..., Any] | str) -> str:
    """The ``module:callable`` a child process imports ``open_ledger`` by.

    Args:
        open_ledger: a ``module:callable`` string, or a callable importable by its module and qualified
            name.

    Returns:
        The target string.

    Raises:
        TypeError: ``open_ledger`` cannot be imported by name in another process (a lambda, a closure, a
            bound method, a ``functools.partial``, anything defined in ``__main__``).
        TargetError: a string that does not name a callable (``load_target``'s message).
    """
    if isinstance(open_ledger, str):
        load_target(open_ledger)
        return open_ledger
    module = getattr(open_ledger, "__module__", None)
    qualname = getattr(open_ledger, "__qualname__", None)
    advice = (
        "check_crashes runs the ledger in child processes, which import its factory by name: pass a "
        "module-level function or class, or a 'module:callable' string"
    )
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise TypeError(f"{open_ledger!r} has no module and qualified name; {advice}")
    if "<" in qualname:  # <lambda>, f.<locals>.g
        raise TypeError(f"{module}:{qualname} is a lambda or a closure; {advice}")
    if module == "__main__":
        raise TypeError(f"{qualname} is defined in __main__, which a child process cannot import; {advice}")
    name = f"{module}:{qualname}"
    try:
        found = load_target(name)
    except TargetError as error:
        raise TypeError(f"{name} cannot be imported again ({error}); {advice}") from error
    if found != open_ledger:
        raise TypeError(f"{name} names {found!r}, not {open_ledger!r} (a bound method?); {advice}")
    return name


def check_crashes(  # noqa: PLR0913 - the crash layer's public options, all keyword-only
    open_ledger: Callable[..., Any] | str,
    *,
    models: Sequence[str] | None = None,
    workloads: Sequence[str] | None = None,
    options: Mapping[str, Any] | None = None,
    budget: int = 256,
    seed: int = 0,
    first: bool = False,
    cwd: Path | None = None,
    park_delay: float = PARK_DELAY,
) -> CrashVerdict:
    """Judge every crash state of ``open_ledger``'s ledger that the persistence models allow, traced from
    outside (see the module docstring).

    Args:
        open_ledger: the factory, ``f(workspace, **options)`` returning a handle with the protocol's methods
            (coroutines allowed): a ``module:callable`` string or a module-level callable.
        models: persistence model names (``spec.crash.durability.MODELS``); ``None``: all of them. They are
            studied strongest first whatever the order given.
        workloads: workload names of the catalogue; ``None``: every one the ledger's operations support.
        options: keyword arguments for the factory (JSON values: they travel to the child processes).
        budget: most images judged per crash point; beyond it a seeded sample (the result is then
            ``Unknown`` unless a violation is found).
        seed: the sampling seed.
        first: stop at the first violation under the strongest model (the time to kill); the other models
            are then not studied.
        cwd: the directory the child processes import the factory from and run in (default: the current
            directory).
        park_delay: seconds a parked operation of a concurrent workload is held.

    Returns:
        The ``CrashVerdict``; whatever the ledger does once it runs (raise, hang, leave bytes it cannot
        read) is judged in it, never raised.

    Raises:
        TypeError: ``open_ledger`` is a callable a child process cannot import by name.
        TargetError: the target string does not name a callable (a ``ValueError``).
        ValueError: an unknown model or workload.
        TraceError: this machine cannot trace (strace missing, ptrace not permitted), or the ledger cannot
            be opened or traced (a ``RuntimeError``).
    """
    name = target_name(open_ledger)
    unknown = sorted({*(models or ())} - set(MODELS)) + sorted({*(workloads or ())} - set(WORKLOADS))
    if unknown:
        known = ", ".join([*MODELS, *WORKLOADS])
        raise ValueError(f"unknown model or workload {', '.join(unknown)}; known: {known}")
    problem = tracing_problem()
    if problem is not None:
        raise TraceError(f"cannot trace {name}: {problem}")
    target = Target(target=name, options=tuple((options or {}).items()), cwd=cwd or Path.cwd())
    study = study_targets(
        [target],
        models=models,
        workloads=workloads,
        budget=budget,
        seed=seed,
        park_delay=park_delay,
        first=first,
    )
    explorations = study.explorations(target.name)
    return CrashVerdict(
        result=worst(study.result(target.name, m) for m in study.models),
        target=name,
        study=study,
        models=study.models,
        workloads=study.workloads,
        images=sum(e.images for e in explorations),
        seconds=study.seconds,
        skipped=tuple((w, why) for _, w, why in study.skipped),
        sampled=tuple((e.workload, e.model) for e in explorations if e.sampled),
        unsupported=tuple((w, why) for _, w, why in study.unsupported()),
        not_exercised=tuple((w, fault) for _, w, fault in study.not_exercised()),
    )
