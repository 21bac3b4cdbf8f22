"""`ablate report` on real tiny studies: an ablation (2 variants x 3 seeds + a variant that diverges) and a
2 x 2 full factorial with 2 seeds, imported from their committed exports (tests/report_studies.py says how
they were trained and how to regenerate them), plus a one-seed ablation with explicit attention and a
3-trial search trained end to end by the project's own `main_ablate` / `main_tune`, all in a sqlite MLflow
store in a temporary folder.

Every number in the main table is recomputed here from the runs with scipy; the HTML must be
self-contained; two renderings of the same runs must agree byte for byte apart from the timestamp line.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import mlflow
import numpy as np
import pytest
from mlflow import MlflowClient
from scipy import stats

from ablate.errors import AblateError
from ablate.report.build import main_report
from ablate.report.compute import statistics as st
from ablate.report.render import STAMP_PREFIX
from ablate.stats import fixed_sample
from ablate.tracking import record
from tests.report_studies import EXPORTED, EXPORTS, ONE_SEED, SEARCH
from tests.stores import mlflow_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A working folder holding the MLflow store of the four studies and their reports."""
    import torch

    from ablate.launch.local_study import main_ablate
    from ablate.launch.tune_command import main_tune
    from ablate.study.export_study import main_import

    root = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("MLFLOW_TRACKING_URI", mlflow_store(root))
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        for name, text in (("one.yaml", ONE_SEED), ("search.yaml", SEARCH)):
            (root / name).write_text(text)
        for study in EXPORTED:  # trained once and committed; imported as a study moved between hosts is
            assert main_import(str(EXPORTS / study)) == 0
        assert main_ablate("one.yaml") == 0
        assert main_tune("search.yaml") == 0
        assert main_report("rep-abl", "out/abl") == 0
        assert main_report("rep-abl", "out/abl-again") == 0
        assert main_report("rep-search", "out/search") == 0
        assert main_report("rep-fac", "out/fac") == 0
        one = _parent("rep-one")
        assert main_report(one.info.run_id, None) == 0  # by parent run id; default folder reports/<study>
        torch.set_num_threads(threads)
        yield root


def _parent(study: str) -> mlflow.entities.Run:
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list",
                              filter_string=f"tags.`ablate.study` = '{study}'")
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return parent


