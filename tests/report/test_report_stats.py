"""Report statistics, rendering and run bookkeeping, checked against scipy and by hand (no MLflow here)."""

from __future__ import annotations

import itertools
import json
import math
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ablate.report import plots as figs
from ablate.report.compute import statistics as st
from ablate.report.compute.contrasts import cell_means, factorial_axes, factorial_effects
from ablate.report.compute.loaded_study import Study, build_study, detect_quality, padding_text, spec_diff
from ablate.report.render import (
    STAMP_PREFIX,
    Bullets,
    Document,
    Figure,
    Note,
    Para,
    Section,
    Table,
    render_html,
    render_markdown,
)
from ablate.report.sections.environment import hardware_rows
from ablate.report.sections.factorial import section as factorial_section
from ablate.stats import fixed_sample

BASE = {0: 24.1, 1: 25.3, 2: 23.8, 3: 24.9}
POST = {0: 22.7, 1: 24.0, 2: 22.9, 3: 23.5}


# ---------------------------------------------------------------- statistics
def test_mean_ci_is_the_student_t_interval() -> None:
    x = list(BASE.values())
    s = st.mean_ci(x)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert s.n == 4 and s.mean == pytest.approx(np.mean(x), rel=1e-12)
    assert (s.lo, s.hi) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))


def test_mean_ci_of_one_value_has_no_interval_and_ignores_non_finite() -> None:
    s = st.mean_ci([3.0, math.nan, math.inf])
    assert s.n == 1 and s.mean == 3.0 and math.isnan(s.half_width)
    assert st.fmt_summary(s, 2) == "3.00"
    assert st.fmt_summary(st.mean_ci([]), 2) == "—"


def test_same_seeds_give_a_paired_t_test() -> None:
    e = st.compare(BASE, POST)
    ref = stats.ttest_rel(list(POST.values()), list(BASE.values()))
    lo, hi = ref.confidence_interval(0.95)
    assert e.test == "paired t-test" and e.paired and e.interval == "t" and e.p_min == 0.0
    assert e.p == pytest.approx(ref.pvalue, rel=1e-12)
    assert (e.lo, e.hi) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))
    assert e.diff == pytest.approx(np.mean(list(POST.values())) - np.mean(list(BASE.values())))


def test_different_seeds_give_welch() -> None:
    other = {10: 22.7, 11: 24.0, 12: 22.9, 13: 23.6}
    e = st.compare(BASE, other)
    ref = stats.ttest_ind(list(other.values()), list(BASE.values()), equal_var=False)
    lo, hi = ref.confidence_interval(0.95)
    assert e.test == "Welch's t-test" and not e.paired and e.interval == "t"
    assert e.p == pytest.approx(ref.pvalue, rel=1e-12)
    assert (e.lo, e.hi) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))


def test_a_variant_on_a_subset_of_the_baselines_seeds_is_paired_on_the_seeds_both_ran() -> None:
    """An adaptive study runs the baseline on more seeds than a variant that stopped early: the effect is
    the paired one over the shared seeds, not Welch's over all of them."""
    shared = {s: POST[s] for s in sorted(POST)[:4]}
    extra = {**BASE, 97: BASE[min(BASE)] + 5.0, 98: BASE[min(BASE)] - 5.0}
    e = st.compare(extra, shared)
    ref = stats.ttest_rel([shared[s] for s in sorted(shared)], [BASE[s] for s in sorted(shared)])
    assert e.test == "paired t-test" and e.paired and (e.n_base, e.n_variant) == (4, 4)
    assert e.p == pytest.approx(ref.pvalue, rel=1e-12)
    assert e.diff == pytest.approx(np.mean([shared[s] - BASE[s] for s in shared]))


def _sign_flip_p(d: list[float]) -> float:
    """Two-sided exact sign-flip p-value, enumerated by hand (no scipy)."""
    obs = abs(float(np.mean(d)))
    means = [float(np.mean([s * x for s, x in zip(signs, d, strict=True)]))
             for signs in itertools.product((1, -1), repeat=len(d))]
    upper = sum(m >= obs - 1e-12 for m in means) / len(means)
    lower = sum(m <= -obs + 1e-12 for m in means) / len(means)
    return min(1.0, 2 * min(upper, lower))


def test_two_or_three_shared_seeds_get_a_bootstrap_interval_and_an_exact_sign_flip_test() -> None:
    base, var = {0: 1.076, 1: 1.100, 2: 1.090}, {0: 1.050, 1: 1.067, 2: 1.071}
    e = st.compare(base, var)
    d = np.subtract([var[s] for s in range(3)], [base[s] for s in range(3)])
    boot = stats.bootstrap((d,), np.mean, n_resamples=fixed_sample.RESAMPLES, method="percentile",
                           rng=fixed_sample.RESAMPLE_SEED)
    perm = stats.permutation_test((d,), np.mean, permutation_type="samples", rng=fixed_sample.RESAMPLE_SEED)
    assert e.test == "exact permutation (sign flips)" and e.paired and e.interval == "bootstrap"
    assert (e.lo, e.hi) == (pytest.approx(boot.confidence_interval.low, rel=1e-12),
                            pytest.approx(boot.confidence_interval.high, rel=1e-12))
    assert e.lo <= e.diff <= e.hi and e.diff == pytest.approx(float(np.mean(d)))
    # Every difference is negative: the most extreme of 8 sign patterns, p = 2/8, and no smaller p exists.
    assert e.p == pytest.approx(perm.pvalue) == pytest.approx(_sign_flip_p(list(d))) == 0.25
    assert e.p_min == 0.25
    text = st.effect_sentence("x", e, "loss", higher_is_better=False, decimals=3)
    assert "not testable with 3 seeds (bootstrap interval [" in text
    assert "exact permutation (sign flips) p=0.250" in text
    assert "p < 0.05 is out of reach with 3 seeds" in text
    assert "significant" not in text


