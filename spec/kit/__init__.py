"""The conformance kit: what a ledger author runs against their own ledger (SPEC.md §Conformance, R-KIT-1..8).

``conformance`` is the Hypothesis state machine driven by the model, ``strategies`` and ``profiles`` its
inputs and budgets, ``calls`` how it calls the ledger under study (one worker thread, a budget per call),
and ``recorder`` records histories of real calls for the linearizability checker. This is the only part of
``spec`` that imports Hypothesis; ``capture_ledger.spec`` loads it lazily, so a model server that only
needs the protocol and the errors never pays for it.
"""
