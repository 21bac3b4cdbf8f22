"""User-facing errors: the CLI prints their message (one line per problem) and exits 2, no traceback."""

from __future__ import annotations


class AblateError(Exception):
    """Bad input from the user (spec, data, arguments): exit code 2, message only."""

    exit_code = 2
