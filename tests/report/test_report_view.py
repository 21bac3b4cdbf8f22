"""What a reader sees first in a report, on small hand-built studies in a real sqlite MLflow store (no
training: the runs are written with MlflowClient, as ablate's tracker writes them, so the module takes a
few seconds).

An ablation whose metric sits at its floor (an untrained model), with two variants identical to the
baseline in every seed, wall times that vary a lot between seeds and a dataset digest per seed; a search
with 4 finished trials, a parameter that never varied but got an importance, and a best.yaml.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Dataset, DatasetInput, InputTag, Metric

from ablate.report import build, section_api
from ablate.report.build import main_report
from ablate.report.compute import statistics as st
from ablate.report.compute.loaded_study import Run, build_study, load_study
from ablate.report.compute.logged_datasets import DatasetRow, data_note, dataset_rows
from ablate.report.render import Para, Section, Table
from ablate.report.section_api import Inputs, Part, section
from ablate.report.sections import environment
from ablate.report.sections.costs import cost_points
from ablate.report.sections.trials import best_spec_path
from tests.stores import mlflow_store

# variant -> seed -> (val/loss history, wall time s); mask=-1e9 repeats the baseline exactly.
LOSS = {0: [2.0, 1.5, 1.2], 1: [2.1, 1.6, 1.3]}
ABLATION = {
    "baseline": {0: (LOSS[0], 2.0), 1: (LOSS[1], 40.0)},
    "mask=-1e9": {0: (LOSS[0], 2.5), 1: (LOSS[1], 38.0)},
    "residual=post_norm": {0: ([2.0, 1.7, 1.4], 3.0), 1: ([2.2, 1.8, 1.5], 45.0)},
}
PARAMS = {"baseline": {"model.mask": "-inf", "model.residual": "pre_norm"},
          "mask=-1e9": {"model.mask": "-1e9", "model.residual": "pre_norm"},
          "residual=post_norm": {"model.mask": "-inf", "model.residual": "post_norm"}}
# trial -> (val/loss, lr, residual); model.ffn is searched but every trial drew 'linear'.
TRIALS = {0: (1.4, "0.001", "pre_norm"), 1: (1.3, "0.01", "post_norm"), 2: (0.9, "0.005", "pre_norm"),
          3: (1.1, "0.02", "post_norm")}
IMPORTANCE = {"evaluator": "PedAnovaImportanceEvaluator",
              "importances": {"val/loss": {"train.optimizer.lr": 0.61234, "model.residual": 0.27766,
                                           "model.ffn": 0.11}}}


def _dataset(client: MlflowClient, run_id: str, digest: str) -> None:
    entity = Dataset(name="synthetic-copy", digest=digest, source_type="code", source="{}")
    client.log_inputs(run_id, [DatasetInput(entity, [InputTag("mlflow.data.context", "train")])])


def _child(client: MlflowClient, exp: str, parent: str, study: str, variant: str, seed: int,
           params: dict[str, str], tags: dict[str, str]) -> str:
    run = client.create_run(exp, run_name=f"{variant} · seed {seed}", tags={
        "mlflow.parentRunId": parent, "ablate.study": study, "ablate.variant": variant,
        "ablate.seed": str(seed), "ablate.status": "finished", "ablate.spec_hash": "h", **tags})
    for k, v in {"seed": str(seed), "data.source": "synthetic", **params}.items():
        client.log_param(run.info.run_id, k, v)
    return run.info.run_id


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("view")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        uri = mlflow_store(root)
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        client = MlflowClient(uri)  # named: an earlier test may have set mlflow's process-wide URI
        # ---- the ablation, at the floor of exact match
        exp = client.create_experiment("view-abl")
        parent = client.create_run(exp, run_name="view-abl", tags={
            "ablate.study": "view-abl", "ablate.kind": "ablation", "ablate.variant": "study"}).info.run_id
        for variant, seeds in ABLATION.items():
            for seed, (losses, wall) in seeds.items():
                rid = _child(client, exp, parent, "view-abl", variant, seed, PARAMS[variant], {})
                metrics = [Metric("val/loss", x, 0, 10 * (i + 1)) for i, x in enumerate(losses)]
                metrics += [Metric(k, v, 0, 30) for k, v in {
                    "val/exact_match": 0.0, "test/exact_match": 0.0, "train/wall_time_s": wall,
                    "model/params": 1000.0, "train/tokens_per_s": 5000.0}.items()]
                metrics += [Metric("train/loss", x + 0.1, 0, 10 * (i + 1)) for i, x in enumerate(losses)]
                client.log_batch(rid, metrics=metrics)
                _dataset(client, rid, f"digest-of-seed-{seed}")
                client.set_terminated(rid)
        client.set_terminated(parent)
        # ---- the search
        exp = client.create_experiment("view-search")
        parent = client.create_run(exp, run_name="view-search-search", tags={
            "ablate.study": "view-search", "ablate.kind": "search", "ablate.variant": "search",
            "ablate.optuna_study": "view-search-search-1fbb3c8b5fff", "ablate.best_trial": "2"}).info.run_id
        objectives = json.dumps([{"metric": "val/loss", "direction": "minimize"}])
        for k, v in {"name": "view-search", "train.out_dir": "runs", "search.sampler": "tpe",
                     "search.objectives": objectives}.items():
            client.log_param(parent, k, v)
        client.log_text(parent, "# best trial 2\nname: view-search\n", "best.yaml")
        client.log_dict(parent, IMPORTANCE, "importance.json")
        for n, (loss, lr, residual) in TRIALS.items():
            rid = _child(client, exp, parent, "view-search", f"trial-{n}", 0,
                         {"train.optimizer.lr": lr, "model.residual": residual, "model.ffn": "linear"},
                         {"ablate.kind": "trial", "ablate.trial": str(n)})
            client.log_batch(rid, metrics=[Metric("val/loss", loss, 0, 20),
                                           Metric("train/wall_time_s", 10.0 + n, 0, 20)])
            client.set_terminated(rid)
        client.set_terminated(parent)
        assert main_report("view-abl", "out/abl") == 0
        assert main_report("view-search", "out/search") == 0
        yield root


def _intro(md: str) -> str:
    """What comes before the first section: the summary."""
    return md[:md.index("\n## ")]


def _table(md: str, first_header: str, having: str = "") -> tuple[list[str], list[list[str]]]:
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith(f"| {first_header} |") and having in line)
    header = [c.strip() for c in lines[start].strip("|").split(" | ")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return header, rows


# ---------------------------------------------------------------- ablation
def test_a_metric_at_its_floor_warns_before_the_identical_verdicts(ws: Path) -> None:
    md = (ws / "out/abl/report.md").read_text()
    intro = _intro(md)
    floor = "**Warning:** `test/exact_match` is at its floor (0) in every finished run of every variant"
    assert floor in intro
    assert intro.index("at its floor") < intro.index("**Summary**")
    verdict = next(line for line in intro.splitlines() if line.startswith("- mask=-1e9: "))
    assert "identical" in verdict and "both at the metric's floor" in verdict
    data = json.loads((ws / "out/abl/report.json").read_text())
    assert len(data["warnings"]) == 1 and "floor" in data["warnings"][0]
    assert all("uninformative" in e["verdict"] for e in data["effects"] if e["metric"] == "test/exact_match")


def test_cost_columns_are_a_table_of_their_own(ws: Path) -> None:
    md = (ws / "out/abl/report.md").read_text()
    main, rows = _table(md, "variant", "| runs |")
    assert main[:4] == ["variant", "runs", "finished", "diverged"] and "test exact match" in main
    assert not {"params", "tokens/s", "wall s"} & set(main)
    cost, cost_rows = _table(md, "variant", "| wall s |")
    assert cost == ["variant", "params", "tokens/s", "wall s"]
    assert [r[0] for r in cost_rows] == [r[0] for r in rows] == list(ABLATION)
    # Mean and the range of the seeds: never a negative wall time (a t-interval of these is ±241 s).
    assert cost_rows[0] == ["baseline", "1,000", "5,000", "21.0 (2.0–40.0)"]


def test_cost_intervals_are_the_seed_range_and_never_below_zero(ws: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    monkeypatch.chdir(ws)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{ws / 'mlflow.db'}")
    study = load_study("view-abl")
    points = {p.label: p for p in cost_points(study)}
    assert set(points) == set(ABLATION)
    for variant, seeds in ABLATION.items():
        walls = [wall for _, wall in seeds.values()]
        p = points[variant]
        assert (p.cost_lo, p.cost, p.cost_hi) == (min(walls), pytest.approx(sum(walls) / 2), max(walls))
        assert p.cost_lo >= 0
        # Two seeds this far apart: a mean ± t-interval would have reached below zero wall time.
        summary = st.mean_ci(walls)
        assert summary.mean - summary.half_width < 0
    assert (ws / "out/abl/figures/quality_vs_cost.png").is_file()


def test_identical_curves_are_named(ws: Path) -> None:
    md = (ws / "out/abl/report.md").read_text()
    section = md[md.index("## Learning curves"):]
    assert "baseline, mask=-1e9 have identical curves in every seed" in section.split("\n## ")[0]
    assert "residual=post_norm have identical" not in md


def test_dataset_digests_are_listed_per_seed_when_they_differ(ws: Path) -> None:
    md = (ws / "out/abl/report.md").read_text()
    assert "| dataset | synthetic-copy (digest `digest-of-seed-0`): seed 0 |" in md
    assert "| dataset | synthetic-copy (digest `digest-of-seed-1`): seed 1 |" in md
    # each seed drew its own synthetic data, shared by its variants: the pairs are controlled, so a note,
    # not a warning
    setup = md.split("\n## ")[1]
    assert "**Note:** each seed trained on its own data" in setup and "did not all train" not in setup
    # The reference tables come after the results.
    assert md.index("## Results") < md.index("## Data, hardware and code")


def _run(run_id: str, variant: str, seed: int) -> Run:
    return Run(run_id, variant, seed, "finished", "", 0.0, {}, {}, {})


def test_dataset_rows_group_runs_by_digest() -> None:
    runs = [_run("a0", "a", 0), _run("b0", "b", 0), _run("a1", "a", 1), _run("b1", "b", 1),
            _run("old", "a", 2)]
    same = {"a0": (("d", "x"),), "b0": (("d", "x"),), "a1": (("d", "x"),), "b1": (("d", "x"),), "old": ()}
    assert dataset_rows(runs, lambda r: same[r]) == [DatasetRow("d", "x", None)]
    assert dataset_rows(runs, lambda r: same[r])[0].text == "d (digest `x`)"
    # One variant saw other data in seed 1 only: named by variant and seed, not by seed alone.
    odd = {**same, "b1": (("d", "y"),)}
    rows = dataset_rows(runs, lambda r: odd[r])
    assert rows == [DatasetRow("d", "x", "a (seeds 0, 1); b (seed 0)", False),
                    DatasetRow("d", "y", "b (seed 1)", False)]
    assert [r.text for r in rows] == ["d (digest `x`): a (seeds 0, 1); b (seed 0)",
                                      "d (digest `y`): b (seed 1)"]
    assert data_note(rows)[0] == "warning"  # seed 1's pair saw two datasets
    per_seed = {**same, "a1": (("d", "y"),), "b1": (("d", "y"),)}
    rows = dataset_rows(runs, lambda r: per_seed[r])
    assert [(r.who, r.by_seed) for r in rows] == [("seed 0", True), ("seed 1", True)]
    assert data_note(rows)[0] == "info"
    assert data_note(dataset_rows(runs, lambda r: same[r])) is None
    assert dataset_rows(runs, lambda r: ()) == []  # records older than dataset logging: no row


# ---------------------------------------------------------------- search
def test_search_summary_names_the_best_trial_its_spec_and_the_rerun_command(ws: Path) -> None:
    md = (ws / "out/search/report.md").read_text()
    intro = _intro(md)
    path = "runs/view-search/view-search-search-1fbb3c8b5fff/best.yaml"
    assert "**Best trial: 2** (run `trial-2`" in intro and "`val/loss` 0.9000" in intro
    assert f"Best spec (trial 2): `{path}`" in intro and f"`ablate run {path}`" in intro
    assert "also logged as `best.yaml` in the parent run" in intro
    setup = md.split("\n## Setup")[1].split("\n## ")[0]
    trials = setup.split("(search), parent run `")[1].split("\n")[0]
    assert trials.endswith("trials") and "variants" not in setup  # a search has trials, not variants
    # The environment tables follow the results.
    assert md.index("## Best trials") < md.index("## Data, hardware and code")
    assert md.index("## Parameter importances") < md.index("| environment | value |")


def test_importances_are_rounded_caveated_and_none_for_a_constant_param(ws: Path) -> None:
    md = (ws / "out/search/report.md").read_text()
    section = md[md.index("## Parameter importances"):].split("\n## ")[0]
    assert "**Warning:** these importances rest on 4 finished trials" in section
    _, rows = _table(section, "param", "importance")
    assert rows == [["`train.optimizer.lr`", "0.61"], ["`model.residual`", "0.28"],
                    ["`model.ffn`", "did not vary"]]
    data = json.loads((ws / "out/search/report.json").read_text())
    assert data["did_not_vary"] == ["model.ffn"] and "model.ffn" not in data["importances"]
    assert data["importances"]["train.optimizer.lr"] == 0.61234 and data["importance_trials"] == 4


def test_an_old_search_record_without_spec_location_still_says_where_best_yaml_is() -> None:
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "tags": {"ablate.study": "s", "ablate.kind": "search"}, "params": {}, "metrics": {}}
    import pandas as pd

    frame = pd.DataFrame([{"run_id": "r0", "status": "FINISHED", "start_time": pd.Timestamp(0, unit="s"),
                           "tags.ablate.variant": "trial-0", "tags.ablate.kind": "trial",
                           "tags.ablate.trial": "0", "metrics.val/loss": 1.0}])
    study = build_study(parent, frame)
    assert best_spec_path(study) is None
    parent["params"] = {"name": "s", "train.out_dir": "out"}
    parent["tags"]["ablate.optuna_study"] = "s-search-abc"
    assert best_spec_path(study) == "out/s/s-search-abc/best.yaml"
    assert math.isfinite(study.runs[0].metrics["val/loss"])


# ---------------------------------------------------------------- sections as parts (docs/architecture.md)
def _spread(inp: Inputs) -> Part | None:
    """The recipe of "Adding a report section", followed once: the spread of val/loss per variant."""
    study = inp.study
    if study.baseline is None:
        return None
    spread = {v: max(xs) - min(xs) for v in study.variants
              if (xs := [r.metrics["val/loss"] for r in study.finished(v) if "val/loss" in r.metrics])}
    rows = [[v, st.fmt(x, 2)] for v, x in spread.items()]
    return Part("spread", [Section("Spread", [Table(["variant", "val/loss range"], rows)])],
                intro=[Para("**Spread** first, as a part's intro opens the report.")],
                data={"spread": spread})


def test_a_new_section_is_one_function_registered_where_it_is_defined(ws: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(section_api, "_REGISTERED", dict(section_api._REGISTERED))  # forgotten after the test
    section(205)(_spread)  # as `@section(205)` over its def: after the attention maps, before the environment
    monkeypatch.setattr(build, "ABLATION_PARTS", section_api.parts("ablation"))
    assert build.ABLATION_PARTS.index(_spread) == build.ABLATION_PARTS.index(environment.part) - 1
    assert main_report("view-abl", "out/spread") == 0
    md = (ws / "out/spread/report.md").read_text()
    # Its section before the last one (the reference tables), its intro after the others' intro.
    assert md.index("## Divergence and failures") < md.index("## Spread") < md.index("## Data, hardware")
    assert md.index("**Summary**") < md.index("**Spread** first") < md.index("\n## ")
    assert "| residual=post_norm | 0.10 |" in md and "<h2" in (ws / "out/spread/report.html").read_text()
    data = json.loads((ws / "out/spread/report.json").read_text())
    assert data["spread"]["baseline"] == pytest.approx(0.1) and "effects" in data
    # Every other file and number is as before: the new part only adds.
    before = json.loads((ws / "out/abl/report.json").read_text())
    assert {k: v for k, v in data.items() if k != "spread"} == before


def test_a_failed_part_fails_the_command_whatever_its_words(ws: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    def broken(inp: Inputs) -> Part:  # words that do not say "could not": the exit status reads the flag
        return Part("broken", [Section("Broken", [Para("nothing to show")])], failed=True)

    monkeypatch.setattr(build, "ABLATION_PARTS", (*build.ABLATION_PARTS, broken))
    capsys.readouterr()
    assert main_report("view-abl", "out/broken") == 1
    assert "## Broken" in (ws / "out/broken/report.md").read_text()  # the files are written all the same
    assert "section(s) broken could not be made" in capsys.readouterr().err


def test_a_report_that_cannot_be_logged_exits_1(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    def refuse(run_id: str, folder: Path) -> None:
        raise PermissionError("read-only store")

    monkeypatch.setattr(build, "log_report_artifacts", refuse)  # where the report looks it up
    assert main_report("view-abl", "out/unlogged") == 1
    assert (ws / "out/unlogged/report.md").is_file()


def test_two_parts_never_write_the_same_number() -> None:
    one, two = Part("one", data={"x": 1}), Part("two", data={"x": 2})
    with pytest.raises(ValueError, match="'two' repeats the data key"):
        build.assemble("t", [one, two])
    doc, data = build.assemble("t", [Part("a", intro=[Para("a")], data={"x": 1}),
                                     Part("b", [Section("B")], intro=[Para("b")], data={"y": 2})])
    assert doc.intro == [Para("a"), Para("b")] and [s.title for s in doc.sections] == ["B"]
    assert data == {"x": 1, "y": 2}
