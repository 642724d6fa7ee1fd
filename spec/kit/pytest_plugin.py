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

Options: ``--capture-ledger-handles N`` (default 1) and ``--capture-ledger-operations a,b,...`` (default:
the methods the ledger has). The Hypothesis settings are the active profile (``--hypothesis-profile``, or a
profile the project loads), or ``$CAPTURE_LEDGER_PROFILE``'s when that is set; a per-example deadline is
turned off, since the kit bounds each call itself (R-KIT-8). Under pytest-xdist every worker that runs an
item judges the ledger again: run with ``-p no:xdist`` or ``-n 0``.

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

_VERDICT = pytest.StashKey[Any]()


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
        help="protocol methods to check (default: the ones the ledger has)",
    )


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


class CaptureLedgerCollector(pytest.Collector):
    """The plugin's items, one per requirement group."""

    def collect(self) -> Iterator[pytest.Item]:
        """One ``RequirementGroupItem`` per group of ``GROUPS``."""
        for name, members in GROUPS:
            yield RequirementGroupItem.from_parent(self, name=name, members=members)


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
    """The kit's figures: target, operations, examples, steps, seconds, requirements checked and broken."""
    if _VERDICT not in config.stash:
        return
    verdict = config.stash[_VERDICT]
    terminalreporter.write_sep("=", "capture-ledger")
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
