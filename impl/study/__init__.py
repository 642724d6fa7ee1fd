"""Tools that study the real store's protocol; nothing on the production path imports them.

The interleaving scheduler (``scheduling``, ``interleave``, ``scenarios``), the recording seam and crash
explorer (``recording``, ``crash``), the ordering study's report and pictures (``report``, ``pictures``),
fault injection (``faults``) and multi-process histories (``histories``).
"""
