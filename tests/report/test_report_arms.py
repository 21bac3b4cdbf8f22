"""The report of a study with ``tune:`` and ``confirm:`` (tuning each variant, confirming at a larger scale),
end to end through `ablate study` and
`ablate report` on the synthetic study of tests/tuned_studies.py, whose answer is known: ``norm=custom``
needs 3x the baseline's learning rate (worse at the baseline's settings, equal at its own best) and
``residual=post_norm`` is better on the short cells and worse at the larger setting (reversed)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from ablate.cli import main as cli_main
from ablate.launch.local_study import main_ablate
from ablate.report.compute.arm_verdicts import Judged, Twice, pending_text
from ablate.stats.verdict import Look, read
from ablate.tracking import record
from tests.tuned_studies import fake_training, write_study


def _report(workdir: Path, name: str) -> tuple[str, dict]:
    out = workdir / "report"
    assert cli_main(["report", name, "--out", str(out)]) == 0
    return (out / "report.md").read_text(), json.loads((out / "report.json").read_text())


@pytest.mark.slow  # a real study, training or subprocess (the fast tier stays under 3 minutes)
def test_worse_at_the_baselines_settings_equal_at_its_own_best_and_reversed_at_scale(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trained = fake_training(monkeypatch)
    spec = write_study(workdir, "known")
    # a published claim on the variant tuning rescues: its label must not pass the baseline-settings arm's
    # verdict off as the study's
    spec.write_text(spec.read_text() + "  expect: [{variant: norm=custom, effect: none, source: A tuning "
                    "paper}]\n")
    assert main_ablate(str(spec)) == 0
    assert len(trained) == 38  # own best: 3 equal pairs are too few for "no effect", a 4th seed settles it
    text, data = _report(workdir, "known")
    claim = data["published"][0]
    assert (claim["outcome"], claim["at_baseline_settings_only"]) == ("contradicted", True)
    line = next(x for x in text.splitlines() if x.startswith("- **Contradicted at the baseline's settings** "
                                                              "(A tuning paper): `norm=custom` no effect"))
    assert "At its own best settings the comparison reads -0.006 exact match [" in line and "n=4" in line
    assert ": no effect (see Each variant at its own best)." in line

    # The verdicts at the baseline's settings count those cells only: no own-best run of norm=custom (equal
    # to the baseline) leaks into them
    seq = {c["variant"]: c for c in data["sequential"]["comparisons"]}
    assert seq["norm=custom"]["state"] == "effect" and seq["norm=custom"]["pairs"] == 3
    assert seq["norm=custom"]["diff"] == pytest.approx(-1, abs=0.05)
    # every effect twice, both intervals: worse at the baseline's settings, no effect at its own best
    twice = {r["variant"]: r for r in data["own_best"]}
    custom = twice["norm=custom"]
    assert (custom["baseline_settings"]["answer"], custom["own_best"]["answer"], custom["changed"]) == (
        "worse", "no effect", True)
    assert custom["own_best"]["diff"] == pytest.approx(0, abs=0.05)
    assert -0.1 < custom["own_best"]["lo"] < custom["own_best"]["hi"] < 0.1
    # the opening figure draws the own-best interval of the variant whose search moved its settings only
    drawn = {v["variant"]: v["own_best"] for v in data["verdicts"]}
    assert drawn["residual=post_norm"] is None
    assert drawn["norm=custom"] == {k: custom["own_best"][k] for k in ("diff", "lo", "hi")}
    assert ("the paired, repeated interval at the baseline's settings, on `val/exact_match`" in text
            and "squares: `val/exact_match` with the variant and the baseline each at its own best settings, "
            "for `norm=custom`, whose search moved them" in text)
    assert custom["baseline_settings"]["hi"] < 0
    post = twice["residual=post_norm"]
    assert (post["baseline_settings"]["answer"], post["own_best"]["answer"], post["changed"]) == (
        "better", "better", False)
    # what tuning did, per comparison: post_norm's search kept the baseline's settings, as did the
    # baseline's, so its own-best arm is the very same cells
    assert (custom["tuning"], post["tuning"]) == ("changed", "same_cells")
    # the own-best arm selected on validation: its test split on the same seeds and look has a column beside
    # it (these fake runs log no test split: a dash)
    assert "| at its own best | its own best on test | tuning |" in text
    assert ": better | — | same settings as the baseline: same cells |" in text
    assert ": no effect | — | **changed** |" in text
    assert all(r["own_best_test"] is None for r in data["own_best"])
    assert ("**Tuning changed** `norm=custom`: worse at the baseline's settings, no effect at its own best"
            in text)
    # the regime says which arm the opening verdicts are
    assert ("the spec's hyperparameters (who tuned them is not recorded) for these verdicts; each variant "
            "was also tuned by its own search, see Each variant at its own best") in text
    assert "| norm=custom | -1.004 exact match [" in text and ": worse | -0.006 exact match [" in text
    # each variant's best settings and how far they moved
    best = {r["variant"]: r for r in data["best_settings"]}
    assert best["norm=custom"]["best"] == {"train.optimizer.lr": 0.003}
    assert best["norm=custom"]["changes"][0]["shown"] == "0.001 -> 0.003"
    assert best["baseline"]["changes"][0]["shown"] == "same" and best["baseline"]["distance"] == 0
    assert best["norm=custom"]["score_at_baseline_settings"] == pytest.approx(0, abs=0.05)
    # one step of the four-value grid (0.00033, 0.001, 0.003, 0.009): a third of its span
    assert "| norm=custom | train.optimizer.lr: 0.001 → 0.003 | 33% |" in text
    assert best["norm=custom"]["distance"] == pytest.approx(1 / 3)

    # Dodge et al.'s curve of each search, by the closed form: the baseline's 4 grid trials score
    # -3, 0, 0, 1 plus one shared noise c; P(best of n is the i-th worst) = (i/4)^n - ((i-1)/4)^n
    curve = data["evp"]["baseline"]
    c = curve[0]["mean"] + 0.5  # n = 1: the mean, (-3 + 0 + 0 + 1) / 4 + c
    assert curve[1]["mean"] == pytest.approx((-3 * 1 + 7 * 1) / 16 + c)  # n = 2: 1/16, 3/16, 5/16, 7/16
    assert curve[3]["mean"] == pytest.approx((-3 * 1 + 175 * 1) / 256 + c)  # n = 4: 1/256 ... 175/256
    assert all(p["low"] <= p["mean"] <= p["high"] for p in curve)
    assert (workdir / "report" / "figures" / "expected_validation.png").stat().st_size > 0
    assert "## Tuning budget" in text
    assert "`residual=post_norm` has the best expected score at every budget" in text

    # at the larger setting: no effect transfers, the sign that flipped is reported as reversed
    scale = {v["variant"]: v for v in data["scale"]["verdicts"]}
    assert (scale["norm=custom"]["small"], scale["norm=custom"]["outcome"]) == ("none", "transfers")
    assert (scale["residual=post_norm"]["small"], scale["residual=post_norm"]["outcome"]) == (
        "better", "reverses")
    assert scale["residual=post_norm"]["diff"] == pytest.approx(-0.2, abs=0.05)
    assert scale["residual=post_norm"]["pairs"] == 4 and scale["residual=post_norm"]["confidence"] == 0.975
    # the summary leads with the verdicts that hold at both scales
    assert text.index("**Holds at both scales**") < text.index("**Not confirmed at the larger setting**") \
        < text.index("**Summary**")
    assert "- norm=custom: no effect as large as the margin → **transfers** at the larger setting" in text
    assert ("- residual=post_norm: better than the baseline → **reverses** at the larger setting: -0.198"
            in text)

    # what each part cost, from the runs' own records (2 s wall, 3 s CPU each)
    parts = {p["part"]: p for p in data["compute"]}
    assert [p["runs"] for p in data["compute"]] == [10, 12, 4, 12]  # seed 3 of the baseline and norm=custom
    assert parts["searches (every trial)"]["cpu_hours"] == pytest.approx(12 * 3 / 3600)
    assert parts["cells at each variant's own best"]["wall_hours"] == pytest.approx(4 * 2 / 3600)
    assert "## Compute by part" in text and "| **all** | 38 | 0.02 | 0.03 |" in text
    assert "- Arms: 10 cells at the baseline's settings" in text  # seed 3 of the baseline: the own best's
    # the own-best arm trained 4 cells of its 11: the others are the baseline's and post_norm's, reused
    assert ("11 cells at each variant's own best (7 of them the same cells as at the baseline's settings)"
            in text)
    # runs.csv: every arm's runs, a shared cell once per arm
    with (workdir / "report" / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [sum(r["arm"] == a for r in rows) for a in record.ARMS] == [10, 11, 12]


def test_without_tune_the_verdicts_at_the_baselines_settings_are_checked_at_scale(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trained = fake_training(monkeypatch)
    assert main_ablate(str(write_study(workdir, "plain", tune=False))) == 0
    assert len(trained) == 9 + 12  # no search, no own-best cell
    text, data = _report(workdir, "plain")
    scale = {v["variant"]: (v["small"], v["outcome"]) for v in data["scale"]["verdicts"]}
    assert scale == {"norm=custom": ("worse", "transfers"), "residual=post_norm": ("better", "reverses")}
    assert "Each comparison the study decided at the baseline's settings was rerun at `train.max_steps=40`" \
        in text
    assert "own_best" not in data and "evp" not in data and "## Each variant at its own best" not in text
    assert "**Holds at both scales**: the study's verdicts at the baseline's settings" in text
    assert [p["runs"] for p in data["compute"]] == [9, 0, 0, 12]


def test_a_study_that_decides_nothing_says_so_at_the_larger_scale(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No variant differs and the noise (sd 1) dwarfs min_effect (0.1): while the rounds continue nothing is
    decided yet, and after the last look nothing was decided, so no cell runs at the larger setting and the
    report says why instead of describing a check that never ran."""
    import random

    from ablate.spec.experiment import ExperimentSpec

    def noise(spec: ExperimentSpec) -> float:
        return random.Random(f"{spec.model.norm}/{spec.model.residual}/{spec.seed}").gauss(0.0, 1.0)

    monkeypatch.setattr("tests.tuned_studies.score", noise)
    trained = fake_training(monkeypatch, interrupt_at=(9,))  # stopped in the second round
    path = write_study(workdir, "nothing", tune=False)
    assert main_ablate(str(path)) != 0 and len(trained) == 10
    text, data = _report(workdir, "nothing")
    assert ("**Holds at both scales**: none: no comparison is decided at the baseline's settings yet; each "
            "one the study decides is rerun at the larger setting as its rounds continue") in text
    assert data["scale"]["verdicts"] == []

    assert main_ablate(str(path)) == 0
    assert len(trained) == 13 and {s.train.max_steps for s in trained} == {20}  # none at the larger setting
    text, data = _report(workdir, "nothing")
    assert "undecided at the maximum of 4 seeds" in text
    said = ("the study decided no comparison at the baseline's settings (each is undecided at its maximum of "
            "seeds), so none was rerun at the larger setting: there is no verdict to check there")
    assert f"**Holds at both scales**: none: {said}" in text
    assert f"The larger setting is `train.max_steps=40` on seeds 10, 11, 12, 13: {said}." in text
    assert "Each comparison the study decided" not in text and data["scale"]["verdicts"] == []


