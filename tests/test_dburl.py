"""Database URLs: the installed driver named, and passwords kept out of messages."""

from __future__ import annotations

import pytest

from ablate.dburl import redacted
from ablate.errors import AblateError
from ablate.study.optuna_store import Store


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://bob:hunter2@db:5432/x", "postgresql://bob:***@db:5432/x"),
    ("postgresql+psycopg2://bob:p@ss@db/x", "postgresql+psycopg2://bob:***@db/x"),  # '@' inside the password
    ("mysql://bob:s%40cret@db/x", "mysql://bob:***@db/x"),  # percent-encoded, as SQLAlchemy wants it
    ("postgresql://bob@db/x", "postgresql://bob@db/x"),  # no password: nothing to hide
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
    ("sqlite:///mlflow.db", "sqlite:///mlflow.db"),
    (".ablate/optuna-journal.log", ".ablate/optuna-journal.log"),
])
def test_a_password_never_reaches_a_message(url: str, shown: str) -> None:
    assert redacted(url) == shown


def test_the_store_line_hides_the_password_but_keeps_user_and_host() -> None:
    store = Store.__new__(Store)  # describe() reads only the URL: no database needed to check the line
    store.url = "postgresql://bob:hunter2@127.0.0.1:5432/optuna"
    assert store.describe() == "postgresql://bob:***@127.0.0.1:5432/optuna"
    store.url = None
    assert store.describe().startswith("journal file ")


def test_a_refused_storage_url_is_named_without_its_password() -> None:
    with pytest.raises(AblateError) as raised:
        Store("mysql://bob:hunter2@db/x")
    assert str(raised.value) == "--storage 'mysql://bob:***@db/x': expected postgresql://... (or sqlite:///file.db)"
