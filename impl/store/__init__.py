"""The production file store: what a model server embeds (SPEC.md §Store, R-STORE-1..8).

``file_store`` (``FileLineageStore``), the effects seam (``fs``), lock stripes (``locks``), the per-handle
cache (``cache``), the line format (``lines``), the one module that orders durable effects (``ordering``),
and the checker of a directory's consistency (``consistency``). Imports only ``spec.core``: never the
HTTP stack, the study tools or Hypothesis.
"""