def _children(study: str) -> list[mlflow.entities.Run]:
    parent = _parent(study)
    return mlflow.search_runs(experiment_ids=[parent.info.experiment_id], output_format="list",
                              filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")


def _md_table(md: str, first_header: str, having: str = "") -> list[dict[str, str]]:
    """The first markdown table whose header row starts with ``| first_header |`` (and names ``having``)."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith(f"| {first_header} |") and f"| {having}" in line)
    header = [c.strip() for c in lines[start].strip("|").split(" | ")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, [c.strip() for c in line.strip("|").split(" | ")], strict=True)))
    return rows


def _last(run: mlflow.entities.Run, key: str) -> float:
    """The value logged at the highest step (peak memory is logged at every evaluation, then at the end)."""
    history = MlflowClient().get_metric_history(run.info.run_id, key)
    return max(history, key=lambda m: (m.step, m.timestamp)).value


def _resampled(d: np.ndarray) -> tuple[float, float, float]:
    """scipy's bootstrap percentile interval and exact sign-flip p of 2-3 paired differences."""
    boot = stats.bootstrap((d,), np.mean, n_resamples=fixed_sample.RESAMPLES, method="percentile",
                           rng=fixed_sample.RESAMPLE_SEED)
    perm = stats.permutation_test((d,), np.mean, permutation_type="samples", rng=fixed_sample.RESAMPLE_SEED)
    return float(boot.confidence_interval.low), float(boot.confidence_interval.high), float(perm.pvalue)


def _recompute(values: list[float], decimals: int) -> tuple[float, float, str]:
    x = np.asarray(values, dtype=float)
    mean = float(np.mean(x))
    if len(x) < 2:
        return mean, math.nan, st.fmt(mean, decimals)
    half = float(stats.t.ppf(0.975, len(x) - 1) * stats.sem(x))
    return mean, half, f"{st.fmt(mean, decimals)} ± {st.fmt(half, decimals)}"


# ---------------------------------------------------------------- ablation
def test_main_table_equals_a_recomputation_from_the_runs(ws: Path) -> None:
    md = (ws / "out/abl/report.md").read_text()
    data = json.loads((ws / "out/abl/report.json").read_text())
    table = {row["variant"]: row for row in _md_table(md, "variant", "val loss")}
    # The cost columns are a table of their own: mean over seeds (lowest–highest seed).
    cost = {row["variant"]: row for row in _md_table(md, "variant", "wall s")}
    runs = _children("rep-abl")
    columns = {"val exact match": ("val/exact_match", 3), "test exact match": ("test/exact_match", 3),
               "val loss": ("val/loss", 3), "val ppl": ("val/ppl", 2), "params": ("model/params", 0),
               "tokens/s": ("train/tokens_per_s", 0), "peak MB": ("peak_memory_mb", 1),
               "wall s": ("train/wall_time_s", 1)}
    costs = {"params", "tokens/s", "peak MB", "wall s"}
    assert set(table) == set(cost) == {"baseline", "residual=post_norm", "lr=50"}
    assert not costs & set(next(iter(table.values())))
    checked = 0
    for variant, row in table.items():
        mine = [r for r in runs if r.data.tags["ablate.variant"] == variant]
        done = [r for r in mine if r.data.tags["ablate.status"] == "finished"]
        assert row["runs"] == str(len(mine)) and row["finished"] == str(len(done))
        assert row["diverged"] == str(sum(r.data.tags["ablate.status"] == "diverged" for r in mine))
        for header, (key, decimals) in columns.items():
            values = [record.result_metrics(r.data.metrics)[key] for r in done]
            if not values:
                assert (cost[variant] if header in costs else row)[header] == "—"
                continue
            mean, half, text = _recompute(values, decimals)
            if header in costs:
                lo, hi = st.fmt(min(values), decimals), st.fmt(max(values), decimals)
                text = st.fmt(mean, decimals) + (f" ({lo}–{hi})" if lo != hi else "")
                assert cost[variant][header] == text, (variant, header)
            else:
                assert row[header] == text, (variant, header)
            stored = data["variants"][variant]["metrics"][key]
            assert stored["mean"] == pytest.approx(mean, rel=1e-12, abs=1e-12)
            assert stored["n"] == len(values)
            if not math.isnan(half):
                assert stored["half_width"] == pytest.approx(half, rel=1e-9, abs=1e-12)
            checked += 1
    assert checked == 2 * len(columns)


def test_effects_of_three_shared_seeds_are_bootstrapped_and_permutation_tested(ws: Path) -> None:
    data = json.loads((ws / "out/abl/report.json").read_text())
    md = (ws / "out/abl/report.md").read_text()
    runs = _children("rep-abl")

    def by_seed(variant: str, key: str) -> dict[int, float]:
        return {int(r.data.tags["ablate.seed"]): record.result_metrics(r.data.metrics)[key] for r in runs
                if r.data.tags["ablate.variant"] == variant and r.data.tags["ablate.status"] == "finished"}

    effects = {(e["variant"], e["metric"]): e for e in data["effects"]}
    assert data["primary_metric"] == "test/exact_match"
    for key in ("test/exact_match", "val/loss"):
        base, post = by_seed("baseline", key), by_seed("residual=post_norm", key)
        assert sorted(base) == sorted(post) == [0, 1, 2]
        a, b = [base[s] for s in sorted(base)], [post[s] for s in sorted(post)]
        e = effects[("residual=post_norm", key)]
        assert e["diff"] == pytest.approx(np.mean(b) - np.mean(a), abs=1e-12)
        # 3 pairs are too few for a t-test: bootstrap interval and exact sign-flip test, as scipy has them.
        assert e["test"] == "exact permutation (sign flips)" and e["interval"] == "bootstrap"
        lo, hi, p = _resampled(np.subtract(b, a))
        assert (e["lo"], e["hi"], e["p"]) == (pytest.approx(lo, rel=1e-9, abs=1e-12),
                                              pytest.approx(hi, rel=1e-9, abs=1e-12), pytest.approx(p))
        assert e["p"] >= 0.25  # 8 sign patterns: nothing smaller exists
        assert "significant" not in e["verdict"] and "out of reach with 3 seeds" in e["verdict"]
    assert any(line.startswith("- residual=post_norm: ") for line in md.splitlines())
    assert "**Warning:** too few seeds to conclude" in md
    # The diverged variant has no finished run: nothing to test, and the report says why.
    lr = effects[("lr=50", "test/exact_match")]
    assert lr["diff"] is None and lr["p"] is None and "3 of 3 runs diverged" in lr["verdict"]


def test_full_factorial_gets_main_effects_and_an_interaction(ws: Path) -> None:
    data = json.loads((ws / "out/fac/report.json").read_text())
    md = (ws / "out/fac/report.md").read_text()
    runs = _children("rep-fac")
    assert len(runs) == 8 and all(r.data.tags["ablate.status"] == "finished" for r in runs)
    rows = {(f["label"], f["metric"]): f for f in data["factorial"]}
    for key in (data["primary_metric"], "val/loss"):
        y = {(r.data.params["model.residual"], r.data.params["train.schedule.warmup_steps"],
              int(r.data.tags["ablate.seed"])): record.result_metrics(r.data.metrics)[key] for r in runs}
        # Main effect: cells that differ only in the residual, matched on warm-up and seed (4 pairs), the
        # two warm-up strata averaged within each seed: n is the 2 seeds
        d = [y[("post_norm", w, s)] - y[("pre_norm", w, s)] for w in ("0", "5") for s in (0, 1)]
        main = rows[("residual=post_norm vs pre_norm (main effect)", key)]
        assert main["n"] == 2 and main["incomplete"] == 0 and main["diff"] == pytest.approx(np.mean(d))
        # Per seed, the mean over the warm-up strata: 2 differences, resampled as any 2-seed comparison is
        per_seed = np.array([np.mean([y[("post_norm", w, s)] - y[("pre_norm", w, s)] for w in ("0", "5")])
                             for s in (0, 1)])
        lo, hi, p = _resampled(per_seed)
        assert (main["lo"], main["hi"], main["p"]) == (
            pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12), pytest.approx(p))
        # Interaction: the residual's effect with warm-up minus without, per seed (2 seeds: resampled).
        dd = np.array([(y[("post_norm", "5", s)] - y[("pre_norm", "5", s)])
                       - (y[("post_norm", "0", s)] - y[("pre_norm", "0", s)]) for s in (0, 1)])
        inter = rows[("residual=post_norm × train.schedule.warmup_steps=5 (interaction)", key)]
        lo, hi, p = _resampled(dd)
        assert inter["kind"] == "interaction" and inter["n"] == 2
        assert inter["diff"] == pytest.approx(dd.mean())
        assert (inter["lo"], inter["hi"], inter["p"]) == (
            pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12), pytest.approx(p))
        assert "not testable with 2 seeds" in inter["verdict"]
    assert "## Factorial effects" in md and "**Main effects and interactions**" in md
    assert "|  | train.schedule.warmup_steps=0 | train.schedule.warmup_steps=5 |" in md
    assert "- train.schedule.warmup_steps=5 vs 0 (main effect): " in md
    assert (ws / "out/fac/figures/factorial.png").is_file()


