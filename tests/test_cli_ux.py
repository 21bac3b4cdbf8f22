"""A CLI that behaves the same everywhere: the commands that read a study take its spec or its name, an
unknown study leaves nothing behind, -v/-q go before or after the command, the help names what exists,
common names suggest registered ones, a run of the wrong kind is one line, `ablate study` is the command's
name (`ablate ablate` its alias), and the dry run says when several axes fell to the one-at-a-time
default."""

from __future__ import annotations

import argparse
import math
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

import registry
from ablate.cli import COMMAND, LIST_KINDS, build_parser, main
from registry.aliases import COMMON_NAMES, suggest
from tests.report_studies import EXPORTS

SPEC_2X2 = """\
name: two-axes
data:
  source: synthetic
  synthetic: {task: copy, vocab_size: 8, min_len: 1, max_len: 3, train_size: 50, val_size: 8, test_size: 8}
  max_len: 5
model: {d_model: 16, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 32}
train: {max_steps: 2}
ablation:
DESIGN  axes:
    model.residual: [pre_norm, post_norm]
    model.norm: [builtin, rms]
  seeds: [0]
"""


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ---------------------------------------------------------------- an unknown study leaves nothing behind
@pytest.mark.parametrize("argv", [["report", "no-such-study"], ["export", "no-such-study"],
                                  ["status", "no-such-study"], ["ui", "no-such-study", "--port", "1"],
                                  ["report", "study.yaml"], ["report", "no-such-study", "--format", "csv"]])
