"""Database URLs shared by MLflow stores and Optuna storages.

``postgres://`` and ``postgresql://`` name no driver; SQLAlchemy 2.1 then picks psycopg 3, while ablate
installs psycopg2-binary. Naming the installed driver lets users write the plain URL everywhere.
"""

from __future__ import annotations

import importlib.util


def with_installed_driver(url: str) -> str:
    """A PostgreSQL URL with the installed driver named (psycopg 3 if present, else psycopg2)."""
    scheme, sep, rest = url.partition("://")
    if scheme not in ("postgres", "postgresql"):
        return url
    driver = "" if importlib.util.find_spec("psycopg") else "+psycopg2"
    return f"postgresql{driver}{sep}{rest}"
