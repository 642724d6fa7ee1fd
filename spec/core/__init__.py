"""The sequential core of the spec: rollout IDs, errors, rows, the ``CaptureLedger`` protocol, the pure model
``step(state, op) -> (state, result)``, the abstraction function, the tables generated from the model and the
CrossHair contracts (SPEC.md §IDs, §Batches, §States, §Operations).

Everything here is pure: no files, no clock, no Hypothesis. Every other part of the project builds on it.
"""
