"""The view `ablate ui` opens a study on: MLflow's own runs page, in its chart view, with the study's cells
grouped by variant (seeds pooled: each group's curve is the mean of its seeds, with their min-max band) and
the charts narrowed to the deciding metric: the comparison the study was run for, at first sight.

MLflow 3 keeps such a page state as a *shared view*: an experiment tag ``mlflow.sharedViewState.<key>``
holding the state as JSON (the runs filter and sort, ``groupBy``, the charts' search filter), opened by
``#/experiments/<id>/runs?viewStateShareKey=<key>`` (the UI's own "Share" button writes the same tag). A
search's trials are not variants: its view sorts them by the metric, ungrouped.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from ablate.tracking import record


def view_state(kind: str, metric: str, ladder: bool = False) -> dict[str, Any]:
    """The runs page's state for a study of ``kind`` (ablation | search) deciding on ``metric`` (a final/
    name): its child runs only, grouped by variant for an ablation (by rung, then variant, for a ladder:
    pooling its rungs would average runs of different sizes), the charts of the metric's curve and final
    value."""
    child = "cell" if kind == "ablation" else "trial"
    state: dict[str, Any] = {
        "searchFilter": f"tags.`{record.KIND}` = '{child}'",  # the cells, not the study's parent run
        "orderByKey": f"metrics.`{metric}`", "orderByAsc": False,
        "chartsSearchFilter": metric.removeprefix(record.FINAL),  # 'val/bleu': its curve and final/val/bleu
        "useGroupedValuesInCharts": True, "runListHidden": False,
    }
    if kind == "ablation":
        keys = [record.RUNG, record.VARIANT] if ladder else [record.VARIANT]
        state["groupBy"] = {"groupByKeys": [{"mode": "tag", "groupByData": k} for k in keys],
                            "aggregateFunction": "average"}
    return state


def comparison_view(uri: str, experiment_id: str, kind: str, metric: str, ladder: bool = False) -> str:
    """The key of the experiment's comparison view in the store at ``uri``, its tag written when missing
    (the key is the state's hash: the same study and metric keep one view)."""
    client = MlflowClient(uri)
    state = json.dumps(view_state(kind, metric, ladder), sort_keys=True)
    key = "ablate-" + hashlib.sha256(state.encode()).hexdigest()[:12]
    tags = client.get_experiment(experiment_id).tags
    if tags.get(record.SHARED_VIEW_PREFIX + key) != state:
        client.set_experiment_tag(experiment_id, record.SHARED_VIEW_PREFIX + key, state)
    return key


def comparison_url(base_url: str, experiment_id: str, key: str) -> str:
    """The runs page in its chart view with the shared view ``key`` applied, in the model-training view."""
    return (f"{base_url}/#/experiments/{experiment_id}/runs?{record.SHARED_VIEW_QUERY}={key}&"
            f"{record.CHART_MODE_QUERY}&{record.WORKFLOW_QUERY}")


def report_url(uri: str, base_url: str, experiment_id: str, run_id: str) -> str | None:
    """The study's report (its verdicts, tables and figures: `ablate report` logs it under ``report/`` in
    the parent run) in MLflow's artifact view of the parent run; None before a report was logged."""
    try:
        logged = {a.path for a in MlflowClient(uri).list_artifacts(run_id, record.REPORT_DIR)}
    except MlflowException:
        return None
    page = f"{record.REPORT_DIR}/report.html"
    if page not in logged:
        return None
    return f"{base_url}/#/experiments/{experiment_id}/runs/{run_id}/artifacts/{page}?{record.WORKFLOW_QUERY}"
