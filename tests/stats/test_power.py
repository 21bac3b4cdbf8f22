"""The power plan: simulated power against the closed form and against the study's own decision code, the
pilot's paired sds, seeds.max: auto, and the dry run that prints the plan."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from ablate.errors import AblateError
from ablate.launch.local_study import main_ablate
from ablate.stats.power import (
    claim_power,
    detectable,
    expected_truth,
    fixed_sample_power,
    seeds_needed,
    simulate,
    upper_sd,
    with_max,
)
from ablate.stats.sequential import Design, planned_looks
from ablate.study.cell_queue import CellRecord
from ablate.study.pilot import PairedNoise, pilot_from_rows, read_pilot
from ablate.study.seed_rounds import comparison_progress
from ablate.study.sizing import choose_max, cost_lines, format_power_plan, from_pilot, plan_record, power_plan
from tests.study.test_adaptive_seeds import write

ROOT = Path(__file__).resolve().parents[2]
MODERN = ROOT / "reports" / "modern-axes-multi30k"


@pytest.mark.parametrize(("n", "effect", "level"), [(5, 1.0, 0.05), (8, 0.7, 0.05), (12, 0.5, 0.01)])
def test_one_look_matches_the_noncentral_t(n: int, effect: float, level: float) -> None:
    design = Design((n,), level)
    out = simulate(design, effect, 1.0)
    closed = fixed_sample_power(n, effect, 1.0, level)
    assert abs(out.positive + out.negative - closed) < 0.012  # 4 Monte Carlo standard errors at 20k paths
    assert out.mean_seeds == n


def _synthetic_studies(design: Design, effect: float, sd: float, question: str | None, margin: float | None,
                       studies: int, seed: int) -> list[tuple[str, float, float]]:
    """Run the study's own round planner (ablate/study/seed_rounds.py ``progress``) on ``studies``
    synthetic studies of one comparison, each seed's paired difference N(effect, sd): (state, lo, hi) per
    study."""
    rng = np.random.default_rng(seed)
    seeds = list(range(design.looks[-1]))
    cells = [SimpleNamespace(label=label, seed=s, key=f"{label}-{s}")
             for s in seeds for label in ("baseline", "v")]
    expect = [SimpleNamespace(variant="v", effect=question, margin=margin)] if question else []
    plan = SimpleNamespace(cells=cells, seeds=seeds, variants=["baseline", "v"], metric="val/bleu",
                           direction="maximize",
                           spec=SimpleNamespace(ablation=SimpleNamespace(expect=expect)))
    out = []
    for _ in range(studies):
        diffs = effect + sd * rng.standard_normal(len(seeds))
        records = {f"baseline-{s}": CellRecord("finished", 30.0) for s in seeds}
        records |= {f"v-{s}": CellRecord("finished", 30.0 + float(d))
                    for s, d in zip(seeds, diffs, strict=True)}
        p = comparison_progress(plan, design, records)["v"]
        assert p.look is not None
        out.append((p.state, p.look.lo, p.look.hi))
    return out


@pytest.mark.parametrize(("question", "effect", "margin"), [("better", 0.6, None), ("none", 0.0, 0.6),
                                                            (None, 0.9, None)])
def test_predicted_power_matches_the_studys_own_decisions(question: str | None, effect: float,
                                                         margin: float | None) -> None:
    design = Design(planned_looks(3, 10), 0.05, 0.6, 2)
    sd = 0.5
    predicted = simulate(design, effect, sd, question, margin)  # type: ignore[arg-type]
    runs = _synthetic_studies(design, effect, sd, question, margin, 3000, seed=7)
    if question == "none":
        observed = np.mean([s in ("effect", "no_effect") and -margin <= lo and hi <= margin  # type: ignore
                            for s, lo, hi in runs])
        target = predicted.within
    else:
        observed = np.mean([s == "effect" and lo > 0 for s, lo, _ in runs])
        target = predicted.positive
    assert 0.2 < target < 0.98  # a rate that can miss in either direction
    assert abs(observed - target) < 0.03


def test_power_grows_with_seeds_and_the_plan_finds_the_seeds_a_claim_needs() -> None:
    design = Design(planned_looks(3, 6), 0.05, 0.5, 1)
    needed = seeds_needed(design, 0.6, "better", None)
    assert needed is not None and needed > 6
    # the exact design at that maximum reaches 80% (slack for the search's own calibration), one seed less
    # falls short of it
    assert claim_power(with_max(design, needed), 0.6, "better", None) >= 0.78  # type: ignore[operator]
    assert claim_power(with_max(design, needed - 1), 0.6, "better", None) < 0.82  # type: ignore[operator]
    assert seeds_needed(design, 0.6, "none", 0.05) is None  # a margin this narrow: beyond 100 seeds
    assert detectable(design, 1.0) > detectable(with_max(design, 12), 1.0)


def test_a_comparison_is_costed_at_its_claims_truth_else_at_the_null() -> None:
    design = Design(planned_looks(3, 6), 0.05, 0.5, 1)
    assert expected_truth(design, "better", None) == 0.5  # a true claim: the effect it states
    assert expected_truth(design, "worse", None) == 0.5
    assert expected_truth(design, "none", 0.3) == 0.0
    for question in (None, "identical"):  # nothing sized: the null, under which a comparison runs longest
        assert expected_truth(design, question, None) == 0.0
    assert expected_truth(Design(planned_looks(3, 6), 0.05, None, 1), "better", None) == 0.0
    null, true = (simulate(design, t, 0.6, "better", None).mean_seeds for t in (0.0, 0.5))
    assert null > true  # why the null is the cautious cost: an effect stops earlier


def test_upper_sd_is_an_80_percent_upper_confidence_bound() -> None:
    rng = np.random.default_rng(3)
    df = 7
    samples = rng.standard_normal((20_000, df + 1)).std(axis=1, ddof=1)
    covered = np.mean([upper_sd(float(s), df) >= 1.0 for s in samples])
    assert abs(covered - 0.8) < 0.015
    assert upper_sd(1.0, df) == pytest.approx(math.sqrt(df / stats.chi2.ppf(0.2, df)))


def test_pilot_pairs_by_seed_at_the_baseline_settings_and_pools_the_rest() -> None:
    rows = [{"arm": "baseline_settings", "variant": "baseline", "seed": s, "status": "finished",
             "val/bleu": str(30 + s), "train/wall_time_s": "100"} for s in range(4)]
    rows += [{"arm": "baseline_settings", "variant": "a", "seed": s, "status": "finished",
              "val/bleu": str(30 + s + d), "train/wall_time_s": "300"} for s, d in enumerate([1, 2, 1, 4])]
    rows += [{"arm": "baseline_settings", "variant": "b", "seed": s, "status": "finished", "val/bleu": str(v)}
             for s, v in [(0, 30.5), (1, 30.0), (3, 33.5)]]  # seed 2 missing: 3 pairs
    rows += [{"arm": "own_best", "variant": "a", "seed": 0, "status": "finished", "val/bleu": "99"},
             {"arm": "baseline_settings", "variant": "a", "seed": 9, "status": "diverged", "val/bleu": "1"}]
    pilot = pilot_from_rows("p", rows, "val/bleu")
    assert pilot.differences == {"a": [1.0, 2.0, 1.0, 4.0], "b": [0.5, -1.0, 0.5]}
    own = pilot.noise("a")
    assert own is not None and own.sd == pytest.approx(np.std([1, 2, 1, 4], ddof=1)) and own.df == 3
    pooled = pilot.noise("not-in-pilot")
    expected = math.sqrt((3 * np.var([1, 2, 1, 4], ddof=1) + 2 * np.var([0.5, -1, 0.5], ddof=1)) / 5)
    assert pooled is not None and pooled.sd == pytest.approx(expected) and pooled.df == 5
    assert pilot.cell_seconds("a") == 300 and pilot.cell_seconds("b") == 100  # b has no time: the baseline's
    with pytest.raises(AblateError, match="no finished baseline cell with val/loss"):
        pilot_from_rows("p", rows, "val/loss")
    assert pilot.timed_on() is None  # runs.csv without a machine column: nothing to name


def test_the_plans_hours_name_the_machine_the_pilot_was_timed_on() -> None:
    amd, intel = "AMD EPYC (family 25, model 17, stepping 1; bf16)", "Intel Xeon (family 6, model 106)"
    rows = [{"variant": v, "seed": s, "status": "finished", "val/loss": str(1.0 + 0.1 * s + (v == "a") * d),
             "train/wall_time_s": "600", "machine": intel if (v, s) == ("a", 3) else amd}
            for s, d in enumerate([0.1, 0.3, 0.2, 0.1]) for v in ("baseline", "a")]
    pilot = pilot_from_rows("p", rows, "val/loss")
    assert pilot.machines == ((amd, 7), (intel, 1))
    assert pilot.timed_on() == f"{amd} (7 cells) and {intel} (1 cell), averaged over them"
    design = Design(planned_looks(3, 6), 0.05, 0.5, 1)
    plan = from_pilot(design, "val/loss", ["a"], SimpleNamespace(expect=[]), pilot)
    [time_line] = [line for line in cost_lines(plan, 1) if "time:" in line]
    assert f"10.0 min a cell (training time measured on {amd} (7 cells) and {intel}" in time_line
    assert plan_record(plan)["timed_on"] == pilot.timed_on()
    one = pilot_from_rows("p", [r for r in rows if r["machine"] == amd], "val/loss")
    assert one.timed_on() == amd


def test_a_committed_report_is_a_pilot(tmp_path: Path) -> None:
    pilot = read_pilot(str(MODERN), tmp_path, "val/bleu")
    with (MODERN / "runs.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["arm"] == "baseline_settings"]
    base = {r["seed"]: float(r["val/bleu"]) for r in rows if r["variant"] == "baseline"}
    rope = [float(r["val/bleu"]) - base[r["seed"]] for r in rows if r["variant"] == "positions=rope"]
    assert pilot.noise("positions=rope").sd == pytest.approx(np.std(rope, ddof=1))  # type: ignore[union-attr]
    assert pilot.seeds == tuple(range(8))
    assert pilot.timed_on() is not None and pilot.timed_on().startswith("AMD EPYC")  # type: ignore[union-attr]
    with pytest.raises(AblateError, match="has no runs.csv"):
        read_pilot(str(tmp_path), tmp_path, "val/bleu")


def test_auto_max_is_the_largest_worst_case_within_the_budget() -> None:
    design = Design((3,), 0.05, 0.5, 2)
    assert choose_max(design, 3, SimpleNamespace(cells=30, hours=None), {}, ["a", "b"]) == 10
    seconds = {"baseline": 600.0, "a": 1200.0}  # b takes the baseline's time: 2400 s a seed over the three
    assert choose_max(design, 3, SimpleNamespace(cells=None, hours=8.0), seconds, ["a", "b"]) == 12
    with pytest.raises(AblateError, match="cannot run the first look"):
        choose_max(design, 3, SimpleNamespace(cells=8, hours=None), {}, ["a", "b"])


def test_dry_run_with_a_pilot_says_what_the_study_cannot_settle(bare_workdir: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (bare_workdir / "pilot").mkdir()
    with (bare_workdir / "pilot" / "runs.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["variant", "seed", "status", "val/loss", "train/wall_time_s"])
        for s, (b, m) in enumerate([(1.0, 1.3), (1.1, 1.2), (0.9, 1.5), (1.0, 1.1)]):
            w.writerow(["baseline", s, "finished", b, 60])
            w.writerow(["mask=-1e9", s, "finished", m, 60])
    seeds = "  seeds: {min: 2, max: 3}\n  pilot: pilot\n  min_effect: 0.05"
    path = write(bare_workdir, "planned", seeds=seeds)
    text = path.read_text().replace("effect: identical", "effect: none, margin: 0.05")
    path.write_text(text)
    assert main_ablate(str(path), dry_run=True) == 0
    out = capsys.readouterr().out
    assert "noise: paired sd of val/loss from pilot pilot" in out
    assert "cannot settle 'mask=-1e9 ≈ baseline (±0.05)': needs more than 100 seeds" in out
    assert "seeds.max is 3; no design of up to 100 seeds could" in out
    # and 3 seeds at the most could not call it no effect whatever the noise: the plan says so, and how
    assert ("cannot decide mask=-1e9 ≈ baseline (±0.05): at most 3 paired seeds: a none claim needs 4 at "
            "least to be called no effect; the smallest design that could: seeds: {min: 4, max: 4}; at its "
            "pilot's noise, more than 100") in out
    assert "positions=learned" in out and "[noise: pooled over 1 comparisons, 4 pairs]" in out
    assert "time: 1.0 min a cell" in out


def test_auto_max_needs_a_pilot_and_a_budget(bare_workdir: Path) -> None:
    from ablate.spec.load import SpecError, load_spec

    for seeds, message in [("  seeds: {min: 2, max: auto}", "needs a budget"),
                           ("  seeds: {min: 2, max: auto, budget: {cells: 20}}",
                            "name one as ablation.pilot"),
                           ("  seeds: {min: 2, max: 4, budget: {cells: 20}}", "a budget chooses max when max "
                                                                             "is auto")]:
        path = write(bare_workdir, "auto", seeds=seeds)
        with pytest.raises(SpecError, match=message):
            load_spec(str(path))


def test_the_plan_says_when_a_variant_changes_the_deciding_metrics_scale(
        bare_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(bare_workdir, "scale")
    path.write_text(path.read_text().replace("model.positions: [learned]", "train.label_smoothing: [0.1]")
                    .replace("  metric: val/loss\n", ""))  # auto: exact match on this synthetic task
    assert main_ablate(str(path), dry_run=True) == 0
    out = capsys.readouterr().out
    assert "ablation.metric: auto resolved to val/exact_match" in out
    assert "changes train.label_smoothing" not in out  # exact match has no likelihood scale
    path.write_text(path.read_text().replace("  axes:", "  metric: val/loss\n  axes:"))
    assert main_ablate(str(path), dry_run=True) == 0
    out = capsys.readouterr().out
    assert ("note: train.label_smoothing=0.1 changes train.label_smoothing, which changes val/loss's "
            "own scale" in out)
    assert "auto resolved" not in out


def test_the_plan_names_its_columns_and_sizes_a_comparison_without_a_claim() -> None:
    """Without a pilot the plan printed `norm=rms  -  7.82 sd  -  -` and never said what the sd was; and a
    comparison without a claim showed no seeds needed even with a pilot's noise."""
    design = Design(planned_looks(3, 8), 0.05, 0.5, 1)
    unsized = power_plan(design, "val/bleu", ["norm=rms"], {}, lambda _: None, None, {})
    text = format_power_plan(unsized, 0.5)
    assert ("sd: the spread (standard deviation) of the paired seed differences, variant minus baseline on "
            "the same seed") in text
    assert "(in units of that sd: '2 sd' is twice the spread)" in text
    noise = PairedNoise(0.3, 5, "its own 6 pairs")
    sized = power_plan(design, "val/bleu", ["norm=rms"], {}, lambda _: noise, "pilot p", {})
    (row,) = sized.comparisons
    assert row.question is None and row.needed is not None
    (line,) = [li for li in format_power_plan(sized, 0.5).splitlines() if li.startswith("  norm=rms")]
    assert f"  {row.needed:>5}  norm=rms against the baseline" in line
