"""Fresh MLflow sqlite stores for tests, without paying MLflow's table migrations each time.

A new sqlite store costs MLflow 5-9 s of schema migrations on these 2-core machines, and dozens of tests
each start from an empty store. `mlflow_store(folder)` copies an empty store that MLflow itself created
once per test process (same MLflow version, same schema, no rows but MLflow's Default experiment) into
``folder``: the tests still read and write a real MLflow store through MLflow. Tests that check what a
command writes into an empty folder (no mlflow.db after a dry run) do not use it.
"""

from __future__ import annotations

import atexit
import shutil
import sqlite3
import tempfile
from pathlib import Path

_template: Path | None = None


def _empty_store() -> Path:
    global _template
    if _template is None:
        from mlflow import MlflowClient

        folder = Path(tempfile.mkdtemp(prefix="ablate-test-mlflow-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        MlflowClient(f"sqlite:///{folder / 'mlflow.db'}").search_experiments()  # MLflow creates the tables
        _template = folder / "mlflow.db"
    return _template


def mlflow_store(folder: Path, name: str = "mlflow.db") -> str:
    """Put an empty MLflow store at ``folder/name`` (unless a store is there already: a rerun of the same
    command in the same folder keeps its records) and return its ``sqlite:///`` URI."""
    db = Path(folder) / name
    if db.exists():
        return f"sqlite:///{db}"
    db.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_empty_store(), db)
    # The Default experiment's artifact location names the folder MLflow created it in: point it here.
    with sqlite3.connect(db) as con:
        con.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
                    (str(db.parent.resolve() / "mlruns" / "0"),))
    con.close()
    return f"sqlite:///{db}"