@pytest.mark.soak  # in the soak tier: the default suite stays under 10 minutes
def test_an_imported_export_continues_without_searching_again_and_reports_the_same(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The export carries the searches and their trials; an import recreates them in MLflow and in each
    search's Optuna study, so the study goes on where it was (nothing trains) and its report is the same."""
    from tests.stores import mlflow_store

    trained = fake_training(monkeypatch)
    path = write_study(workdir, "moved")
    assert main_ablate(str(path)) == 0
    before, _ = _report(workdir, "moved")
    assert cli_main(["export", "moved", "--out", str(workdir / "export")]) == 0
    meta = json.loads((workdir / "export" / "study.json").read_text())
    assert [(s["variant"], s["trials"]) for s in meta["searches"]] == [
        ("baseline", 4), ("norm=custom", 4), ("residual=post_norm", 4)]
    assert len(meta["cells"]) == 26  # every arm's cells

    fresh = workdir / "fresh"
    fresh.mkdir()
    monkeypatch.chdir(fresh)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(fresh))
    assert cli_main(["import", str(workdir / "export")]) == 0
    assert "3 searches (12 trials into Optuna)" in capsys.readouterr().out
    assert main_ablate(str(path)) == 0
    assert len(trained) == 38  # no search, own-best or confirmation cell trained again
    after, _ = _report(fresh, "moved")

    def body(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("Report generated on")]

    assert body(after) == body(before)


