"""Test-suite configuration: the Hypothesis profile comes from CAPTURE_LEDGER_PROFILE, default ``ci``.

The suite is deterministic by default (the ``ci`` profile is derandomized and keeps no example database);
set CAPTURE_LEDGER_PROFILE=dev or nightly for a longer, randomized search.
"""

from __future__ import annotations

import os

from capture_ledger.spec.kit import PROFILE_ENV, load_profile

os.environ.setdefault(PROFILE_ENV, "ci")
load_profile()
