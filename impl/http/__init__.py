"""The HTTP control plane (SPEC.md §HTTP, R-HTTP-1..5): the FastAPI routes (``server``), the worker processes
(``serving``), the bearer-token rule (``auth``), metrics, and the sync and async clients with their shared
batching (``client``, ``batching``). Imports ``spec.core`` and ``impl.store``; never the study tools.
"""