def test_a_constant_two_seed_difference_is_never_significant() -> None:
    # The audit's case: both seeds moved by exactly -0.030. A t-test has s = 0 (p would read 0).
    e = st.compare({0: 0.600, 1: 0.500}, {0: 0.570, 1: 0.470})
    assert e.p == 0.5 == _sign_flip_p([-0.03, -0.03]) and e.p_min == 0.5
    assert e.lo == pytest.approx(-0.03) and e.hi == pytest.approx(-0.03)
    text = st.effect_sentence("ffn=conv1d", e, "exact match", True, 3)
    assert text.startswith("ffn=conv1d: -0.030 exact match, not testable with 2 seeds (bootstrap "
                           "interval [-0.030, -0.030], exact permutation (sign flips) p=0.500; p < 0.05 is "
                           "out of reach with 2 seeds")
    assert f"use >= {st.TINY + 1} seeds" in text and "significant" not in text


def test_tiny_independent_groups_are_resampled_apart_and_relabelled() -> None:
    base, var = {0: 1.0, 1: 2.0, 2: 3.0}, {5: 2.0, 6: 3.5}
    e = st.compare(base, var)
    xv, xb = np.array([2.0, 3.5]), np.array([1.0, 2.0, 3.0])

    def diff(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(a, axis=axis) - np.mean(b, axis=axis)

    boot = stats.bootstrap((xv, xb), diff, vectorized=True, n_resamples=st.RESAMPLES, method="percentile",
                           rng=fixed_sample.RESAMPLE_SEED)
    assert not e.paired and e.test == "exact permutation (relabelings)" and e.interval == "bootstrap"
    assert (e.lo, e.hi) == (pytest.approx(boot.confidence_interval.low, rel=1e-12),
                            pytest.approx(boot.confidence_interval.high, rel=1e-12))
    # By hand: the 10 ways to pick which 2 of the 5 pooled values are 'variant'.
    pooled = [1.0, 2.0, 3.0, 2.0, 3.5]
    obs = 2.75 - 2.0
    stats_all = [np.mean([pooled[i] for i in pick]) - np.mean([pooled[i] for i in range(5) if i not in pick])
                 for pick in itertools.combinations(range(5), 2)]
    upper = sum(t >= obs - 1e-12 for t in stats_all) / 10
    lower = sum(t <= obs + 1e-12 for t in stats_all) / 10
    assert e.p == pytest.approx(min(1.0, 2 * min(upper, lower))) and e.p_min == pytest.approx(0.2)


def test_one_seed_is_not_tested() -> None:
    e = st.compare({0: 24.0}, {0: 23.0})
    assert e.diff == -1.0 and not e.tested and math.isnan(e.lo)
    text = st.effect_sentence("residual=post_norm", e, "BLEU", True)
    assert text.startswith("residual=post_norm: -1.00 BLEU") and "too few seeds" in text
    assert "p=" not in text


def test_one_seed_shared_with_a_larger_baseline_is_its_own_paired_difference() -> None:
    # The adaptive summary shows a one-seed variant's difference on that seed; the effects table must
    # show the same number, not the variant against the mean of seeds it never ran.
    e = st.compare({0: 30.0, 1: 34.0, 2: 32.0}, {0: 30.5})
    assert e.diff == pytest.approx(0.5) and e.paired and (e.n_base, e.n_variant) == (1, 1)
    assert not e.tested and math.isnan(e.lo)
    apart = st.compare({0: 30.0, 1: 34.0, 2: 32.0}, {5: 30.5})  # no shared seed: the means, unpaired
    assert apart.diff == pytest.approx(-1.5) and not apart.paired


def test_zero_variance_never_gives_p_zero() -> None:
    same = st.compare({0: 0.0, 1: 0.0, 2: 0.0}, {0: 0.0, 1: 0.0, 2: 0.0})
    assert same.p == 1.0 and same.diff == 0.0
    # A constant shift leaves t undefined at any n: the exact sign-flip test takes over (p = 2 / 2**n).
    for n, p in ((3, 0.25), (4, 0.125), (6, 0.03125)):
        shift = st.compare({s: float(s) for s in range(n)}, {s: s + 1.0 for s in range(n)})
        assert shift.p == pytest.approx(p) and shift.p > 0 and shift.lo == shift.hi == pytest.approx(1.0)
    four = st.compare({s: float(s) for s in range(4)}, {s: s + 1.0 for s in range(4)})
    assert "use >= 6 seeds" in st.effect_sentence("v", four, "BLEU", True)
    welch = st.compare({s: 1.0 for s in range(4)}, {s: 2.0 for s in range(10, 14)})
    assert welch.test == "exact permutation (relabelings)" and welch.p == pytest.approx(2 / math.comb(8, 4))


def test_paired_differences_are_tested_like_seeds() -> None:
    d = [0.3, -0.1, 0.4, 0.2, 0.25]
    e = st.compare_differences(d)
    ref = stats.ttest_1samp(d, 0.0)
    assert e.test == "paired t-test" and e.n_min == 5 and e.p == pytest.approx(ref.pvalue, rel=1e-12)
    assert (e.lo, e.hi) == tuple(pytest.approx(x, rel=1e-9) for x in ref.confidence_interval(0.95))
    assert st.compare_differences(d[:3]).test == "exact permutation (sign flips)"
    assert not st.compare_differences(d[:1]).tested and math.isnan(st.compare_differences([]).diff)


def test_verdict_wording() -> None:
    worse = st.Effect(-1.2, -1.9, -0.5, 0.004, "paired t-test", 4, 4, True)
    assert st.effect_sentence("post_norm", worse, "BLEU", True) == (
        "post_norm: -1.20 BLEU [-1.90, -0.50], significant at 5% (paired t-test, p=0.004): worse than the "
        "baseline")
    better_loss = st.Effect(-0.2, -0.3, -0.1, 0.01, "paired t-test", 4, 4, True)
    assert st.effect_sentence("v", better_loss, "loss", False, 3).endswith("better than the baseline")
    none = st.Effect(0.3, -0.4, 1.0, 0.31, "Welch's t-test", 4, 5, False)
    assert "no detectable effect with 4 seeds" in st.effect_sentence("v", none, "BLEU", True)
    pairs = st.Effect(0.3, 0.1, 0.5, 0.01, "paired t-test", 4, 4, True)
    assert st.effect_sentence("a=1 × b=2", pairs, "BLEU", True, noun="pair", reference=None) == (
        "a=1 × b=2: +0.30 BLEU [+0.10, +0.50], significant at 5% (paired t-test, p=0.010)")


def test_holm_adjustment() -> None:
    assert st.holm([0.01, 0.04, math.nan, 0.03]) == pytest.approx([0.03, 0.06, math.nan, 0.06], nan_ok=True)
    assert st.holm([0.5, 0.9]) == [1.0, 1.0]


def test_pareto_front() -> None:
    # (cost, quality): b is dominated by a (cheaper and better); d has no finite cost.
    front = st.pareto_front([1.0, 2.0, 3.0, math.nan], [10.0, 9.0, 12.0, 20.0])
    assert front == [True, False, True, False]
    assert st.pareto_front([1.0, 2.0], [0.5, 0.4], higher_quality_is_better=False) == [True, True]


def test_fixed_formatting() -> None:
    assert st.fmt(-0.0001, 2) == "0.00" and st.fmt(-0.0001, 2, signed=True) == "0.00"
    assert st.fmt(1234.4, 0) == "1,234" and st.fmt(math.nan, 1) == "—"
    assert st.fmt(0.5, 3, signed=True) == "+0.500"
    assert st.fmt_p(0.0004) == "<0.001" and st.fmt_p(0.04567) == "0.046" and st.fmt_p(math.nan) == "—"
    # every report section prints an interval this way: both ends signed, undefined (too few seeds) as a dash
    assert st.fmt_interval(-4.0866, -1.054, 2) == "[-4.09, -1.05]"
    assert st.fmt_interval(-0.26, 4.06, 1) == "[-0.3, +4.1]"
    assert st.fmt_interval(0.001, 2.0, 2) == "[0.00, +2.00]"
    assert st.fmt_interval(math.nan, 1.0, 2) == "—" and st.fmt_interval(0.0, math.nan, 2) == "—"


# ---------------------------------------------------------------- rendering
class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attrs: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs += [(f"{tag}.{k}", v or "") for k, v in attrs]


def _doc(fig: str) -> Document:
    return Document("Report: a|b", f"{STAMP_PREFIX}2000-01-01 00:00:00 UTC", [Para("see `x` and **y**")], [
        Section("S", [Note("careful <script>alert(1)</script>"), Bullets(["one", "two"]),
                      Table(["name", "value"], [["a|b", "1.0"]], caption="cap"),
                      Figure(fig, "a figure")])])


def test_markdown_and_html_render_the_same_blocks(tmp_path: Path) -> None:
    figs.forest_plot([("v", 1.0, 0.5, 1.5)], "Δ", tmp_path / "figures" / "f.png")
    doc = _doc("figures/f.png")
    md = render_markdown(doc)
    assert "| a\\|b | 1.0 |" in md and "> **Warning:** careful" in md and "![a figure](figures/f.png)" in md
    assert sum(line.startswith(STAMP_PREFIX) for line in md.splitlines()) == 1
    page = render_html(doc, tmp_path)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<code>x</code>" in page and "<strong>y</strong>" in page
    assert 'name="viewport"' in page and "overflow-x: auto" in page
    parser = _Tags()
    parser.feed(page)
    srcs = [v for k, v in parser.attrs if k == "img.src"]
    assert len(srcs) == 1 and srcs[0].startswith("data:image/png;base64,")
    links = [v for k, v in parser.attrs if k.endswith((".src", ".href"))]
    assert not any(v.startswith(("http://", "https://")) for v in links)
    assert sum(STAMP_PREFIX in line for line in page.splitlines()) == 1


def test_a_metric_without_history_gets_no_learning_curve_panel(tmp_path: Path) -> None:
    from PIL import Image

    curves = {"baseline": {"train/loss": [[(10, 3.0), (20, 2.0)]], "val/bleu": [[]]}}
    two = Image.open(figs.learning_curves(curves, ["train/loss", "val/bleu"], tmp_path / "a.png"))
    one = Image.open(figs.learning_curves(curves, ["train/loss"], tmp_path / "b.png"))
    assert two.size == one.size  # the BLEU panel (no value logged during training) is left out


def test_figures_are_byte_identical_on_rerun(tmp_path: Path) -> None:
    curves = {"baseline": {"val/loss": [[(10, 2.0), (20, 1.5)], [(10, 2.2), (20, 1.4)]]}}
    a = figs.learning_curves(curves, ["val/loss"], tmp_path / "a.png")
    b = figs.learning_curves(curves, ["val/loss"], tmp_path / "b.png")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and b"matplotlib" not in a.read_bytes()


# ---------------------------------------------------------------- runs -> study
def _frame(rows: list[dict[str, object]]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def _row(run_id: str, variant: str, seed: int, status: str, start: int,
         **metrics: float) -> dict[str, object]:
    residual = "post_norm" if variant != "baseline" else "pre_norm"
    return {"run_id": run_id, "status": "FINISHED", "start_time": pd.Timestamp(start, unit="s", tz="UTC"),
            "tags.ablate.variant": variant, "tags.ablate.seed": str(seed), "tags.ablate.status": status,
            "params.seed": str(seed), "params.model.residual": residual,
            **{f"metrics.{k.replace('_', '/', 1)}": v for k, v in metrics.items()}}


def test_build_study_dedupes_cells_orders_variants_and_picks_the_metric() -> None:
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "tags": {"ablate.study": "s", "ablate.kind": "ablation"}, "params": {}, "metrics": {}}
    frame = _frame([
        _row("r3", "residual=post_norm", 0, "finished", 3, val_exact_match=0.5, test_exact_match=0.4),
        _row("r1", "baseline", 0, "failed", 1),
        _row("r2", "baseline", 0, "finished", 2, val_exact_match=0.6, test_exact_match=0.7),  # the retry
        _row("r4", "baseline", 1, "finished", 4, val_exact_match=0.6, test_exact_match=0.7),
    ])
    study = build_study(parent, frame)
    assert study.variants == ["baseline", "residual=post_norm"] and study.dropped == 1
    assert [(r.run_id, r.seed) for r in study.runs] == [("r2", 0), ("r4", 1), ("r3", 0)]
    assert study.quality == "exact_match" and study.primary == "test/exact_match"
    assert detect_quality(study.runs, "val/bleu") == "bleu"


def test_interrupted_cells_are_left_out_and_named_in_a_note() -> None:
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "tags": {"ablate.study": "s", "ablate.kind": "ablation"}, "params": {}, "metrics": {}}
    frame = _frame([
        _row("r1", "baseline", 0, "finished", 1, val_bleu=30.0),
        _row("r2", "baseline", 1, "killed", 2, val_bleu=12.0),  # SIGTERM mid-training: resumes later
        _row("r3", "residual=post_norm", 0, "running", 3),
        _row("r4", "residual=post_norm", 1, "diverged", 4),  # a result: stays
    ])
    study = build_study(parent, frame)
    assert [(r.run_id, r.status) for r in study.runs] == [("r1", "finished"), ("r4", "diverged")]
    assert study.notes == ["2 cell(s) interrupted or still running are left out (baseline seed 1; "
                           "residual=post_norm seed 0): `ablate study` resumes them from their checkpoints, "
                           "and a report made after that includes them"]