def _judged(answer: str, n: int, final: bool) -> Judged:
    state = {"worse": "effect", "better": "effect", "open": "open"}[answer]
    diff = 1.0 if answer == "better" else -1.0
    look = Look(n, n - 2, diff, -3.0, 1.0, 1.0, 2.0, state, final, decided=state == "effect")  # type: ignore[arg-type]
    judged = Judged("embeddings=tied", read([look], higher=True))
    assert judged.answer == answer
    return judged


def test_a_verdict_the_own_best_arm_has_not_settled_is_pending_not_unchanged() -> None:
    """The committed modern-axes report said "Tuning changed no verdict: each holds" while tied embeddings,
    worse at the baseline's settings, was still open at its own best after 6 of 8 seeds."""
    worse = _judged("worse", 4, final=False)
    running = Twice("embeddings=tied", worse, _judged("open", 6, final=False))
    assert running.pending and not running.changed
    assert pending_text([running]) == (
        "Not settled yet at its own best, the study's rounds continue: `embeddings=tied` (worse at the "
        "baseline's settings; open at its own best after 6 seeds).")
    # undecided at the maximum of seeds at its own best, worse at the baseline's: tuning changed it
    ended = Twice("embeddings=tied", worse, _judged("open", 8, final=True))
    assert ended.changed and not ended.pending
    assert ended.own is not None and ended.own.verdict == "undecided at the maximum of seeds"
    assert "n=8: undecided at the maximum of seeds" in ended.own.shown(2, "BLEU")
    assert not Twice("x", worse, _judged("worse", 5, final=False)).changed
    # both arms the same cells, still open: the comparison's own rounds continue, tuning changes nothing
    same = Twice("positions=rope", _judged("open", 7, final=False), _judged("open", 7, final=False))
    assert same.identical and not same.pending and not same.changed
    assert not running.identical
    # the own-best table's tuning column: pending before 'same cells', which needs both arms settled too
    from ablate.report.sections.own_best import _tuning_effect

    held = Twice("x", worse, _judged("worse", 5, final=False))
    assert [_tuning_effect(t, {"x", "embeddings=tied"}) for t in (running, ended, held)] == [
        "pending", "changed", "same_cells"]
    assert _tuning_effect(held, set()) == "holds"
    # the published-claims line carries the own-best reading where tuning changed or has not settled it
    from ablate.report.sections.published import _at_own_best

    assert _at_own_best(running, 2, "BLEU") == (
        " At its own best settings the comparison reads -1.00 BLEU [-3.00, +1.00], n=6: open (its rounds "
        "continue) (see Each variant at its own best).")
    assert _at_own_best(Twice("x", worse, worse), 2, "BLEU") == ""
    assert _at_own_best(same, 2, "BLEU") == ""  # the same cells: no second reading
