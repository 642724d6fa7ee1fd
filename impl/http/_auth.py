"""The bearer token of the control plane (SPEC.md R-HTTP-2): one rule for the server, the clients and the CLI.

A token is a non-empty RFC 6750 ``token68``: letters, digits and ``-._~+/``, optionally ending in ``=``. A
token outside that set could not be sent in an ``Authorization`` header, so the server refuses to start
with one and the clients refuse to send one. ``TOKEN_ENV`` names the environment variable through which
``capture-ledger serve`` hands the token to its worker processes, and from which the command line reads
it when no token file is given. Not guaranteed: that a token is strong; choose a long random one.
"""

from __future__ import annotations

import re

__all__ = ["TOKEN_ENV", "TOKEN_PATTERN", "validate_bearer_token"]

#: The environment variable holding the bearer token of ``capture-ledger serve`` and its clients.
TOKEN_ENV = "CAPTURE_LEDGER_TOKEN"
TOKEN_PATTERN: re.Pattern[str] = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def validate_bearer_token(token: object) -> str:
    """Return ``token`` if it can serve as the control plane's bearer token.

    Raises:
        ValueError: not a string, empty, or holding a character a bearer token cannot carry.
    """
    if not isinstance(token, str) or TOKEN_PATTERN.fullmatch(token) is None:
        raise ValueError(
            "the control plane needs a bearer token: a non-empty string of letters, digits and -._~+/ "
            "(optionally ending in =)"
        )
    return token