def test_spec_diff_ignores_identity_and_bookkeeping() -> None:
    a = {"name": "x", "seed": "0", "tracking.experiment": "e", "model.residual": "pre_norm",
         "train.out_dir": "a"}
    b = {**a, "name": "y", "seed": "1", "tracking.experiment": "f", "model.residual": "post_norm"}
    assert spec_diff(a, b) == [("model.residual", "pre_norm", "post_norm")]


def test_spec_diff_reads_a_field_one_run_predates_as_its_default() -> None:
    """A baseline run logged before `model.arch` and `data.text` existed differs from a newer variant run
    in the variant's axis only; a field set away from its default still differs, and a component option
    the other side's component has not shows as missing there where it was set away from its default (at
    its default it is the new component's own setting, no change)."""
    old = {"model.residual": "pre_norm", "model.positions": "sinusoidal"}
    new = {"model.residual": "pre_norm", "model.positions": "alibi", "model.arch": "encoder_decoder",
           "data.text": "null", "model.alibi_encoder": "directional"}
    assert spec_diff(old, new) == [("model.positions", "sinusoidal", "alibi")]
    assert spec_diff(old, {**new, "model.alibi_encoder": "symmetric"}) == [
        ("model.alibi_encoder", "—", "symmetric"), ("model.positions", "sinusoidal", "alibi")]
    assert ("model.arch", "encoder_decoder", "decoder_only") in spec_diff(old, {**new,
                                                                             "model.arch": "decoder_only"})