def test_an_unknown_study_creates_nothing(bare_workdir: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # the default store: ./mlflow.db, which must not appear
    (bare_workdir / "study.yaml").write_text(SPEC_2X2.replace("DESIGN", ""))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    name = "two-axes" if argv[1] == "study.yaml" else "no-such-study"
    assert err == [f"error: unknown study {name!r}: no MLflow store at {bare_workdir / 'mlflow.db'} (nothing "
                   "has been tracked from this folder; run it here, or set MLFLOW_TRACKING_URI to its store)"]
    assert listing(bare_workdir) == ["study.yaml"]


@pytest.mark.parametrize("argv", [["evaluate", "abc", "--text", "x.txt"], ["generate", "abc"],
                                  ["translate", "abc", "hallo"]])
def test_an_unknown_run_creates_nothing(bare_workdir: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: unknown run 'abc': no MLflow store at {bare_workdir / 'mlflow.db'} (nothing has been "
        "tracked from this folder; run it here, or set MLFLOW_TRACKING_URI to its store)"]
    assert listing(bare_workdir) == []


# ---------------------------------------------------------------- a study by its spec or by its name
@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The committed rep-abl study imported into a fresh store; its parent's spec.yaml as a spec file."""
    folder = tmp_path_factory.mktemp("imported")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder / 'mlflow.db'}")
        assert main(["import", str(EXPORTS / "rep-abl")]) == 0
        spec = (EXPORTS / "rep-abl" / "parent" / "artifacts" / "spec.yaml").read_text()
        (folder / "rep-abl.yaml").write_text(spec)
        yield folder


def test_a_study_in_the_tracking_store_is_a_pilot(imported: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from ablate.study.pilot import read_pilot

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{imported / 'mlflow.db'}")
    final = {}  # (variant, seed) -> (final val/loss, status), from the export itself
    for path in (EXPORTS / "rep-abl" / "cells").glob("*/run.json"):
        run = json.loads(path.read_text())
        tags = run["tags"]
        loss = run["metrics"].get("final/val/loss", [[0, 0, math.nan]])[-1][2]
        final[tags["ablate.variant"], int(tags["ablate.seed"])] = (loss, tags["ablate.status"])
    pilot = read_pilot("rep-abl", imported / "no-such-folder", "val/loss")  # no path: the store's study
    post = [final["residual=post_norm", s][0] - final["baseline", s][0] for s in range(3)]
    assert pilot.differences["residual=post_norm"] == pytest.approx(post)
    assert "lr=50" not in pilot.differences  # its cells diverged: no finished pair
    assert pilot.seeds == (0, 1, 2)
    timed = sum(1 for _, status in final.values() if status == "finished")
    assert pilot.machines == (("AMD EPYC", timed),) and pilot.timed_on() == "AMD EPYC"


def test_status_report_and_export_take_the_spec_or_the_name(imported: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(imported)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{imported / 'mlflow.db'}")
    capsys.readouterr()
    assert main(["status", "rep-abl"]) == 0
    by_name_out = capsys.readouterr().out
    assert main(["status", "rep-abl.yaml"]) == 0
    by_spec_out = capsys.readouterr().out
    assert by_name_out == by_spec_out and by_name_out.startswith("study rep-abl (9 cells")
    assert by_name_out.count(" finished ") + by_name_out.count(" diverged ") == 9

    assert main(["report", "rep-abl.yaml", "--out", "by-spec"]) == 0
    assert main(["report", "rep-abl", "--out", "by-name"]) == 0
    by_spec, by_name = ((imported / out / "report.json").read_text() for out in ("by-spec", "by-name"))
    assert by_spec == by_name
    assert main(["export", "rep-abl.yaml", "--out", "exported"]) == 0
    assert len(list((imported / "exported" / "cells").iterdir())) == 9


def test_an_unknown_study_in_a_store_lists_the_studies_it_has(imported: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(imported)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{imported / 'mlflow.db'}")
    capsys.readouterr()
    assert main(["report", "rep-ab"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"error: unknown study 'rep-ab': no MLflow parent run with that name or id in sqlite:///"
                    f"{imported / 'mlflow.db'}; its studies: rep-abl; did you mean 'rep-abl'?")


def test_ui_given_a_study_opens_its_report_then_its_comparison_and_links_its_parent_run(
        imported: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ablate ui` used to land on the experiment list, and the study's link on its parent run's overview:
    it opens the study's report (its verdict table and figures, which `ablate report` logs in the parent
    run) where there is one, and beside it MLflow's runs page in its chart view, the cells grouped by variant
    on the deciding metric (a shared view MLflow keeps as an experiment tag; the browser check renders
    both: scripts/ui_check.py)."""
    import json

    from mlflow import MlflowClient

    from ablate.tracking.server import _study_parent, study_target

    monkeypatch.chdir(imported)
    uri = f"sqlite:///{imported / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    parent = _study_parent("rep-abl.yaml")
    assert parent == _study_parent("rep-abl")
    base, exp, run_id = "http://127.0.0.1:5000", parent["experiment_id"], parent["run_id"]
    how = "its cells by variant, seeds pooled, on final/val/exact_match"
    target = study_target(parent, uri, base)
    if target.comparison_url is None:  # no report logged yet (another test of this module writes one)
        assert target.what == f"ablation study rep-abl ({how})"
        compare = target.url
    else:
        compare = target.comparison_url.removesuffix(f"  ({how})")
    assert target.parent_url == f"{base}/#/experiments/{exp}/runs/{run_id}?workflowType=machine_learning"
    key = re.fullmatch(rf"http://127\.0\.0\.1:5000/#/experiments/{exp}/runs\?viewStateShareKey=(ablate-\w+)"
                       r"&compareRunsMode=CHART&workflowType=machine_learning", compare).group(1)
    state = json.loads(MlflowClient(uri).get_experiment(exp).tags[f"mlflow.sharedViewState.{key}"])
    assert state["groupBy"] == {"groupByKeys": [{"mode": "tag", "groupByData": "ablate.variant"}],
                                "aggregateFunction": "average"}
    assert state["chartsSearchFilter"] == "val/exact_match"
    assert state["searchFilter"] == "tags.`ablate.kind` = 'cell'"
    assert study_target(parent, uri, base) == target  # written once, the same view

    assert main(["report", "rep-abl", "--out", "ui-report"]) == 0  # logged under report/ in the parent
    opened = study_target(parent, uri, base)
    assert opened.what == "ablation study rep-abl (its report: verdicts, tables, figures)"
    assert opened.url == (f"{base}/#/experiments/{exp}/runs/{run_id}/artifacts/report/report.html"
                          "?workflowType=machine_learning")
    assert opened.comparison_url == f"{compare}  ({how})" and opened.parent_url == target.parent_url


class _Links(HTMLParser):
    """Every link of a page: (its text, its href)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href, self._text = dict(attrs).get("href"), []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append(("".join(self._text), self._href))
            self._href = None


def _run_ids(uri: str, href: str, base: str) -> set[str]:
    """The runs a link into MLflow's UI shows, resolved against the store: a run page's id, or the runs the
    runs page's search finds (its shared view's, grouped so that the runs show, not their parent)."""
    import json

    from mlflow import MlflowClient

    route = href.removeprefix(f"{base}/#/experiments/")
    assert route != href, href
    path, _, query = route.partition("?")
    experiment, _, rest = path.partition("/runs")
    if rest.startswith("/"):
        return {rest.removeprefix("/")}
    client = MlflowClient(uri)
    key = urllib.parse.parse_qs(query)["viewStateShareKey"][0]
    state = json.loads(client.get_experiment(experiment).tags[f"mlflow.sharedViewState.{key}"])
    assert state["groupBy"]["groupByKeys"][-1] == {"mode": "tag", "groupByData": "ablate.variant"}
    return {r.info.run_id for r in client.search_runs([experiment], state["searchFilter"], max_results=1000)}


def test_the_report_links_each_variant_to_its_runs_and_ui_serves_it_as_the_landing_page(
        imported: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's HTML links each variant's name (its tables' first column, its summary's bullets) into
    MLflow's UI; each link, resolved against the store (a run page, or the runs page's search filter run
    by MLflow), shows exactly that variant's runs. MLflow's own HTML view sandboxes a report where no link
    opens, so `ablate ui` serves the logged report beside its MLflow server, the links moved to that
    server; the report committed beside an export has none (``--no-links``)."""
    from mlflow import MlflowClient

    from ablate.tracking.landing import LandingServer, link_base, logged_report, relinked
    from ablate.tracking.server import _study_parent, study_target

    monkeypatch.chdir(imported)
    uri = f"sqlite:///{imported / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert main(["report", "rep-abl", "--out", "linked"]) == 0
    page = (imported / "linked" / "report.html").read_text()
    base = "http://127.0.0.1:5000"  # a local store's links point where `ablate ui` serves by default
    assert link_base(page) == base
    parent = _study_parent("rep-abl")
    cells = MlflowClient(uri).search_runs([parent["experiment_id"]], "tags.`ablate.kind` = 'cell'")
    by_variant: dict[str, set[str]] = {}
    for run in cells:
        by_variant.setdefault(run.data.tags["ablate.variant"], set()).add(run.info.run_id)
    assert len(by_variant) == 3 and all(len(ids) == 3 for ids in by_variant.values())
    parser = _Links()
    parser.feed(page)
    linked = {text: href for text, href in parser.links}
    assert set(linked) == set(by_variant)  # every variant, nothing else
    for text, href in parser.links:  # each occurrence of a name: the same runs, that variant's
        assert _run_ids(uri, href, base) == by_variant[text], text
    assert sum(text == "post_norm" or text.endswith("post_norm") for text, _ in parser.links) >= 2

    target = study_target(parent, uri, "http://127.0.0.1:5999")
    assert target.report == "report/report.html" and target.run_id == parent["run_id"]
    assert target.run_id is not None and target.report is not None
    logged = logged_report(target.run_id, target.report, uri)
    assert logged == page  # the page `ablate report` logged in the parent run
    landing = LandingServer(relinked(logged, "http://127.0.0.1:5999"))
    try:
        with urllib.request.urlopen(landing.url, timeout=10) as response:
            served = response.read().decode()
    finally:
        landing.stop()
    moved = _Links()
    moved.feed(served)
    assert "http://127.0.0.1:5000" not in served and 'class="mlflow-ui">http://127.0.0.1:5999<' in served
    assert [t for t, _ in moved.links] == [t for t, _ in parser.links]
    for text, href in moved.links:
        assert _run_ids(uri, href, "http://127.0.0.1:5999") == by_variant[text]

    assert main(["report", "rep-abl", "--out", "committed", "--no-links"]) == 0
    plain = (imported / "committed" / "report.html").read_text()
    assert link_base(plain) is None and "<a " not in plain


def test_a_ladders_comparison_groups_its_cells_by_rung_then_variant() -> None:
    """Grouped by variant alone, a ladder's chart pooled every rung's runs (sizes 57x apart) into one mean."""
    from ablate.tracking.comparison_view import view_state

    assert view_state("ablation", "final/val/loss", ladder=True)["groupBy"]["groupByKeys"] == [
        {"mode": "tag", "groupByData": "ablate.rung"}, {"mode": "tag", "groupByData": "ablate.variant"}]
    assert "groupBy" not in view_state("search", "final/val/loss", ladder=True)  # trials are not variants
    # each rung's own view: its cells alone, by variant, on an axis fitted to that rung's values
    at_l = view_state("ablation", "final/val/loss", ladder=True, rung="l")
    assert at_l["searchFilter"] == "tags.`ablate.kind` = 'cell' AND tags.`ablate.rung` = 'l'"
    assert at_l["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "ablate.variant"}]


def test_the_comparison_charts_the_metric_on_an_axis_that_shows_the_gaps(
        imported: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's own chart put a loss on an axis from 0 to 6, where a 0.02-nat gap between variants is a
    line's width: the view ablate writes charts the final metric on an axis fitted to the cells' values,
    and its curve on one fitted to the curves' ends, extended on the side the curve comes from."""
    import json

    from mlflow import MlflowClient

    from ablate.tracking.comparison_view import CellValues, fitted_range, view_state
    from ablate.tracking.server import _study_parent, study_target

    axis = fitted_range([3.41, 3.43, 3.42], higher_is_better=False)
    assert axis["yMin"] < 3.41 and axis["yMax"] > 3.43
    assert 0.02 / (axis["yMax"] - axis["yMin"]) > 0.7  # the gap fills most of the axis, not 1/300 of it
    curve = fitted_range([3.41, 3.43], higher_is_better=False, lead=2.0)
    assert curve["yMax"] - 3.43 > 3 * (3.41 - curve["yMin"])  # room above, where a loss comes from
    bleu = fitted_range([20.0, 21.0], higher_is_better=True, lead=2.0)
    assert 20.0 - bleu["yMin"] > 3 * (bleu["yMax"] - 21.0)  # a BLEU comes from below
    assert fitted_range([0.06, 0.25], higher_is_better=True, lead=2.0)["yMin"] == 0  # not below 0
    assert fitted_range([2.0, 2.0], higher_is_better=False)["yMin"] < 2.0  # equal values: still an axis
    assert fitted_range([math.nan], higher_is_better=False) == {}
    state = view_state("ablation", "final/val/loss", values=CellValues((3.41, 3.43), (3.5, 3.52)))
    final, during = state["compareRunCharts"]
    assert (final["metricKey"], final["type"], final["range"]) == (
        "final/val/loss", "LINE", fitted_range([3.41, 3.43], higher_is_better=False))
    assert during["metricKey"] == "val/loss"
    assert during["range"]["yMin"] < 3.5 < 3.52 < during["range"]["yMax"]
    # MLflow's UI keeps its two catch-all sections last (its update of a shared state assumes it)
    assert [s["name"] for s in state["compareRunSections"]] == ["final/val", "val", "Model metrics",
                                                                "System metrics"]
    assert {c["metricSectionId"] for c in state["compareRunCharts"]} <= {
        s["uuid"] for s in state["compareRunSections"]}

    monkeypatch.chdir(imported)
    uri = f"sqlite:///{imported / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    parent = _study_parent("rep-abl")
    target = study_target(parent, uri, "http://127.0.0.1:5000")
    compare = target.comparison_url or target.url
    found = re.search(r"viewStateShareKey=(ablate-\w+)", compare)
    assert found is not None
    key = found.group(1)
    client = MlflowClient(uri)
    written = json.loads(client.get_experiment(parent["experiment_id"]).tags[f"mlflow.sharedViewState.{key}"])
    cells = client.search_runs([parent["experiment_id"]], "tags.`ablate.kind` = 'cell'")
    metric = "final/val/exact_match"
    values = [r.data.metrics[metric] for r in cells if metric in r.data.metrics]
    chart = next(c for c in written["compareRunCharts"] if c["metricKey"] == "final/val/exact_match")
    assert chart["range"] == fitted_range(values, higher_is_better=True)
    assert chart["range"]["yMin"] <= min(values) <= max(values) <= chart["range"]["yMax"]
    assert study_target(parent, uri, "http://127.0.0.1:5000").comparison_url == target.comparison_url


# ---------------------------------------------------------------- -v / -q anywhere
@pytest.mark.parametrize(("argv", "verbose", "quiet"), [
    (["-v", "list"], True, False), (["list", "-v"], True, False), (["--quiet", "list"], False, True),
    (["list", "norm", "-q"], False, True), (["list"], False, False),
    (["-v", "list", "mask", "-inf"], True, False),
])
def test_verbosity_goes_before_or_after_the_command(argv: list[str], verbose: bool, quiet: bool) -> None:
    from ablate.cli import _list_names_may_start_with_dash

    args = build_parser().parse_args(_list_names_may_start_with_dash(argv))
    assert (args.verbose, args.quiet) == (verbose, quiet)


def test_verbose_and_quiet_together_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-v", "list", "-q"]) == 2
    assert capsys.readouterr().err == "error: give -v or -q, not both\n"


def test_quiet_turns_the_training_progress_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from ablate.cli import QUIET_ENV, QUIET_PROGRESS, quiet_libraries
    from ablate.engine.progress import Progress

    for key, value in QUIET_ENV.items():  # recorded, so the test leaves the environment as it found it
        monkeypatch.setenv(key, value)
    monkeypatch.delenv(QUIET_PROGRESS, raising=False)
    assert Progress(10).enabled
    monkeypatch.setenv(QUIET_PROGRESS, "0")  # recorded by monkeypatch, so the test leaves it as it was
    quiet_libraries(quiet=True)
    assert not Progress(10).enabled


# ---------------------------------------------------------------- help texts
def _subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_help_is_current_and_every_positional_is_described(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert "decoder-only" in (parser.description or "") and "encoder-decoder" in (parser.description or "")
    # the built-in axes come first, in declaration order (a plugin's after them): the help names them all
    assert [a.kind for a in registry.axes()][:len(LIST_KINDS)] == list(LIST_KINDS)
    list_help = next(a.help for a in _subparsers()["list"]._actions if a.dest == "kind")
    assert all(kind in (list_help or "") for kind in LIST_KINDS)
    for name, sub in _subparsers().items():
        for action in sub._actions:
            if not action.option_strings:
                assert action.help, f"{name} {action.dest}"
    with pytest.raises(SystemExit):
        main(["--help"])
    top = capsys.readouterr().out
    assert "    study (ablate)" in top and re.search(r"^    ablate\b", top, re.M) is None


def test_study_is_the_command_and_ablate_its_alias() -> None:
    for word in ("study", "ablate"):
        args = build_parser().parse_args([word, "x.yaml", "--dry-run"])
        assert args.command == "study" and args.dry_run
    assert COMMAND["ablate"] is COMMAND["study"]


def test_every_hint_message_and_doc_names_the_command_study() -> None:
    """The README teaches `ablate study`; a hint, message, report or doc saying `ablate ablate` (the alias)
    left a user with two names for one command. Only the command table names the alias."""
    repo = Path(__file__).resolve().parents[1]
    files = [*repo.glob("ablate/**/*.py"), *repo.glob("docs/*.md"), repo / "README.md",
             repo / "CONTRIBUTING.md", *repo.glob("reports/*/report.md"), *repo.glob("reports/*/report.html"),
             *repo.glob("experiments/**/*.yaml"), *repo.glob("scripts/*.py")]
    found = [(str(path.relative_to(repo)), text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.end())])
             for path in files for text in [path.read_text()]
             for m in re.finditer(r"ablate\s+ablate\b", text)]  # wrapped over a line too
    # the examples' alias note and the command table's
    assert [path for path, _ in found] == ["ablate/cli.py", "ablate/cli.py"], found
    (_, examples), (_, table) = found
    assert "(alias: ablate ablate)" in examples and '"`ablate ablate`)", _ablate_args' in table, found


# ---------------------------------------------------------------- common names
@pytest.mark.parametrize(("kind", "common", "registered"), [
    ("norm", "layernorm", "builtin"), ("norm", "LayerNorm", "builtin"), ("norm", "rmsnorm", "rms"),
    ("norm", "RMSNorm", "rms"), ("positions", "rotary", "rope"), ("residual", "prenorm", "pre_norm"),
])
def test_common_names_suggest_the_registered_one(kind: str, common: str, registered: str) -> None:
    assert suggest(kind, common, registry.names(kind)) == registered


def test_every_common_name_points_at_a_registered_component() -> None:
    for kind, table in COMMON_NAMES.items():
        assert set(table.values()) <= set(registry.names(kind)), kind


def test_a_spec_and_list_suggest_the_registered_name(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nmodel: {norm: layernorm}\nablation: {axes: {model.norm: [rmsnorm]}}\n")
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert (f"{spec}:2: model.norm: unknown norm 'layernorm'; accepted: builtin, custom, rms, scale; "
            "did you mean 'builtin'?") in err
    assert "'rmsnorm' gives an invalid spec" in err and "did you mean 'rms'?" in err
    assert main(["list", "layernorm"]) == 2
    assert capsys.readouterr().err.rstrip().endswith("did you mean norm 'builtin'?")


# ---------------------------------------------------------------- the dry run says the design
@pytest.mark.parametrize(("design", "note"), [("", True), ("  design: one_at_a_time\n", False),
                                              ("  design: full_factorial\n", False)])
def test_the_dry_run_names_the_design_and_a_defaulted_one(
        bare_workdir: Path, capsys: pytest.CaptureFixture[str], design: str, note: bool) -> None:
    (bare_workdir / "s.yaml").write_text(SPEC_2X2.replace("DESIGN", design))
    assert main(["study", "s.yaml", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    name = design.split(":")[1].strip() if design else "one_at_a_time"
    variants = 4 if name == "full_factorial" else 3
    assert out[0].startswith(f"study two-axes: design {name}, {variants} variants x 1 seed")
    notes = [line for line in out if line.startswith("note: design left to its default")]
    assert notes == ([("note: design left to its default, one_at_a_time: each axis changes alone from the "
                       "baseline (3 variants), never two together; `design: full_factorial` runs every "
                       "combination (4 variants)")] if note else [])
    assert listing(bare_workdir) == ["s.yaml"]


# ---------------------------------------------------------------- evaluate: the right kind of run
PROSE = "The first paragraph,\nwrapped over two lines.\n\nA second one, and more words.\n\n\ndef f(x):\n" \
        "    return x\n"


def test_evaluate_scores_an_lm_on_text_and_refuses_translation_files(
        bare_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ablate.run.runner import run_experiment
    from ablate.spec.load import load_spec

    (bare_workdir / "train.txt").write_text(PROSE * 4)
    (bare_workdir / "val.txt").write_text(PROSE)
    (bare_workdir / "lm.yaml").write_text(
        "name: lm-eval\ndata:\n  source: text\n  text: {train: train.txt, val: val.txt}\n"
        "  tokenizer: {kind: char, vocab_size: 80}\n  max_len: 8\n  batch_tokens: 64\n"
        "model: {arch: decoder_only, d_model: 16, heads: 2, decoder_layers: 1, d_ff: 32, max_positions: 64}\n"
        "train: {max_steps: 4, eval_every: 2, checkpoint_every: 2}\n")
    result = run_experiment(load_spec(bare_workdir / "lm.yaml"), quiet=True)
    assert result.status == "finished" and result.run_id is not None
    capsys.readouterr()
    assert main(["evaluate", result.run_id, "--text", "val.txt"]) == 0
    out = capsys.readouterr().out
    ppl = float(re.search(r"perplexity\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    bpb = float(re.search(r"bits per byte\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    # the run's own validation text, scored again: the run's own final numbers
    assert math.isclose(ppl, result.metrics["val/ppl"], abs_tol=0.006)
    assert math.isclose(bpb, result.metrics["val/bpb"], abs_tol=0.00006)
    assert "3 documents, cut as paragraphs" in out

    assert main(["evaluate", result.run_id, "--src", "val.txt", "--ref", "val.txt"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"error: run {result.run_id} is a decoder-only language model: score it with "
                    f"`ablate evaluate {result.run_id} --text FILE` (perplexity, bits per byte)")
    assert main(["evaluate", result.run_id]) == 2
    assert "give --src FILE and --ref FILE" in capsys.readouterr().err
