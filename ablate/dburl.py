"""Database URLs shared by MLflow stores and Optuna storages.

``postgres://`` and ``postgresql://`` name no driver; SQLAlchemy 2.1 then picks psycopg 3, while ablate
installs psycopg2-binary. Naming the installed driver lets users write the plain URL everywhere.
Messages show a URL through ``redacted``: the password is not theirs to repeat.
"""

from __future__ import annotations

import importlib.util
from urllib.parse import urlparse


def with_installed_driver(url: str) -> str:
    """A PostgreSQL URL with the installed driver named (psycopg 3 if present, else psycopg2)."""
    scheme, sep, rest = url.partition("://")
    if scheme not in ("postgres", "postgresql"):
        return url
    driver = "" if importlib.util.find_spec("psycopg") else "+psycopg2"
    return f"postgresql{driver}{sep}{rest}"


def redacted(url: str) -> str:
    """The URL with its password shown as *** (postgresql://bob:secret@db/x -> postgresql://bob:***@db/x),
    so a message or a resume line can be copied without leaking it; anything else unchanged."""
    try:
        password = urlparse(url).password
    except ValueError:  # not a URL with a parsable netloc: nothing that looks like a login to hide
        return url
    if password is None:
        return url
    return url.replace(f":{password}@", ":***@", 1)
