"""capture-ledger: an executable specification of the capture ledger, a reference ledger, and the
production file store that conforms to it.

Sub-packages:
    capture_ledger.spec: the model, the ID rules, the protocol and the conformance kit.
    capture_ledger.reference: a minimal, obviously-correct in-memory ledger.
    capture_ledger.impl: the file store, HTTP control plane, CLI and explorers.

Nothing is imported eagerly here, so ``import capture_ledger.spec`` stays light.
"""

__all__: list[str] = ["__version__"]

__version__ = "0.1.0"