def test_two_objective_search_marks_its_pareto_front(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ablate.report.section_api import Inputs
    from ablate.report.sections import trials as report_search

    monkeypatch.setattr(report_search, "importances", lambda study, metric: ("", []))
    objectives = json.dumps([{"metric": "val/loss", "direction": "minimize"},
                             {"metric": "train/wall_time_s", "direction": "minimize"}])
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "tags": {"ablate.study": "s", "ablate.kind": "search"},
              "params": {"search.objectives": objectives}, "metrics": {}}
    trials = [(0, 1.0, 9.0, "0.01"), (1, 2.0, 1.0, "0.02"), (2, 2.5, 5.0, "0.03"), (3, 0.9, 20.0, "0.04")]
    tags = {"tags.ablate.kind": "trial"}
    frame = _frame([{**_row(f"r{n}", f"trial-{n}", 0, "finished", n, val_loss=loss, train_wall_time_s=cost),
                     **tags, "tags.ablate.trial": str(n), "params.train.optimizer.lr": lr}
                    for n, loss, cost, lr in trials])
    study = build_study(parent, frame)
    assert study.kind == "search"
    made = report_search.part(Inputs(study, tmp_path))
    sections, data = made.sections, made.data
    # Trial 2 is beaten by trial 1 on both objectives; every other trial is best at some trade-off.
    assert data["pareto_trials"] == [0, 1, 3]
    best = next(s for s in sections if s.title == "Best trials").blocks[0]
    assert isinstance(best, Table) and [row[1] for row in best.rows] == ["3", "0", "1", "2"]
    assert {p.name for p in tmp_path.glob("*.png")} == {"optimisation_history.png", "parallel_coords.png"}


# ---------------------------------------------------------------- full factorial, setup rows
# residual x warm-up, 3 seeds; post_norm without warm-up diverges at seed 2 (its matched sets drop out).
CELLS: dict[tuple[str, str], list[float | None]] = {
    ("pre_norm", "400"): [0.60, 0.62, 0.58], ("pre_norm", "0"): [0.59, 0.60, 0.57],
    ("post_norm", "400"): [0.55, 0.58, 0.52], ("post_norm", "0"): [0.30, 0.35, None]}


def _factorial_study(cells: dict[tuple[str, str], list[float | None]] = CELLS, warmups: str = "[400,0]",
                     base: tuple[str, str] = ("pre_norm", "400")) -> Study:
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "f", "status": "FINISHED",
              "tags": {"ablate.study": "f", "ablate.kind": "ablation", "ablate.design": "full_factorial"},
              "params": {"ablation.design": "full_factorial",
                         "ablation.axes.model.residual": '["pre_norm","post_norm"]',
                         "ablation.axes.train.schedule.warmup_steps": warmups}, "metrics": {}}
    rows = []
    for (residual, warmup), values in cells.items():
        changed = ([f"residual={residual}"] if residual != base[0] else []) + \
                  ([f"train.schedule.warmup_steps={warmup}"] if warmup != base[1] else [])
        for seed, value in enumerate(values):
            metrics = {} if value is None else {"metrics.val/exact_match": value,
                                                 "metrics.val/loss": 1 - value}
            rows.append({"run_id": f"{residual}-{warmup}-{seed}", "status": "FINISHED",
                         "start_time": pd.Timestamp(seed, unit="s", tz="UTC"),
                         "tags.ablate.variant": ", ".join(changed) or "baseline",
                         "tags.ablate.seed": str(seed),
                         "tags.ablate.status": "diverged" if value is None else "finished",
                         "params.model.residual": residual, "params.train.schedule.warmup_steps": warmup,
                         "params.seed": str(seed), **metrics})
    return build_study(parent, _frame(rows))


