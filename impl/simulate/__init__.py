"""The simulation of ``capture-ledger simulate`` (docs/simulate.md): real ``serve`` servers, a fake inference
worker inside them, a framework driver, and the report that puts the source's figures next to ours
(R-RETIRE-1..4, R-DELETE-1..3, R-WRITE-4..6, R-STORE-7). Imports ``spec.core``, ``impl.store`` and
``impl.http``; nothing on the production path imports it.
"""
