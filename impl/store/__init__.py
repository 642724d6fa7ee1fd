"""The production file store: what a model server embeds (SPEC.md §Store, R-STORE-1..10).

``file_store`` (``FileLineageStore``), the effects seam (``fs``), lock stripes (``locks``), the per-handle
cache (``cache``), the line format (``lines``) and its fast canonical JSON (``canonical``), the one module
that orders durable effects (``ordering``), the syncs concurrent removals share (``syncs``, R-STORE-9), the
file system under the directory and its fence sync (``filesystems``, R-STORE-10), and the checker of a
directory's consistency (``consistency``). Imports only ``spec.core``: never the
HTTP stack, the study tools or Hypothesis.
"""