def test_factorial_main_effects_pair_cells_that_differ_in_one_axis() -> None:
    study = _factorial_study()
    assert factorial_axes(study) == {"model.residual": ["pre_norm", "post_norm"],
                                     "train.schedule.warmup_steps": ["400", "0"]}
    rows = {(r.label, r.metric): r for r in factorial_effects(study)}
    y = CELLS
    # residual: post - pre at the same warm-up and seed; post_norm/0 diverged at seed 2, so the warm-up 0
    # stratum has seeds 0-1 and the 400 one seeds 0-2. The main effect weights the two strata equally (the
    # mean of their means), never by the seeds each happened to get, with a Welch t-interval.
    strata = [[y[("post_norm", w)][s] - y[("pre_norm", w)][s] for s in range(3)
               if y[("post_norm", w)][s] is not None] for w in ("400", "0")]
    means = [np.mean(g) for g in strata]
    parts = [np.var(g, ddof=1) / len(g) for g in strata]
    se = np.sqrt(sum(parts)) / 2
    df = sum(parts) ** 2 / sum(v**2 / (len(g) - 1) for v, g in zip(parts, strata, strict=True))
    main = rows[("residual=post_norm vs pre_norm (main effect)", "val/exact_match")]
    assert main.kind == "main" and main.incomplete == 1 and main.effect.n_min == 3
    assert main.effect.diff == pytest.approx(np.mean(means)) != pytest.approx(np.mean(sum(strata, [])))
    assert main.effect.test == "equal-weight t over strata (Welch df)"
    assert main.effect.p == pytest.approx(2 * stats.t.sf(abs(np.mean(means)) / se, df), rel=1e-9)
    half = stats.t.ppf(0.975, df) * se
    assert (main.effect.lo, main.effect.hi) == (pytest.approx(np.mean(means) - half),
                                                pytest.approx(np.mean(means) + half))
    assert main.verdict.endswith("(1 matched pair left out: a cell did not finish)")
    warm = rows[("train.schedule.warmup_steps=0 vs 400 (main effect)", "val/exact_match")]
    d_warm = [[y[(r, "0")][s] - y[(r, "400")][s] for s in range(3) if y[(r, "0")][s] is not None]
              for r in ("pre_norm", "post_norm")]
    assert warm.effect.diff == pytest.approx(np.mean([np.mean(g) for g in d_warm])) and warm.effect.n_min == 3
    # Interaction: (post0 - pre0) - (post400 - pre400) per seed; 2 complete seeds -> exact sign flips.
    inter = rows[("residual=post_norm × train.schedule.warmup_steps=0 (interaction)", "val/exact_match")]
    dd = [(y[("post_norm", "0")][s] - y[("pre_norm", "0")][s])
          - (y[("post_norm", "400")][s] - y[("pre_norm", "400")][s]) for s in (0, 1)]
    assert inter.kind == "interaction" and inter.incomplete == 1
    assert inter.effect.diff == pytest.approx(np.mean(dd)) and inter.effect.p == _sign_flip_p(dd) == 0.5
    assert "not testable with 2 seeds" in inter.verdict and "out of reach" in inter.verdict
    # The same family on val/loss (= 1 - exact match here): every difference flips sign.
    loss = rows[("residual=post_norm vs pre_norm (main effect)", "val/loss")]
    assert loss.effect.diff == pytest.approx(-main.effect.diff)
    grid = cell_means(study, "val/exact_match")
    assert grid is not None and grid.axes == ("residual", "train.schedule.warmup_steps")
    assert grid.means[("post_norm", "0")].mean == pytest.approx(0.325)
    assert grid.unfinished[("post_norm", "0")] == 1 and grid.unfinished[("pre_norm", "400")] == 0


def test_a_not_testable_effect_is_marked_in_the_figures_as_in_the_text(tmp_path: Path) -> None:
    three = st.compare_differences([0.5, 0.6, 0.7])  # an interval clear of 0, from 3 pairs: p >= 0.25
    assert three.lo > 0 and st.untestable_note(three) == "not testable: p ≥ 0.25 with 3 seeds"
    assert st.untestable_note(st.compare_differences([0.5, 0.6, 0.7, 0.55])) is None  # a t-test decides
    study = _factorial_study()
    rows = factorial_effects(study)
    section = factorial_section(study, rows, tmp_path)
    (figure,) = [b for b in section.blocks if isinstance(b, Figure)]
    # the interaction rests on 2 complete seeds: not testable, and the figure's caption says how it is drawn
    assert "grey, hollow and dotted: not testable" in figure.caption
    assert (tmp_path / "factorial.png").is_file()


def test_a_baseline_off_the_grid_is_left_out_of_the_matched_sets() -> None:
    # Base spec warm-up 400, axis values [0, 100]: the grid's own first value is the reference.
    cells: dict[tuple[str, str], list[float | None]] = {
        ("pre_norm", "400"): [0.5, 0.5], ("pre_norm", "0"): [0.6, 0.7], ("pre_norm", "100"): [0.65, 0.71],
        ("post_norm", "0"): [0.4, 0.5], ("post_norm", "100"): [0.6, 0.6]}
    study = _factorial_study(cells, "[0,100]")
    assert factorial_axes(study) == {"model.residual": ["pre_norm", "post_norm"],
                                     "train.schedule.warmup_steps": ["0", "100"]}
    rows = {(r.label, r.metric): r for r in factorial_effects(study)}
    warm = rows[("train.schedule.warmup_steps=100 vs 0 (main effect)", "val/exact_match")]
    # both strata have seeds 0 and 1: the strata are averaged within each seed, a paired t-test over 2 seeds
    assert warm.effect.n_min == 2 and warm.incomplete == 0
    assert warm.effect.diff == pytest.approx(np.mean([0.05, 0.01, 0.2, 0.1]))


