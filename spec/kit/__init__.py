"""The conformance kit: what a ledger author runs against their own ledger (SPEC.md §Conformance,
R-KIT-1..11).

``conformance`` holds the entry points (``check_ledger``, ``judge_ledger``, ``conformance_test_case``);
``machine`` is the Hypothesis state machine driven by the model; ``compare`` compares one call's outcome
with the model's result; ``classify`` says which requirement a difference breaks, ``requirements`` quotes
it from SPEC.md, lists the kit's scope and gives each requirement its failure class; ``operations`` is the
start-up protocol check and the choice of methods for partial ledgers; ``verdict`` the result;
``strategies`` and ``profiles`` the machine's inputs and budgets; ``calls`` how it calls the ledger under
study (one worker thread, a budget per call); ``recorder`` records histories of real calls for the
linearizability checker; ``pytest_plugin`` is ``pytest --capture-ledger``. This is the only part of
``spec`` that imports Hypothesis; ``capture_ledger.spec`` loads it lazily, so a model server that only
needs the protocol and the errors never pays for it.
"""
