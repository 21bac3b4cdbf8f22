"""One `Tracker` is one MLflow run. The `ablate.tracking` package is the only place that imports mlflow:

* `ablate.tracking.tracker` writes runs (`Tracker`, `NullTracker` when tracking is off); this module
  re-exports the public API;
* `ablate.tracking.record` names every tag, param, metric and artifact of the record;
* `ablate.tracking.outbox` sends a run's records from a thread through a queue written ahead on disk,
  where what a tracking server that does not answer could not take waits;
* `ablate.tracking.mlflow_store` picks the store (URI precedence, artifact folder, experiment), checks that a
  network store answers, records the environment, and lists runs and downloads artifacts;
* `ablate.tracking.models` logs a run's model with ``mlflow.pytorch`` and loads it back safely;
* `ablate.tracking.read` reads studies back for reports (parent and child runs, metric histories);
* `ablate.tracking.run_files` writes runs to files and recreates them (`ablate export` / `ablate import`);
* `ablate.tracking.server` runs ``mlflow server`` / ``ablate ui`` on 127.0.0.1 and prints run tables;
  `ablate.tracking.comparison_view` writes the shared views ``ablate ui`` compares a study's runs in (axes
  fitted to the cells' values) and names the UI's URLs of runs; `ablate.tracking.landing` serves a study's
  report beside the UI as its landing page, its variants and rungs linked to their runs;
* `ablate.tracking.transport` chooses how records travel (direct, or through the outbox to a server);
* `ablate.tracking.figures` draws the figures a run logs; `ablate.tracking.translations` writes and reads
  the hypotheses and references a run's BLEU was computed on;
* `ablate.tracking.versions` records the component versions a run chose, and
  `ablate.tracking.supersede` tags the cells a newer version or another precision made stale.

The record (docs/architecture.md, "The MLflow record"): one experiment per study; a study is a parent run
and every cell or trial a child run with ``mlflow.parentRunId`` set explicitly; params are the resolved
spec flattened to dotted keys (short JSON values); tags ``ablate.study``, ``ablate.variant``,
``ablate.seed``, ``ablate.spec_hash``, ``ablate.status``, the git commit, host, CPU (and GPU) and one
``ablate.version.<package>`` per package that decides results; artifacts ``spec.yaml`` and
``environment.json``. A run ends FINISHED (finished, diverged, pruned), FAILED or KILLED:
`MLFLOW_STATUS`.

Everything goes through an ``MlflowClient`` bound to the run's store (a parent and its child runs can be
open in one process at once), except ``mlflow.pytorch``, which reads the process-wide URI: `log_model` and
`load_model` set it (see `mlflow_store.use_uri`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ablate.tracking.mlflow_store import (
    RunRow,
    artifact_root,
    check_reachable,
    download_artifacts,
    environment,
    is_server_uri,
    list_runs,
    resolve_run_id,
    resolve_tracking_uri,
)
from ablate.tracking.outbox import send_outbox
from ablate.tracking.tracker import MAX_PARAM_VALUE, MLFLOW_STATUS, NullTracker, Status, Tracker

if TYPE_CHECKING:
    import torch

__all__ = [
    "MAX_PARAM_VALUE", "MLFLOW_STATUS", "NullTracker", "RunRow", "Status", "Tracker", "artifact_root",
    "check_reachable", "download_artifacts", "environment", "is_server_uri", "list_runs", "load_model",
    "main_runs", "main_ui", "resolve_run_id", "resolve_tracking_uri", "send_outbox",
]


def main_ui(host: str = "127.0.0.1", port: int = 5000, study: str | None = None) -> int:
    """`ablate ui [STUDY]`: serve the MLflow UI over this folder's store until Ctrl-C, opening at STUDY's
    page when given (its spec file, name or parent run id; see ablate.tracking.server)."""
    from ablate.tracking.server import main_ui as run_ui  # lazy: MLflow's server app, only for `ablate ui`

    return run_ui(host, port, study=study)


def main_runs(experiment: str | None = None) -> int:
    """`ablate runs`: print a table of runs (see ablate.tracking.server)."""
    from ablate.tracking.server import main_runs as print_runs  # lazy: the server module, for `ablate runs`

    return print_runs(experiment)


def load_model(run_id: str, *, tracking_uri: str | None = None, map_location: str = "cpu",
               allow_pickle: bool = False) -> torch.nn.Module:
    """The last model `Tracker.log_model` logged in ``run_id``; see `ablate.tracking.models.load_model`
    (an ablate model comes back through ``weights_only=True``, a pickle only with ``allow_pickle``)."""
    from ablate.tracking.models import load_model as load  # lazy: torch and the model builder, when asked

    return load(run_id, tracking_uri=tracking_uri, map_location=map_location, allow_pickle=allow_pickle)
