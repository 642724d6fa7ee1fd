"""What several commands share: the usage error and the bearer-token option (SPEC.md R-HTTP-2).

``UsageError`` is a mistake on the command line (no token, an unusable target, no IDs on a terminal): the
dispatcher (``main``) prints ``capture-ledger COMMAND: message`` on standard error and exits 2. The
bearer token of ``serve`` and of the client commands comes from ``--token-file`` or, without it, from
``$CAPTURE_LEDGER_TOKEN``; never from the command line, which other users of the machine can read.

Light on purpose: importing this module (or any command module, to build the parser) loads neither the
HTTP stack nor the conformance kit. Not guaranteed: the wording of the messages.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from capture_ledger.impl.http import TOKEN_ENV, validate_bearer_token

__all__ = ["FILE_STORE_TARGET", "UsageError", "add_token_option", "read_token"]


#: The production file store's factory (``open_file_store(directory)``), the default target.
FILE_STORE_TARGET = "capture_ledger.impl.store.file_store:open_file_store"


class UsageError(Exception):
    """A mistake on the command line: the dispatcher prints the message and exits 2."""


def add_token_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--token-file FILE`` to a command that needs the bearer token.

    Args:
        parser: the command's parser.
    """
    parser.add_argument(
        "--token-file",
        default=None,
        help=f"file holding the bearer token (default: ${TOKEN_ENV}); never pass the token itself",
    )


def read_token(token_file: str | None) -> str:
    """The bearer token: the content of ``token_file`` (stripped) if given, else ``$CAPTURE_LEDGER_TOKEN``.

    Args:
        token_file: the ``--token-file`` argument, or ``None``.

    Returns:
        A token the server and the clients accept (``impl.http.validate_bearer_token``).

    Raises:
        UsageError: neither gives a non-empty token, the file cannot be read, or the token is unusable.
    """
    if token_file is not None:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except OSError as error:
            raise UsageError(f"cannot read --token-file {token_file}: {error}") from error
        source = f"--token-file {token_file}"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        source = f"${TOKEN_ENV}"
    if not token:
        raise UsageError(
            f"no bearer token: set ${TOKEN_ENV} or pass --token-file FILE "
            "(a token is never taken from the command line, where other users can read it)"
        )
    try:
        return validate_bearer_token(token)
    except ValueError as error:
        raise UsageError(f"the token from {source} is not usable: {error}") from error