def test_a_diverged_cell_appears_in_the_report(ws: Path) -> None:
    md = (ws / "out/abl/report.md").read_text()
    main = _md_table(md, "variant", "diverged")
    (row,) = [r for r in main if r["variant"] == "lr=50"]
    assert row["diverged"] == "3" and row["finished"] == "0" and row["test exact match"] == "—"
    section = md[md.index("## Divergence and failures"):]
    rows = _md_table(section, "variant", "status")
    assert [(r["variant"], r["seed"], r["status"]) for r in rows] == [("lr=50", s, "diverged") for s in "012"]
    assert "no finished run for `lr=50`" in md


def test_html_is_self_contained_and_embeds_every_figure(ws: Path) -> None:
    for folder in ("out/abl", "out/search", "out/fac", "reports/rep-one"):
        page = (ws / folder / "report.html").read_text()

        class Collect(HTMLParser):
            links: list[tuple[str, str, str]] = []

            def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
                self.links += [(tag, k, v or "") for k, v in attrs if k in ("src", "href")]

        parser = Collect()
        parser.links = []
        parser.feed(page)
        parser.close()
        remote = [(tag, v) for tag, _, v in parser.links if v.startswith(("http://", "https://", "//"))]
        # nothing the page shows is fetched: the only remote addresses are links into the MLflow UI's runs
        assert all(tag == "a" and "/#/experiments/" in v for tag, v in remote), remote
        images = [v for tag, k, v in parser.links if tag == "img"]
        pngs = sorted((ws / folder / "figures").glob("*.png"))
        assert images and len(images) == len(pngs)
        embedded = {base64.b64decode(v.split(",", 1)[1]) for v in images}
        assert all(v.startswith("data:image/png;base64,") for v in images)
        assert embedded == {p.read_bytes() for p in pngs}
        assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
        assert "overflow-x: auto" in page and "<link" not in page and "<script" not in page