def test_an_axis_of_named_levels_gets_main_effects_and_interactions_as_a_field_axis_does() -> None:
    # ffn as named levels (a GELU MLP sets two fields, SwiGLU one) x model.norm as a field's values; 3 seeds
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "f", "status": "FINISHED",
              "tags": {"ablate.study": "f", "ablate.kind": "ablation", "ablate.design": "full_factorial"},
              "params": {"ablation.design": "full_factorial",
                         "ablation.axes.ffn.gelu_mlp.model.ffn": "linear",
                         "ablation.axes.ffn.gelu_mlp.model.activation": "gelu",
                         "ablation.axes.ffn.swiglu.model.ffn": "swiglu",
                         "ablation.axes.model.norm": '["builtin","rms"]'}, "metrics": {}}
    loss = {("linear", "builtin"): [3.0, 3.1, 3.2], ("linear", "rms"): [3.0, 3.2, 3.1],
            ("swiglu", "builtin"): [2.9, 2.95, 3.1], ("swiglu", "rms"): [2.8, 3.0, 3.0]}
    rows = []
    for (ffn, norm), values in loss.items():
        parts = [f"ffn={ffn}"] * (ffn == "swiglu") + [f"norm={norm}"] * (norm == "rms")
        label = ", ".join(parts) or "baseline"
        for seed, value in enumerate(values):
            rows.append({"run_id": f"{ffn}-{norm}-{seed}", "status": "FINISHED",
                         "start_time": pd.Timestamp(seed, unit="s", tz="UTC"), "tags.ablate.variant": label,
                         "tags.ablate.seed": str(seed), "tags.ablate.status": "finished",
                         "params.model.ffn": ffn, "params.model.norm": norm, "params.seed": str(seed),
                         # the activation a gated FFN ignores: its default under SwiGLU, as the study sets it
                         "params.model.activation": "gelu" if ffn == "linear" else "relu",
                         "metrics.val/loss": value})
    study = build_study(parent, _frame(rows))
    assert factorial_axes(study) == {"ffn": ["gelu_mlp", "swiglu"], "model.norm": ["builtin", "rms"]}
    effects = {(r.label, r.metric): r for r in factorial_effects(study)}
    main = effects[("ffn=swiglu vs gelu_mlp (main effect)", "val/loss")].effect
    per_seed = [np.mean([loss[("swiglu", n)][s] - loss[("linear", n)][s] for n in ("builtin", "rms")])
                for s in range(3)]
    assert main.diff == pytest.approx(np.mean(per_seed)) and main.n_min == 3
    inter = effects[("ffn=swiglu × norm=rms (interaction)", "val/loss")].effect
    gap = {n: [loss[("swiglu", n)][s] - loss[("linear", n)][s] for s in range(3)] for n in ("builtin", "rms")}
    assert inter.diff == pytest.approx(np.mean(np.subtract(gap["rms"], gap["builtin"])))
    grid = cell_means(study, "val/loss")
    assert grid is not None
    assert grid.means[("swiglu", "rms")].mean == pytest.approx(np.mean(loss[("swiglu", "rms")]))
    # the activation SwiGLU ignores is no difference between the two: only the FFN changed
    assert [k for k, _, _ in spec_diff(study.of("baseline")[0].params, study.of("ffn=swiglu")[0].params)] == \
        ["model.ffn"]


def test_other_designs_get_no_factorial_effects() -> None:
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "tags": {"ablate.study": "s", "ablate.kind": "ablation"},
              "params": {"ablation.design": "one_at_a_time"}, "metrics": {}}
    study = build_study(parent, _frame([_row("r1", "baseline", 0, "finished", 1, val_loss=1.0),
                                        _row("r2", "residual=post_norm", 0, "finished", 2, val_loss=1.1)]))
    assert factorial_axes(study) is None and factorial_effects(study) == []
    assert cell_means(study, "val/loss") is None


def test_padding_fraction_is_shown_once_or_per_variant() -> None:
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "tags": {"ablate.study": "s"}, "params": {}, "metrics": {}}
    rows = [_row("r1", "baseline", 0, "finished", 1, val_loss=1.0),
            _row("r2", "residual=post_norm", 0, "finished", 2, val_loss=1.1)]
    assert padding_text(build_study(parent, _frame(rows))) is None
    for row in rows:
        row["metrics.data/padding_fraction"] = 0.25
    assert str(padding_text(build_study(parent, _frame(rows)))).startswith("25.0% of the token positions")
    rows[1]["metrics.data/padding_fraction"] = 0.3125
    text = padding_text(build_study(parent, _frame(rows)))
    assert text is not None and text.startswith("25.0–31.2%") and "residual=post_norm: 31.2%" in text


def test_hardware_rows_come_first_and_absent_ones_are_left_out() -> None:
    env = {"torch version": ["2.13.0"], "git commit": ["abc"], "host": ["vm"], "CPU": ["AMD EPYC 9654"],
           "device": ["cpu (x86_64, 2 threads)"], "uncommitted changes": ["false"]}
    assert [r[0] for r in hardware_rows(env)] == ["device", "CPU", "host", "torch version", "git commit",
                                                  "uncommitted changes"]
    assert hardware_rows({}) == [["(none recorded)", "—"]]


def test_equal_values_in_every_seed_read_as_identical_not_as_an_untestable_effect() -> None:
    # mask -inf vs -1e9 without fully masked rows: every seed ends on the same value.
    e = st.compare({0: 0.96, 1: 0.975}, {0: 0.96, 1: 0.975})
    assert e.identical and e.diff == 0.0
    assert st.effect_sentence("mask=-1e9", e, "exact match", True, 3) == (
        "mask=-1e9: identical to the baseline in both seeds: no effect at all on this metric")
    # Same mean but not the same per seed: an effect of 0 that is not identical.
    moved = st.compare({0: 0.96, 1: 0.975}, {0: 0.975, 1: 0.96})
    assert not moved.identical
    assert "not testable with 2 seeds" in st.effect_sentence("v", moved, "EM", True, 3)
    # A matched-pairs interaction that is exactly 0 everywhere.
    inter = st.compare_differences([0.0, 0.0, 0.0, 0.0, 0.0])
    said = st.effect_sentence("a=1 × b=2", inter, "BLEU", True, noun="pair", reference=None)
    assert inter.identical and said == (
        "a=1 × b=2: exactly 0 in all 5 pairs: no effect at all on this metric")


