"""The conformance kit as a pytest plugin: ``pytest --capture-ledger mypkg.ledgers:open_ledger`` (SPEC.md
§Conformance, R-KIT-1..11; docs/kit.md §pytest).

Registered through the ``pytest11`` entry point, so pytest loads it in every run of every project that has
capture-ledger installed: at import it loads nothing but pytest (which is loaded already) and the standard
library; the kit and Hypothesis are imported only when ``--capture-ledger`` is given. Then it adds one test
item per group of requirements (IDs, batches, writes, admission, reads, retire, delete, handles, calls),
named ``capture-ledger::<group>``. The first item to run judges the ledger once, with every broken
requirement (``judge_ledger(..., every=True)``); each item then passes when its group's checked
requirements hold, fails with each broken one's message and counterexample, and is skipped when the
ledger lacks the methods its group needs. The terminal summary prints the kit's figures.

With the ``stress`` layer it adds ``capture-ledger::stress-threads`` and ``capture-ledger::stress-processes``
(``check_target(..., layers=("stress",))``: threads, then worker processes when the handles share state
across processes; the processes item is skipped with why when they do not, or when the threads' run
already broke). With the ``crash`` layer, one item per crash requirement, ``capture-ledger::crash-R-CRASH-1``
.. ``crash-R-CRASH-4`` and ``crash-R-STATE-3``, judged by one ``check_crashes`` run per session under the
deciding model (the strongest studied, ``journaled``; the weaker ones inform, in the terminal summary).
A layer that cannot run here (``strace`` missing or not permitted, a factory a child cannot import) is
skipped with why; a layer that ran and could not decide (a budget ran out, images sampled, a fault never
injected) is an **xfail** with why: never a pass, never a failure of the ledger, and the summary says
"undecided".

Options: ``--capture-ledger-layers kit,stress,crash`` (default: all three, as ``capture-ledger check``),
``--capture-ledger-handles N`` (default 1, the kit's and stress's), ``--capture-ledger-operations a,b,...``
(the kit's; default: the methods the ledger has) and ``--capture-ledger-crash-workloads a,b,...`` (default:
every crash workload the ledger supports). The Hypothesis settings are the active profile
(``--hypothesis-profile``, or a profile the project loads), or ``$CAPTURE_LEDGER_PROFILE``'s when that is
set; a per-example deadline is turned off, since the kit bounds each call itself (R-KIT-8). Under
pytest-xdist every worker that runs an item judges the ledger again (and runs stress and crash again): run
with ``-p no:xdist`` or ``-n 0``.

Not guaranteed: the item names' wording beyond the group names.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: The items: a group name and the requirement IDs (or ID prefixes) it holds.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ids", ("R-ID-",)),
    ("batches", ("R-BATCH-",)),
    ("writes", ("R-WRITE-",)),
    ("admission", ("R-ADMIT-",)),
    ("reads", ("R-READ-",)),
    ("retire", ("R-RETIRE-",)),
    ("delete", ("R-DELETE-",)),
    ("handles", ("R-KIT-4",)),
    ("calls", ("R-KIT-7", "R-KIT-8", "R-KIT-14")),
)

#: The crash layer's items: the requirements ``check_crashes`` judges.
CRASH_REQUIREMENTS: tuple[str, ...] = ("R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4", "R-STATE-3")
#: The layers the plugin runs, in order; all of them by default (as ``capture-ledger check``).
PLUGIN_LAYERS: tuple[str, ...] = ("kit", "stress", "crash")

_VERDICT = pytest.StashKey[Any]()
_STRESS = pytest.StashKey[Any]()
_CRASH = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's options."""
    group = parser.getgroup("capture-ledger", "capture ledger conformance (capture-ledger's kit)")
    group.addoption(
        "--capture-ledger",
        metavar="MODULE:FACTORY",
        default=None,
        help="check the ledgers FACTORY(workspace) opens against the capture-ledger spec",
    )
    group.addoption(
        "--capture-ledger-handles",
        type=int,
        default=1,
        metavar="N",
        help="handles opened on one workspace, as workers of one model server (default 1)",
    )
    group.addoption(
        "--capture-ledger-operations",
        default=None,
        metavar="A,B,...",
        help="protocol methods the sequential kit checks (default: the ones the ledger has)",
    )
    group.addoption(
        "--capture-ledger-layers",
        default=",".join(PLUGIN_LAYERS),
        metavar="LAYER,...",
        help=f"layers to run as items, among {', '.join(PLUGIN_LAYERS)} (default: all of them)",
    )
    group.addoption(
        "--capture-ledger-crash-workloads",
        default=None,
        metavar="W,...",
        help="crash workloads of the crash layer (default: every one the ledger supports)",
    )