def test_every_figure_is_a_real_png(ws: Path) -> None:
    names = {p.name for p in (ws / "out/abl/figures").glob("*.png")}
    assert names == {"forest.png", "learning_curves.png", "quality_vs_cost.png"}
    for path in [*(ws / "out").glob("*/figures/*.png"), *(ws / "reports").glob("*/figures/*.png")]:
        raw = path.read_bytes()
        assert raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) > 1000
        image = matplotlib.image.imread(path)
        assert image.shape[0] > 100 and image.shape[1] > 100
        assert float(np.std(image)) > 0.01  # something is drawn, not a blank canvas


def test_rerun_gives_identical_files_apart_from_the_timestamp(ws: Path) -> None:
    a, b = ws / "out/abl", ws / "out/abl-again"
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert {str(f) for f in files} >= {"report.md", "report.html", "runs.csv", "report.json"}
    for rel in files:
        x, y = (a / rel).read_bytes(), (b / rel).read_bytes()
        if rel.suffix in (".md", ".html"):
            strip = [line for line in x.decode().splitlines() if STAMP_PREFIX in line]
            assert len(strip) == 1
            x = "\n".join(line for line in x.decode().splitlines() if STAMP_PREFIX not in line).encode()
            y = "\n".join(line for line in y.decode().splitlines() if STAMP_PREFIX not in line).encode()
        assert x == y, rel


def test_runs_csv_lists_every_run_in_order(ws: Path) -> None:
    lines = (ws / "out/abl/runs.csv").read_text().splitlines()
    assert lines[0].startswith("variant,seed,status,spec_hash,run_id,")
    cells = [tuple(line.split(",")[:3]) for line in lines[1:]]
    order = ["baseline", "lr=50", "residual=post_norm"]
    assert cells == [(v, str(s), "diverged" if v == "lr=50" else "finished") for v in order for s in range(3)]
    assert "model.residual" in lines[0] and "train.optimizer.lr" in lines[0]


def test_setup_names_baseline_axes_seeds_and_environment(ws: Path) -> None:
    md = (ws / "out/abl/report.md").read_text()
    runs = _children("rep-abl")
    total = sum(record.result_metrics(r.data.metrics).get("train/wall_time_s", 0.0) for r in runs)
    assert "Seeds: 0, 1, 2" in md and f"({total:,.1f} s)" in md
    assert "| `model.residual` | pre_norm, post_norm |" in md
    assert "| `train.optimizer.lr` | 0.01, 50.0 |" in md
    assert "| residual=post_norm | `model.residual`: pre_norm → post_norm | -64 |" in md
    assert "| torch version |" in md and "| host |" in md and "| dataset | synthetic-copy" in md
    # Hardware: the device tag of every run (CPU threads or the GPU's name) and the CPU model when logged.
    devices = sorted({r.data.tags["ablate.device"] for r in runs})
    assert f"| device | {'; '.join(devices)} |" in md
    cpus = sorted({r.data.tags["ablate.cpu"] for r in runs if r.data.tags.get("ablate.cpu")})
    if not cpus:  # an older run: the first run's environment.json may still name it
        (first,) = [r for r in runs
                    if r.data.tags["ablate.variant"] == "baseline" and r.data.tags["ablate.seed"] == "0"]
        env = json.loads(Path(MlflowClient().download_artifacts(first.info.run_id, "environment.json",
                                                                str(ws / "dl-env"))).read_text())
        cpus = [str(env["cpu"])] if env.get("cpu") else []
    assert (f"| CPU | {'; '.join(cpus)} |" in md) if cpus else ("| CPU |" not in md)
    pads = [r for r in runs if "data/padding_fraction" in r.data.metrics]
    assert ("| padding (`data/padding_fraction`) |" in md) == bool(pads)