def test_the_axes_table_lists_what_the_study_varies_not_a_variants_options(tmp_path: Path) -> None:
    """A baseline run that predates `model.arch`, a RoPE variant with its own option `rope_base`: the axes
    are the positions only; the variant's option stays in what differs."""
    from ablate.report.compute.loaded_study import Run, Study
    from ablate.report.render import Table
    from ablate.report.section_api import Inputs
    from ablate.report.sections.main_table import axes_part

    def run(variant: str, params: dict[str, str]) -> Run:
        return Run(variant, variant, 0, "finished", "h", 0.0, params, {"model/params": 10.0}, {})

    base = run("baseline", {"model.positions": "sinusoidal"})
    rope = run("positions=rope", {"model.positions": "rope", "model.rope_base": "10000.0",
                                  "model.arch": "encoder_decoder"})
    study = Study("s", "ablation", {"params": {}, "tags": {}}, [base, rope], ["baseline", "positions=rope"],
                  "baseline", "bleu", "val/bleu")
    part = axes_part(Inputs(study, tmp_path))
    assert part is not None
    axes, differs = [b for b in part.sections[0].blocks if isinstance(b, Table)]
    assert axes.rows == [["`model.positions`", "sinusoidal, rope"]]
    # rope's own option at its default is rope's, not a change; the arch a run predates is no change either
    assert differs.rows[0][1] == "`model.positions`: sinusoidal → rope"


def test_costs_compare_variants_over_the_same_seeds_on_one_hardware() -> None:
    from ablate.report.sections.costs import comparable_runs, cost_points

    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "tags": {"ablate.study": "s", "ablate.kind": "ablation"}, "params": {}, "metrics": {}}
    rows = []
    for seed in range(6):  # the baseline ran 6 seeds, the variant 3 (adaptive stopping): seeds 0-2 compare
        base = _row(f"b{seed}", "baseline", seed, "finished", seed, val_exact_match=0.5,
                    train_wall_time_s=10.0 + 10 * seed)
        rows.append(base | {"tags.ablate.cpu": "AMD EPYC (family 23, model 49)"})
        if seed < 3:
            var = _row(f"v{seed}", "residual=post_norm", seed, "finished", seed, val_exact_match=0.6,
                       train_wall_time_s=25.0)
            # seed 2 of the variant ran on a faster machine: its time measures the machine
            other = "AMD EPYC (family 25, model 17, stepping 1; bf16)"
            rows.append(var | {"tags.ablate.cpu": other if seed == 2 else "AMD EPYC (family 23, model 49)"})
    study = build_study(parent, _frame(rows))
    comp = comparable_runs(study)
    assert comp.seeds == [0, 1] and comp.hardware == "AMD EPYC (family 23, model 49)" and comp.left_out == 5
    points = {p.label: p for p in cost_points(study)}
    assert points["baseline"].cost == pytest.approx(15.0)  # seeds 0 and 1, not the mean over 0-5 (35)
    assert points["residual=post_norm"].cost == pytest.approx(25.0)


def test_withdrawn_cells_are_listed_with_their_values_and_reason(tmp_path: Path) -> None:
    from ablate.report.section_api import Inputs
    from ablate.report.sections import withdrawn

    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "tags": {"ablate.study": "s", "ablate.kind": "ablation"}, "params": {}, "metrics": {}}
    rows = [_row(f"b{s}", "baseline", s, "finished", s, val_exact_match=0.5) for s in range(2)]
    rows += [_row(f"v{s}", "residual=post_norm", s, "finished", 10 + s, val_exact_match=0.6)
             for s in range(2)]
    old = _row("old1", "residual=post_norm", 1, "finished", 50, val_exact_match=0.1)
    # an imported run: the import's own id is new each time, the report names the id it was exported with
    rows.append(old | {"tags.ablate.superseded": "ran in bf16, the study's cells in fp32",
                       "tags.ablate.origin_run_id": "exported-old1"})
    study = build_study(parent, _frame(rows))
    assert [r.run_id for r in study.runs if r.variant == "residual=post_norm"] == ["v0", "v1"]  # left out
    found = withdrawn.part(Inputs(study, tmp_path))
    assert found is not None
    [section] = found.sections
    [table] = [b for b in section.blocks if hasattr(b, "header")]
    why = "ran in bf16, the study's cells in fp32"
    assert table.rows == [["residual=post_norm", "1", "finished", "0.100", why]]
    assert found.data["withdrawn"][0]["val/exact_match"] == pytest.approx(0.1)
    assert found.data["withdrawn"][0]["run_id"] == "exported-old1"
    clean = build_study(parent, _frame(rows[:-1]))
    assert withdrawn.part(Inputs(clean, tmp_path)) is None  # nothing withdrawn: no appendix