def _layers(config: pytest.Config) -> tuple[str, ...]:
    text = config.getoption("capture_ledger_layers") or ""
    chosen = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    unknown = sorted(set(chosen) - set(PLUGIN_LAYERS))
    if unknown or not chosen:
        raise pytest.UsageError(
            f"--capture-ledger-layers {text!r}: the layers are {', '.join(PLUGIN_LAYERS)} (comma-separated)"
        )
    return chosen


def _csv(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(p.strip() for p in text.split(",") if p.strip())


def _in_group(requirement: str, members: tuple[str, ...]) -> bool:
    return any(requirement == m or (m.endswith("-") and requirement.startswith(m)) for m in members)


def _load(target: str) -> Any:
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise pytest.UsageError(f"--capture-ledger {target!r}: a target is module:callable")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as error:
        raise pytest.UsageError(f"--capture-ledger {target!r}: {type(error).__name__}: {error}") from None
    if not callable(value):
        raise pytest.UsageError(f"--capture-ledger {target!r} is not callable")
    return value


def _judge(config: pytest.Config) -> Any:
    """The verdict, judged once per session (``judge_ledger(..., every=True)``)."""
    if _VERDICT in config.stash:
        return config.stash[_VERDICT]
    from capture_ledger.spec.kit._profiles import PROFILE_ENV, profile_settings
    from capture_ledger.spec.kit.sequential import judge_ledger
    from hypothesis import HealthCheck, settings

    target = config.getoption("capture_ledger")
    base = profile_settings() if os.environ.get(PROFILE_ENV) else settings()
    chosen = settings(
        base,
        deadline=None,
        suppress_health_check=[
            *base.suppress_health_check,
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
        ],
    )
    text = config.getoption("capture_ledger_operations")
    operations = None if text is None else tuple(p.strip() for p in text.split(",") if p.strip())
    try:
        verdict: Any = judge_ledger(
            _load(target),
            handles=config.getoption("capture_ledger_handles"),
            settings=chosen,
            operations=operations,
            every=True,
            target=target,
        )
    except Exception as error:  # no verdict (KitError, a bad option): every item reports it
        verdict = error
    config.stash[_VERDICT] = verdict
    return verdict


def _stress(config: pytest.Config) -> Any:
    """The stress layer's ``LayerReport``, once per session (``check_target(..., layers=("stress",))``)."""
    if _STRESS in config.stash:
        return config.stash[_STRESS]
    from capture_ledger.spec.kit import check_target

    target = config.getoption("capture_ledger")
    _load(target)
    try:
        found = check_target(target, layers=("stress",), handles=config.getoption("capture_ledger_handles"))
        report: Any = next(layer for layer in found.layers if layer.layer == "stress")
    except Exception as error:  # no verdict (a bad option, a target error): every stress item reports it
        report = error
    config.stash[_STRESS] = report
    return report


def _crash(config: pytest.Config) -> Any:
    """The crash layer's ``CrashVerdict`` (once per session), or the ``Skipped`` reason it cannot run."""
    if _CRASH in config.stash:
        return config.stash[_CRASH]
    from capture_ledger.spec.kit.crash import check_crashes
    from capture_ledger.spec.kit.crash.strace import TraceError

    target = config.getoption("capture_ledger")
    _load(target)
    found: Any
    try:
        found = check_crashes(target, workloads=_csv(config.getoption("capture_ledger_crash_workloads")))
    except (TraceError, TypeError) as error:  # cannot run here: each crash item is skipped, with why
        found = _CannotRun(str(error))
    except Exception as error:  # no verdict (an unknown workload): every crash item reports it
        found = error
    config.stash[_CRASH] = found
    return found


class _CannotRun:
    """Why a layer cannot run on this machine (a skip, never a pass)."""

    def __init__(self, why: str) -> None:
        self.why = why


class CaptureLedgerFailure(AssertionError):  # noqa: N818 -- a verdict
    """Requirements of one group are broken; the text holds each one's message and counterexample."""


class RequirementGroupItem(pytest.Item):
    """The requirements of one group, judged by the session's one run of the kit."""

    def __init__(self, *, members: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.members = members

    def runtest(self) -> None:
        """Pass, fail with the group's broken requirements, or skip when none of them is checked."""
        verdict = _judge(self.config)
        if isinstance(verdict, Exception):
            raise verdict
        mine = [r for r in verdict.checked if _in_group(r, self.members)]
        if not mine:
            missing = [r for r in verdict.not_checked if _in_group(r, self.members)]
            pytest.skip(f"not checked: {', '.join(missing)} (operations {', '.join(verdict.operations)})")
        broken = [b for b in verdict.broken if _in_group(b.requirement, self.members)]
        if broken:
            raise CaptureLedgerFailure(
                "\n\n".join(
                    f"{b.message}\n\nCounterexample (paste into a Python session):\n{b.counterexample}"
                    for b in broken
                )
            )

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        """The broken requirements as text, without a traceback of the kit."""
        if isinstance(excinfo.value, CaptureLedgerFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, None, str]:
        """Where the item comes from: the target, for the report."""
        return self.path, None, f"capture-ledger {self.name} of {self.config.getoption('capture_ledger')}"


class StressRunItem(RequirementGroupItem):
    """One run of the stress layer (``threads`` or ``processes``), judged for linearizability (R-CONC-1..)."""

    def runtest(self) -> None:
        """Pass, fail with the run's witness, skip when the run was not made (why), xfail when undecided."""
        report = _stress(self.config)
        if isinstance(report, Exception):
            raise report
        run = self.members[0]
        found = report.coverage.get("runs", {}).get(run)
        if found is None or isinstance(found, str):
            pytest.skip(f"stress {run}: {found or 'not run'}")
        if found["verdict"] == "violation":
            runs = [r for r in ("threads", "processes") if isinstance(report.coverage["runs"].get(r), dict)]
            violated = [r for r in runs if report.coverage["runs"][r]["verdict"] == "violation"]
            broken = report.broken[violated.index(run)]
            raise CaptureLedgerFailure(
                f"{broken['requirement']} broken on {run} (seed {found['seed']}, {found['calls']} calls):\n"
                f"{broken['counterexample']}"
            )
        if found["verdict"] != "ok":
            pytest.xfail(f"undecided: stress {run}: {report.why_skipped or found['verdict']}")


class CrashRequirementItem(RequirementGroupItem):
    """One crash requirement under the deciding model (the strongest studied, ``journaled``)."""

    def runtest(self) -> None:
        """Fail with the shortest counterexample; pass when every image was judged on the requirement; skip
        when the layer cannot run here or no workload judged it; xfail when the deciding model's result is
        undecided (sampled, an effect no model follows, a fault never injected)."""
        from capture_ledger.spec.core.verdicts import Ok

        found = _crash(self.config)
        if isinstance(found, _CannotRun):
            pytest.skip(f"the crash layer cannot run here: {found.why}")
        if isinstance(found, Exception):
            raise found
        requirement = self.members[0]
        if not found.models:
            pytest.skip("no persistence model studied")
        deciding, name = found.models[0], _crash_row(found)
        example = found.study.shortest(name, deciding, clause=requirement)
        if example is not None:
            raise CaptureLedgerFailure(f"{requirement} broken under {deciding}:\n{example.render()}")
        result = found.study.result(name, deciding)
        if isinstance(result, Ok):
            if requirement not in result.checked:
                pytest.skip(f"not judged: no crash workload run judges {requirement} under {deciding}")
            return
        pytest.xfail(f"undecided: crash under {deciding}: {getattr(result, 'reason', result)}")


def _crash_row(found: Any) -> str:
    """The row of ``found.study`` that holds the target (the study of one target has one)."""
    return str(found.study.configs[0]) if found.study.configs else str(found.target)


class CaptureLedgerCollector(pytest.Collector):
    """The plugin's items: one per requirement group, per stress run and per crash requirement."""

    def collect(self) -> Iterator[pytest.Item]:
        """The items of the layers ``--capture-ledger-layers`` chooses, in the layers' order."""
        layers = _layers(self.config)
        if "kit" in layers:
            for name, members in GROUPS:
                yield RequirementGroupItem.from_parent(self, name=name, members=members)
        if "stress" in layers:
            for run in ("threads", "processes"):
                yield StressRunItem.from_parent(self, name=f"stress-{run}", members=(run,))
        if "crash" in layers:
            for requirement in CRASH_REQUIREMENTS:
                yield CrashRequirementItem.from_parent(
                    self, name=f"crash-{requirement}", members=(requirement,)
                )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add the groups' items when ``--capture-ledger`` is given (before ``-k`` and ``-m`` select)."""
    if not config.getoption("capture_ledger"):
        return
    collector = CaptureLedgerCollector.from_parent(session, name="capture-ledger", nodeid="capture-ledger")
    items.extend(collector.collect())


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The kit's figures (target, operations, examples, steps, seconds, requirements checked and broken),
    then a line for the stress layer and one per model of the crash layer, when they ran."""
    if not any(key in config.stash for key in (_VERDICT, _STRESS, _CRASH)):
        return
    terminalreporter.write_sep("=", "capture-ledger")
    if _VERDICT in config.stash:
        _kit_summary(terminalreporter, config.stash[_VERDICT])
    if _STRESS in config.stash:
        report = config.stash[_STRESS]
        if isinstance(report, Exception):
            terminalreporter.write_line(f"stress: no verdict: {type(report).__name__}: {report}")
        else:
            word = "undecided" if report.verdict == "unknown" else report.verdict
            runs = "; ".join(
                f"{run} {found['verdict']} ({found['calls']} calls)"
                if isinstance(found, dict)
                else f"{run} {found}"
                for run, found in report.coverage.get("runs", {}).items()
            )
            why = f": {report.why_skipped}" if report.why_skipped else ""
            terminalreporter.write_line(f"stress: {word}{why}; {runs}")
    if _CRASH in config.stash:
        _crash_summary(terminalreporter, config.stash[_CRASH])


def _crash_summary(terminalreporter: Any, found: Any) -> None:
    if isinstance(found, _CannotRun):
        terminalreporter.write_line(f"crash: skipped: {found.why}")
        return
    if isinstance(found, Exception):
        terminalreporter.write_line(f"crash: no verdict: {type(found).__name__}: {found}")
        return
    name = _crash_row(found)
    for index, model in enumerate(found.models):
        word = found.study.model_verdict(name, model)
        word = "undecided, none found (sampled)" if word == "none found (sampled)" else word
        clauses = ", ".join(sorted(found.study.clauses(name, model)))
        role = "decides" if index == 0 else "informs"
        terminalreporter.write_line(f"crash: {model} ({role}): {word}{': ' + clauses if clauses else ''}")
    terminalreporter.write_line(
        f"crash: {found.images} images, workloads {', '.join(found.workloads) or 'none'}"
    )


def _kit_summary(terminalreporter: Any, verdict: Any) -> None:
    if isinstance(verdict, Exception):
        terminalreporter.write_line(f"no verdict: {type(verdict).__name__}: {verdict}")
        return
    state = "conforms" if verdict.conforms else "DOES NOT CONFORM"
    terminalreporter.write_line(f"{verdict.target} (handles={verdict.handles}): {state}")
    terminalreporter.write_line(f"operations: {', '.join(verdict.operations)}")
    terminalreporter.write_line(f"checked: {', '.join(verdict.checked)}")
    terminalreporter.write_line(f"not checked: {', '.join(verdict.not_checked) or 'none'}")
    if verdict.broken:
        terminalreporter.write_line(f"broken: {', '.join(b.requirement for b in verdict.broken)}")
    rate = verdict.steps / verdict.seconds if verdict.seconds else 0.0
    terminalreporter.write_line(
        f"{verdict.examples} examples, {verdict.steps} steps in {verdict.seconds:.1f} s ({rate:.0f} steps/s)"
    )