def test_report_is_logged_in_the_parent_run(ws: Path) -> None:
    parent = _parent("rep-abl")
    client = MlflowClient()
    logged = {f.path for f in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/report.md", "report/report.html", "report/runs.csv", "report/figures"} <= logged
    figures = {f.path for f in client.list_artifacts(parent.info.run_id, "report/figures")}
    assert "report/figures/forest.png" in figures
    local = client.download_artifacts(parent.info.run_id, "report/report.json", str(ws / "dl"))
    assert Path(local).read_text() == (ws / "out/abl-again/report.json").read_text()


# ---------------------------------------------------------------- one seed, attention
def test_one_seed_study_warns_and_tests_nothing(ws: Path) -> None:
    md = (ws / "reports/rep-one/report.md").read_text()
    assert "**Warning:** too few seeds" in md
    verdict = next(line for line in md.splitlines() if line.startswith("- residual=post_norm: "))
    assert "too few seeds" in verdict and "p=" not in verdict
    effects = json.loads((ws / "reports/rep-one/report.json").read_text())["effects"]
    assert effects and all(e["p"] is None and e["test"] == "none" for e in effects)


def test_explicit_attention_gets_heat_maps(ws: Path) -> None:
    md = (ws / "reports/rep-one/report.md").read_text()
    assert "## Attention" in md and "![" in md.split("## Attention")[1]
    image = matplotlib.image.imread(ws / "reports/rep-one/figures/attention.png")
    assert image.shape[1] > image.shape[0]  # three panels side by side


# ---------------------------------------------------------------- search
def test_search_report_shows_the_tuner_importances_and_best_trials(ws: Path) -> None:
    md = (ws / "out/search/report.md").read_text()
    # The setup names what the tuner optimised (the default objective), not a metric it never saw.
    assert "- Objective: `val/loss` (minimise); also reported: `test/" in md
    assert "Quality metric" not in md
    parent = _parent("rep-search")
    client = MlflowClient()
    logged = json.loads(Path(client.download_artifacts(parent.info.run_id, "importance.json",
                                                       str(ws / "dl-imp"))).read_text())
    expected = logged["importances"]["val/loss"]
    rows = _md_table(md, "param", "importance")
    # Two decimals (a few trials' importances are rough); a parameter with one value in every finished
    # trial gets none; report.json keeps every logged value of the others at full precision.
    shown = {r["param"].strip("`"): r["importance"] for r in rows}
    assert set(shown) == set(expected)
    data = json.loads((ws / "out/search/report.json").read_text())
    for k, v in expected.items():
        if k in data["did_not_vary"]:
            assert shown[k] == "did not vary" and k not in data["importances"]
        else:
            assert shown[k] == ("<0.01" if v < 0.005 else f"{v:.2f}") and data["importances"][k] == v
    trials = [r for r in _children("rep-search") if r.data.tags["ablate.status"] == "finished"]
    best = min(trials, key=lambda r: record.result_metrics(r.data.metrics)["val/loss"])
    ranked = _md_table(md, "rank")
    assert ranked[0]["trial"] == best.data.tags["ablate.trial"] and len(ranked) == len(trials)
    assert {p.name for p in (ws / "out/search/figures").glob("*.png")} == {
        "importances.png", "optimisation_history.png", "parallel_coords.png"}
    # The summary comes first and names the tuner's best.yaml: the file the search wrote, runnable as shown.
    intro = md[:md.index("\n## ")]
    best_tag = parent.data.tags["ablate.best_trial"]
    assert f"Best spec (trial {best_tag}): `" in intro
    path = intro.split("`ablate run ", 1)[1].split("`", 1)[0]
    assert path.endswith("/best.yaml") and (ws / path).is_file()
    assert (ws / path).read_text().startswith(f"# best trial {best_tag} ")


# ---------------------------------------------------------------- errors
def test_unknown_study_is_a_one_line_error(ws: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ws)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{ws / 'mlflow.db'}")
    with pytest.raises(AblateError, match="unknown study 'no-such-study'"):
        main_report("no-such-study", None)
    from ablate.cli import main

    assert main(["report", "no-such-study"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-study" in err[0] and "Traceback" not in err[0]