def test_the_plan_table_puts_what_the_design_could_detect_beside_what_was_found(tmp_path: Path) -> None:
    import json as _json

    from ablate.report.compute.detectable_effects import plans_of
    from ablate.report.section_api import Inputs
    from ablate.report.sections import mde
    from ablate.stats.power import detectable
    from ablate.stats.replication_size import seeds_for
    from ablate.stats.sequential import Design

    plan = {"source": "pilot p", "comparisons": [{"label": "residual=post_norm", "sd": 0.02,
                                                   "sized_sd": 0.027, "detectable": 0.05,
                                                   "in_sd_units": False}]}
    design = {"looks": [2, 3, 4], "alpha": 0.05, "min_effect": None, "family": 1}
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "tags": {"ablate.study": "s", "ablate.kind": "ablation",
                       "ablate.metric": "final/val/exact_match",
                       "ablate.sequential": _json.dumps(design), "ablate.power_plan": _json.dumps(plan),
                       "ablate.preregistered": _json.dumps({"metric": "val/exact_match"}),
                       "ablate.expect": _json.dumps([{"variant": "residual=post_norm", "effect": "none",
                                                      "margin": 0.01, "source": "x"}])},
              "params": {}, "metrics": {}}
    diffs = [0.02, -0.01, 0.03, 0.0]
    rows = [_row(f"b{s}", "baseline", s, "finished", s, val_exact_match=0.5) for s in range(4)]
    rows += [_row(f"v{s}", "residual=post_norm", s, "finished", 10 + s, val_exact_match=0.5 + d)
             for s, d in enumerate(diffs)]
    study = build_study(parent, _frame(rows))
    found = mde.part(Inputs(study, tmp_path))
    assert found is not None
    table = next(b for b in found.intro if hasattr(b, "header"))
    [row] = table.rows
    sd = float(np.std(diffs, ddof=1))
    d = Design((2, 3, 4), 0.05, None, 1)
    # a new study is sized at the effect these seeds found (+0.010, on the margin: none would do), never at
    # an assumed one
    needed = seeds_for(float(np.mean(diffs)), sd, d.level, "within", 0.01, most=100)
    assert row[:6] == ["residual=post_norm", "0.0200 (0.0270)", "0.050", "4", "+0.010", f"{sd:.4f}"]
    assert row[6] == f"{detectable(d, sd, 'none', 0.01):.3f}"
    assert row[7] == (str(needed) if needed else ">100")
    assert found.data["power_plan"]["forecast"] is None  # the plan gave no powers
    text = " ".join(getattr(b, "text", "") for b in found.intro)
    assert "Pre-registered before the first cell" in text and "sized the noise from pilot p" in text
    assert ("Left open by this design: residual=post_norm: no study of up to 100 seeds would settle it, at "
            "the observed effect or at either end of its interval") in text
    assert found.data["power_plan"]["found"][0]["settled"] is False
    # the Setup section gives the same plan in a line: its source, planned and at the seeds' own spread
    plans = plans_of(study)
    assert plans is not None
    line = mde.setup_line(plans)
    assert line.startswith("Power plan, recorded before the first cell from pilot p.")
    assert f"planned: residual=post_norm 0.050; at the spread of the study's own seeds (information only): " \
           f"residual=post_norm {row[6]}." in line
    del parent["tags"]["ablate.power_plan"]
    plans = plans_of(build_study(parent, _frame(rows)))
    assert plans is not None
    line = mde.setup_line(plans)
    assert line.startswith("Power plan: none recorded before the first cell. ") and "planned:" not in line
    del parent["tags"]["ablate.preregistered"]  # a study from before designs were pre-registered
    plans = plans_of(build_study(parent, _frame(rows)))
    assert plans is not None
    assert mde.setup_line(plans).startswith(
        "Power plan: none recorded before the first cell (the study predates pre-registration). ")


def test_the_plan_forecast_counts_settled_comparisons_against_the_plans_powers() -> None:
    from itertools import product

    from ablate.report.compute.detectable_effects import Forecast, Found, settled_forecast
    from ablate.report.sections.mde import forecast_sentence

    powers = {"a": 0.9, "b": 0.6, "c": 0.3}
    forecast = Forecast(powers, settled=1)
    assert forecast.expected == pytest.approx(1.8)
    # the 5% quantile of the Poisson-binomial count, enumerated over every outcome
    dist = [0.0] * 4
    for outcome in product([0, 1], repeat=3):
        prob = 1.0
        for hit, p in zip(outcome, powers.values(), strict=True):
            prob *= p if hit else 1 - p
        dist[sum(outcome)] += prob
    cumulative = np.cumsum(dist)
    assert forecast.fewest == int(np.argmax(cumulative > 0.05))
    assert forecast.most == int(np.argmax(cumulative > 0.95 - 1e-12))
    # the chance of as few (and as many) settled as found, were the plan right: the line can fail
    assert forecast.as_few == pytest.approx(dist[0] + dist[1])
    assert forecast.as_many == pytest.approx(1 - dist[0])
    assert "within what the plan explains" in forecast_sentence(forecast)
    short = Forecast({"a": 0.99, "b": 0.99}, settled=0)
    assert short.as_few == pytest.approx(0.0001)
    assert "fewer than the plan explains" in forecast_sentence(short)
    over = Forecast({"a": 0.1, "b": 0.1, "c": 0.1}, settled=3)
    assert "more than the plan explains" in forecast_sentence(over)
    sized = Forecast({"a": 0.83, "b": 0.99}, settled=2)  # sized-axes: 2 of 2 settled
    assert sized.as_many == pytest.approx(0.83 * 0.99)
    assert "as many with 0.82" in forecast_sentence(sized)

    row = Found("a", "better", None, 5, -0.08, 0.02, 0.03, None, settled=True)
    plan = {"comparisons": [{"label": "a", "power": 0.83}, {"label": "gone", "power": 0.5}]}
    got = settled_forecast(plan, [row])
    assert got is not None and got.powers == {"a": 0.83} and got.settled == 1
    assert settled_forecast(plan | {"informational": True}, [row]) is None  # the study's own seeds
    assert settled_forecast(None, [row]) is None


def test_a_variant_that_changes_the_metrics_own_scale_is_named_in_the_plans_words() -> None:
    from ablate.report.sections.summary import scale_changes
    from ablate.study.sizing import scale_note

    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED",
              "tags": {"ablate.study": "s", "ablate.kind": "ablation"}, "params": {}, "metrics": {}}
    rows = []
    for s in range(2):
        base = _row(f"b{s}", "baseline", s, "finished", s, val_loss=2.0)
        rows.append(base | {"params.model.residual": "x"})
        smooth = _row(f"v{s}", "train.label_smoothing=0.1", s, "finished", 10 + s, val_loss=2.3)
        rows.append(smooth | {"params.model.residual": "x", "params.train.label_smoothing": "0.1"})
        post = _row(f"w{s}", "residual=post_norm", s, "finished", 20 + s, val_loss=2.1)
        rows.append(post)  # a change of architecture keeps the loss's scale
    study = build_study(parent, _frame(rows))
    expected = scale_note("`train.label_smoothing=0.1`", "val/loss", ["train.label_smoothing"])
    assert scale_changes(study, "val/loss") == [expected]
    assert expected is not None and expected.startswith(
        "`train.label_smoothing=0.1` changes train.label_smoothing, which changes val/loss's own scale")
    assert scale_changes(study, "val/bleu") == []  # BLEU reads the translations, not the distribution
