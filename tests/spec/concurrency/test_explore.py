"""Tests of the explorer's output and of ``capture-ledger explore`` (impl/cli/explore.py).

What they prove: a counterexample prints as a numbered step trace that starts from the empty directory;
the history the explorer judges realises the execution's real-time order; the CLI reports states and
verdicts, and prints the ablation table and the manifest's JSON. ``check-history`` is tested in
tests/spec/concurrency/test_history_cli.py.
"""

from __future__ import annotations

import json

import pytest
from capture_ledger.impl.cli.main import main
from capture_ledger.spec.concurrency import successor
from capture_ledger.spec.concurrency.explore import CONFIGURATIONS, explore, history_of, replay
from capture_ledger.spec.concurrency.linearizability import Ok, Violation, check_history
from capture_ledger.spec.concurrency.steps import Guards, initial_state
from capture_ledger.spec.core import model


def test_a_counterexample_prints_as_numbered_steps() -> None:
    run = explore(CONFIGURATIONS["retire-vs-late-write"], Guards().without("fence_lookup_on_write"))
    assert run.counterexample is not None
    text = str(run.counterexample).splitlines()
    assert text[0] == "R-CONC-2 retired stays retired violated after 19 steps:"
    assert text[1] == "  1. client 0 (record a m1) lock stripe of a"
    assert text[19] == "  19. client 2 (record a m2) create ledger of a with m2"
    # As the shared verdict: a violation of the property's requirement, its counterexample the trace.
    assert run.result == Violation(
        requirement="R-CONC-2", counterexample=str(run.counterexample), witness=run.counterexample
    )
    passed = explore(CONFIGURATIONS["retire-vs-late-write"])
    assert passed.ok and isinstance(passed.result, Ok)
    assert passed.result.checked == ("R-CONC-1", "R-CONC-2", "R-CONC-3", "R-STORE-9")


@pytest.mark.parametrize("guard", ["recheck_fence", "cache_coherence"])
def test_a_counterexample_replays(guard: str) -> None:
    # The schedule reproduces the same steps and a state that violates the property again.
    config = CONFIGURATIONS["retire-vs-delete-reuse" if guard == "recheck_fence" else "delete-vs-write"]
    guards = Guards().without(guard)
    run = explore(config, guards)
    assert run.counterexample is not None
    texts, state = replay(config, guards, run.counterexample.schedule)
    assert tuple(texts) == run.counterexample.steps
    if guard == "recheck_fence":
        assert state.broken
    else:
        assert isinstance(check_history(history_of(config, state)), Violation)
    with pytest.raises(ValueError, match="cannot move"):
        replay(config, guards, [1])  # a concurrent client before the setup is done


def test_the_history_realises_the_real_time_order() -> None:
    config = CONFIGURATIONS["retire-vs-late-write"]
    guards = Guards()
    state = initial_state(config)
    # The setup write, the retire's phase 1, the whole late write, then the retire's phase 2.
    for client in [0] * 7 + [1] * 5 + [2] * 5 + [1] * 5:
        step = successor(config, guards, state, client)
        assert step is not None, client
        state = step[1]
    events = history_of(config, state)
    setup, retire, write = events[0], events[1], events[2]
    assert setup.returned is not None and retire.returned is not None and write.returned is not None
    # Only "returned before invoked" is realised: two invocations with no return between may tie.
    assert setup.returned < retire.invoked <= write.invoked < write.returned < retire.returned
    assert write.result == model.Ok(None)  # appended to the fenced ledger, which phase 2 unlinks
    finals = events[3:]
    assert [type(e.op).__name__ for e in finals] == ["ReadManifest", "Admit"]
    assert all(e.invoked > retire.returned for e in finals)
    assert finals[0].result == model.Err(model.ErrorKind.ROLLOUT_RETIRED)


def test_explore_cli_reports_states_and_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", "--config", "retire-vs-late-write"]) == 0
    out = capsys.readouterr().out
    assert "retire-vs-late-write: 61 states, 5 complete executions" in out
    assert ": ok" in out


def test_explore_cli_prints_the_ablation_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", "--config", "admit-vs-retire", "--ablate"]) == 0
    out = capsys.readouterr().out
    assert "| admit_checks_fence" in out
    row = next(line for line in out.splitlines() if line.startswith("admit-vs-retire "))
    assert "lin@22" in row
    assert "without admit_checks_fence, shortest counterexample (admit-vs-retire):" in out
    assert main(["explore", "--config", "admit-vs-retire", "--ablate", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["configurations"]["admit-vs-retire"]["states"] == 137
    assert data["ablation"]["admit_checks_fence"]["admit-vs-retire"] == {
        "property": "linearizability",
        "steps": 22,
    }


def test_every_property_has_a_short_name_in_the_ablation_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The combining configurations break a property the table once had no name for (it raised KeyError)."""
    from capture_ledger.impl.cli.explore import _SHORT
    from capture_ledger.spec.concurrency.explore import PROPERTIES

    assert set(PROPERTIES) <= set(_SHORT)
    assert main(["explore", "--config", "combine-overlapping-retires", "--ablate"]) == 0
    rows = capsys.readouterr().out.splitlines()
    row = next(line for line in rows if line.startswith("combine-overlapping-retires |"))
    assert "STORE-9b@18" in row
