"""Hypothesis settings profiles for the conformance kit: ``dev``, ``ci`` and ``nightly``.

The active profile is named by the environment variable ``CAPTURE_LEDGER_PROFILE`` (default ``dev``) and
loaded by ``load_profile``; an explicit ``settings`` passed to ``check_ledger`` overrides it. ``ci`` is
derandomized and uses no example database, so a run is the same run on every machine.
Not guaranteed: the exact example counts, which may be tuned to keep CI well inside its budget.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["PROFILES", "PROFILE_ENV", "load_profile", "profile_settings"]

PROFILE_ENV = "CAPTURE_LEDGER_PROFILE"

_COMMON = {
    # File stores fsync; a per-example wall-clock limit would make the kit flaky. A hang is caught by the
    # kit's own budget per call instead (calls.py, 30 s, R-KIT-8).
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}

PROFILES: dict[str, settings] = {
    "dev": settings(max_examples=100, stateful_step_count=30, **_COMMON),  # type: ignore[arg-type]
    "ci": settings(
        max_examples=60,
        stateful_step_count=25,
        derandomize=True,
        database=None,
        print_blob=False,
        **_COMMON,  # type: ignore[arg-type]
    ),
    "nightly": settings(max_examples=2000, stateful_step_count=60, **_COMMON),  # type: ignore[arg-type]
}

for _name, _profile in PROFILES.items():
    settings.register_profile(f"capture-ledger-{_name}", _profile)


def profile_settings(name: str | None = None) -> settings:
    """The settings of profile ``name``, or of the one named by ``CAPTURE_LEDGER_PROFILE``.

    Raises:
        ValueError: an unknown profile name.
    """
    chosen = name or os.environ.get(PROFILE_ENV) or "dev"
    if chosen not in PROFILES:
        raise ValueError(f"unknown profile {chosen!r}; choose one of {', '.join(PROFILES)}")
    return PROFILES[chosen]


def load_profile(name: str | None = None) -> settings:
    """Make a profile Hypothesis's default for this process and return it."""
    chosen = name or os.environ.get(PROFILE_ENV) or "dev"
    profile_settings(chosen)
    settings.load_profile(f"capture-ledger-{chosen}")
    return settings()
