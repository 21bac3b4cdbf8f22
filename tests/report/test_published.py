"""Published results a study checks (``ablation.expect``): the spec's checks, the rules that judge a claim,
and the report's opening lines, on studies built from run records (no training, no MLflow)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from ablate.report.compute.loaded_study import Study, build_study
from ablate.report.render import Bullets, Para
from ablate.report.section_api import Inputs, Part
from ablate.report.sections.mde import new_study_advice
from ablate.report.sections.published import part
from ablate.spec.load import SpecError
from ablate.spec.study_sections import Expectation
from ablate.stats.borderline import leave_one_out
from ablate.stats.claims import CONTRADICTED, OPEN, REPRODUCED, Evidence, judge
from ablate.stats.replication_size import seeds_across
from ablate.study.designs import format_plan, plan_study
from tests.factories import write_tiny_spec

AXES = "ablation:\n  axes: {model.positions: [learned], model.residual: [post_norm]}\n"


def _plan_error(folder: Path, extra: str) -> str:
    with pytest.raises(SpecError) as err:
        plan_study(str(write_tiny_spec(folder, extra=AXES + extra)))
    return str(err.value)


def test_an_expectation_names_a_variant_the_study_runs(tmp_path: Path) -> None:
    entry = "{variant: positions=rope, effect: worse, source: a paper}"
    text = _plan_error(tmp_path, f"  expect:\n    - {entry}\n")
    assert "tiny.yaml:" in text and "ablation.expect.0.variant" in text
    assert "no variant 'positions=rope' in this study; its variants: 'positions=learned', " \
        "'residual=post_norm'" in text
    ok = write_tiny_spec(tmp_path, extra=AXES + "  expect:\n    - {variant: positions=learned, effect: none, "
                         "source: a paper, margin: 0.5}\n", filename="ok.yaml")
    plan = plan_study(str(ok))
    claim = plan.spec.ablation.expect[0]  # type: ignore[union-attr]
    assert (claim.variant, claim.effect, claim.margin) == ("positions=learned", "none", 0.5)
    assert format_plan(plan).endswith("checks 1 published result (the report opens with each):\n"
                                      "  positions=learned: none (a paper)")


@pytest.mark.parametrize(("entry", "message"), [
    ("{variant: positions=learned, effect: none, source: a paper}", "effect: none needs a margin"),
    ("{variant: positions=learned, effect: identical, source: a paper, margin: 1}",
     "an identity check has no margin"),
    ("{variant: positions=learned, effect: slower, source: a paper}", "ablation.expect.0.effect"),
    ("{variant: positions=learned, effect: worse, source: ''}", "ablation.expect.0.source"),
])
def test_an_expectation_is_checked_where_it_is_written(tmp_path: Path, entry: str, message: str) -> None:
    text = _plan_error(tmp_path, f"  expect:\n    - {entry}\n")
    assert message in text and "tiny.yaml:" in text


def _ev(diff: float = math.nan, lo: float = math.nan, hi: float = math.nan, *, significant: bool = False,
        differing: int = 0, identical: bool = False, min_effect: float | None = None, diverged: int = 0,
        runs: int = 4, base_diverged: int = 0, n: int = 4, max_reached: int | None = None) -> Evidence:
    return Evidence("val/bleu", diff, lo, hi, "95% CI", n, significant, differing, identical, min_effect,
                    diverged, runs, base_diverged, max_reached)


def _claim(effect: str, margin: float | None = None) -> Expectation:
    return Expectation(variant="v", effect=effect, source="a paper", margin=margin)  # type: ignore[arg-type]


@pytest.mark.parametrize(("effect", "margin", "evidence", "outcome"), [
    # worse / better: the direction of a significant difference decides, BLEU is higher-is-better
    ("worse", None, _ev(-2.0, -3.0, -1.0, significant=True), REPRODUCED),
    ("better", None, _ev(-2.0, -3.0, -1.0, significant=True), CONTRADICTED),
    ("worse", None, _ev(-0.2, -1.5, 1.1), OPEN),
    # an interval inside +-min_effect: no effect worth knowing, which a claimed effect is not
    ("worse", None, _ev(-0.1, -0.4, 0.3, min_effect=0.5), CONTRADICTED),
    ("worse", None, _ev(0.0, 0.0, 0.0, identical=True), CONTRADICTED),
    # diverged in at least half of its runs, the baseline never: failed to train
    ("worse", None, _ev(diverged=2, runs=4), REPRODUCED),
    ("better", None, _ev(diverged=3, runs=3), CONTRADICTED),
    ("worse", None, _ev(diverged=2, runs=4, base_diverged=1), OPEN),
    # none: equivalence within the margin, not mere non-significance
    ("none", 1.0, _ev(0.1, -0.6, 0.8), REPRODUCED),
    ("none", 0.5, _ev(0.1, -0.6, 0.8), OPEN),
    ("none", 0.5, _ev(1.5, 0.9, 2.1, significant=True), CONTRADICTED),
    ("none", 0.5, _ev(0.7, 0.1, 1.3, significant=True), OPEN),
    ("none", 0.5, _ev(diverged=4), CONTRADICTED),
    # identical: every paired seed exactly equal
    ("identical", None, _ev(0.0, 0.0, 0.0, identical=True), REPRODUCED),
    ("identical", None, _ev(0.01, -0.02, 0.04, differing=1), CONTRADICTED),
    ("identical", None, _ev(n=0), OPEN),
])
def test_claims_are_judged_by_the_documented_rules(effect: str, margin: float | None, evidence: Evidence,
                                                   outcome: str) -> None:
    assert judge(_claim(effect, margin), evidence, higher_is_better=True)[0] == outcome


def test_a_significant_difference_that_reaches_inside_the_margin_says_why_it_stays_open() -> None:
    """A `none` claim's comparison goes on past significance until its interval answers the claim (within
    the margin or wholly beyond it), up to the study's maximum: the line says which."""
    adaptive = judge(_claim("none", 0.5), _ev(-1.48, -2.76, -0.19, significant=True, min_effect=0.5), True)
    assert adaptive == (OPEN, "significantly worse, but the interval still reaches within ±0.5: the study "
                              "adds seeds until it lies within ±0.5 or wholly beyond")
    last = judge(_claim("none", 1.0), _ev(-5.48, -10.48, -0.47, significant=True, min_effect=1.0,
                                          max_reached=6), True)  # warmup=0 at warmup-vs-norm's last look
    assert last == (OPEN, "significantly worse, but the interval still reaches within ±1: the study's "
                          "maximum of 6 seeds is reached (a new study would need more than 100 seeds at "
                          "this spread)")
    fixed = judge(_claim("none", 0.5), _ev(0.7, 0.1, 1.3, significant=True), True)
    assert fixed == (OPEN, "significantly better, but the interval still reaches within ±0.5: more seeds "
                           "would tell")


def test_an_open_claim_at_the_studys_maximum_of_seeds_does_not_promise_more() -> None:
    """Only a new study could settle a claim whose variant ran every seed the study allows: its design never
    moves, and the advice names the seeds.max its power plan needs at the spread these seeds showed."""
    def rms(seeds: int, needed: int | None = None) -> Evidence:  # RMSNorm in the modern study (seeds.max 8)
        final = 8 if seeds == 8 else None
        return replace(_ev(0.25, -0.52, 1.01, min_effect=0.5, runs=seeds, n=seeds, max_reached=final),
                       seeds_needed=needed)

    none = _claim("none", 0.5)
    assert judge(none, rms(6), True) == (OPEN, "the interval reaches beyond ±0.5: more seeds would tell")
    assert judge(none, rms(8, 43), True) == (OPEN, "the interval reaches beyond ±0.5: the study's maximum of "
                                                   "8 seeds is reached (a new study with seeds.max 43 would "
                                                   "tell)")
    worse = judge(_claim("worse"), _ev(-1.1, -3.1, 0.8, min_effect=0.5, runs=8, n=8, max_reached=8), True)
    assert worse == (OPEN, "no significant difference at the study's maximum of 8 seeds (a new study would "
                           "need more than 100 seeds at this spread)")
    assert judge(_claim("worse"), _ev(-1.1, -3.1, 0.8, min_effect=0.5, runs=6, n=6), True) == \
        (OPEN, "no significant difference yet")


def test_none_takes_the_studys_min_effect_when_it_gives_no_margin() -> None:
    assert judge(_claim("none"), _ev(0.1, -0.6, 0.8, min_effect=1.0), True) == \
        (REPRODUCED, "the interval lies within ±1")


BASE = [24.1, 25.3, 23.8, 24.9]
VARIANTS = {"residual=post_norm": [22.7, 24.0, 22.9, 23.5],  # about -1.25, significant
            "positions=learned": [24.2, 25.1, 23.95, 24.85],  # within +-1
            "ffn=conv1d": BASE}  # exactly the same


def _study(claims: list[dict[str, object]], tags: dict[str, str] | None = None,
           diverged: str | None = None) -> Study:
    rows = []
    for variant, values in [("baseline", BASE), *VARIANTS.items()]:
        for seed, value in enumerate(values):
            status = "diverged" if variant == diverged else "finished"
            rows.append({"run_id": f"{variant}-{seed}", "status": "FINISHED",
                         "start_time": pd.Timestamp(seed, unit="s", tz="UTC"), "tags.ablate.variant": variant,
                         "tags.ablate.seed": str(seed), "tags.ablate.status": status,
                         "metrics.val/bleu": math.nan if status == "diverged" else value})
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED", "params": {},
              "metrics": {}, "tags": {"ablate.study": "s", "ablate.kind": "ablation",
                                      "ablate.expect": json.dumps(claims), **(tags or {})}}
    return build_study(parent, pd.DataFrame(rows))


def _part(study: Study) -> Part:
    made = part(Inputs(study, Path("unused")))  # the opening lines draw no figure
    assert made is not None and made.name == "published" and made.sections == []
    return made


def test_the_report_opens_with_each_claim_and_what_the_runs_found() -> None:
    claims = [{"variant": "residual=post_norm", "effect": "worse", "source": "Xiong et al. 2020"},
              {"variant": "residual=post_norm", "effect": "better", "source": "a contrary paper"},
              {"variant": "positions=learned", "effect": "none", "source": "Vaswani et al. 2017",
               "margin": 1.0},
              {"variant": "ffn=conv1d", "effect": "identical", "source": "the same function"},
              {"variant": "norm=rms", "effect": "none", "source": "Zhang & Sennrich 2019", "margin": 0.5}]
    study = _study(claims)
    made = _part(study)
    blocks, data = made.intro, made.data
    assert isinstance(blocks[0], Para)
    assert "(on `val/bleu`, each variant against `baseline`)" in blocks[0].text
    assert isinstance(blocks[1], Bullets)
    lines = blocks[1].items
    diffs = [v - b for v, b in zip(VARIANTS["residual=post_norm"], BASE, strict=True)]
    lo, hi = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.95)
    from ablate.report.compute.loaded_study import effects
    from ablate.report.compute.statistics import fmt_p

    # a fixed seed list's comparisons are one family: significance by the Holm-adjusted p
    row = next(r for r in effects(study) if r.variant == "residual=post_norm" and r.metric == study.primary)
    assert row.effect.p < row.p_holm < 0.05
    assert lines[0] == ("**Reproduced** (Xiong et al. 2020): `residual=post_norm` worse than the baseline. "
                        "This study: significantly worse "
                        f"(Δ -1.25 BLEU [{lo:+.2f}, {hi:+.2f}] (95% CI; Holm-adjusted p "
                        f"{fmt_p(row.p_holm)}), 4 seeds).")
    assert lines[1].startswith("**Contradicted** (a contrary paper): `residual=post_norm` better than the "
                               "baseline. This study: significantly worse")
    assert lines[2].startswith("**Reproduced** (Vaswani et al. 2017): `positions=learned` no effect "
                               "(within ±1). This study: the interval lies within ±1")
    assert lines[3].startswith("**Reproduced** (the same function): `ffn=conv1d` identical to the "
                               "baseline in every seed. This study: the same value in all 4 paired seeds")
    assert lines[4] == ("**Not settled** (Zhang & Sennrich 2019): `norm=rms` no effect (within ±0.5). "
                        "This study: the study has no runs of this variant yet.")
    outcomes = [r["outcome"] for r in data["published"]]
    assert outcomes == [REPRODUCED, CONTRADICTED, REPRODUCED, REPRODUCED, OPEN]
    assert data["published"][0]["lo"] == pytest.approx(lo) and data["published"][0]["hi"] == pytest.approx(hi)


def test_an_adaptive_study_is_judged_on_its_sequential_interval_and_divergence_counts() -> None:
    from ablate.stats.sequential import Design, run_sequence

    sequential = {"ablate.metric": "final/val/bleu",
                  "ablate.sequential": json.dumps({"looks": [3, 4], "alpha": 0.05, "min_effect": 1.0})}
    claims = [{"variant": "positions=learned", "effect": "none", "source": "Vaswani et al. 2017"},
              {"variant": "residual=post_norm", "effect": "worse", "source": "Xiong et al. 2020"}]
    study = _study(claims, sequential, diverged="residual=post_norm")
    made = _part(study)
    lines, data = made.intro[1].items, made.data  # type: ignore[union-attr]
    family = Design((3, 4), 0.05, 1.0, family=len(study.variants) - 1)  # the study's comparisons are one
    look = run_sequence([v - b for v, b in zip(VARIANTS["positions=learned"], BASE, strict=True)], family,
                        "none")
    assert look is not None and -1.0 <= look.lo and look.hi <= 1.0
    got = data["published"][0]
    assert got["outcome"] == REPRODUCED and (got["lo"], got["hi"]) == (look.lo, look.hi)
    assert f"(repeated 95% CI), {look.n} seeds" in lines[0] and "no effect (within ±1)" in lines[0]
    assert lines[1].startswith("**Reproduced** (Xiong et al. 2020): `residual=post_norm` worse than the "
                               "baseline. This study: it failed to train (diverged)")
    assert "4 of 4 runs diverged (the baseline: 0)" in lines[1]


def test_before_the_first_look_the_line_gives_the_mean_so_far_without_an_interval() -> None:
    sequential = {"ablate.metric": "final/val/bleu",
                  "ablate.sequential": json.dumps({"looks": [5, 6], "alpha": 0.05, "min_effect": 1.0})}
    study = _study([{"variant": "residual=post_norm", "effect": "worse", "source": "Xiong et al. 2020"}],
                   sequential)
    made = _part(study)
    (line,), data = made.intro[1].items, made.data  # type: ignore[union-attr]
    mean = sum(v - b for v, b in zip(VARIANTS["residual=post_norm"], BASE, strict=True)) / 4
    assert line.endswith(f"This study: too few paired seeds for an interval yet (Δ {mean:+.2f} BLEU, "
                         "4 seeds).")
    assert data["published"][0]["outcome"] == OPEN


def test_a_study_without_expectations_gets_no_opening_lines() -> None:
    study = _study([])
    assert part(Inputs(study, Path("unused"))) is None


def test_a_reproduced_direction_says_whether_it_clears_the_studys_min_effect() -> None:
    clears = judge(_claim("better"), _ev(1.2, 0.6, 1.8, significant=True, min_effect=0.5), True, "BLEU")
    assert clears == (REPRODUCED, "significantly better, by at least 0.5 BLEU")
    # SwiGLU's old line: significant, but the lower bound is far below the study's own min_effect
    direction = judge(_claim("better"), _ev(0.56, 0.03, 1.08, significant=True, min_effect=0.5), True, "BLEU")
    assert direction == (REPRODUCED, "significantly better in direction only: its interval does not clear "
                                     "the 0.5 BLEU this study cares about")
    assert judge(_claim("worse"), _ev(-2.0, -3.0, -0.7, significant=True, min_effect=0.5), True, "BLEU") == \
        (REPRODUCED, "significantly worse, by at least 0.5 BLEU")


def test_identities_are_implementation_checks_not_published_results() -> None:
    claims = [{"variant": "residual=post_norm", "effect": "worse", "source": "Xiong et al. 2020"},
              {"variant": "ffn=conv1d", "effect": "identical", "source": "the same function",
               "kind": "identity"}]
    made = part(Inputs(_study(claims), Path("unused")))
    assert made is not None
    intro = made.intro[1]
    assert isinstance(intro, Bullets) and len(intro.items) == 1 and "residual=post_norm" in intro.items[0]
    assert [s.title for s in made.sections] == ["Implementation checks"]
    checks = made.sections[0].blocks[1]
    assert isinstance(checks, Bullets) and checks.items[0].startswith("**Reproduced** (the same function): "
                                                                        "`ffn=conv1d` identical")
    assert [r["kind"] for r in made.data["published"]] == ["published", "identity"]


@pytest.mark.parametrize(("at_convergence", "label"), [(True, "**Reproduced, not tested at convergence**"),
                                                       (False, "**Reproduced**")])
def test_a_claim_about_converged_models_on_an_unconverged_study_says_so(at_convergence: bool,
                                                                         label: str) -> None:
    claims = [{"variant": "residual=post_norm", "effect": "worse", "source": "Xiong et al. 2020",
               "at_convergence": at_convergence}]
    study = _study(claims)
    study.parent["params"]["ablation.converged"] = "False"  # the study declares it did not converge
    made = part(Inputs(study, Path("unused")))
    assert made is not None
    line = made.intro[1].items[0]  # type: ignore[attr-defined]
    assert line.startswith(label + " (Xiong et al. 2020)")
    scoped = "not tested at convergence" in made.intro[0].text  # type: ignore[attr-defined]
    assert scoped is at_convergence


def test_a_claim_line_says_how_its_variant_ran_where_the_paper_leaves_a_choice_open() -> None:
    rows = [{"run_id": f"{v}-{seed}", "status": "FINISHED",
             "start_time": pd.Timestamp(seed, unit="s", tz="UTC"),
             "tags.ablate.variant": v, "tags.ablate.seed": str(seed), "tags.ablate.status": "finished",
             "params.model.positions": pos, **extra, "metrics.val/bleu": value + seed}
            for seed in range(3)
            for v, pos, extra, value in [("baseline", "sinusoidal", {}, 30.0), ("positions=alibi", "alibi", {
                "params.model.alibi_encoder": "directional",
                "tags.ablate.component_versions": '{"positions": 2}'}, 29.0)]]  # a version-2 run
    claims = [{"variant": "positions=alibi", "effect": "none", "source": "Press et al. 2022", "margin": 2.0}]
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED", "params": {},
              "metrics": {}, "tags": {"ablate.study": "s", "ablate.kind": "ablation",
                                      "ablate.expect": json.dumps(claims)}}
    made = part(Inputs(build_study(parent, pd.DataFrame(rows)), Path("unused")))
    assert made is not None
    line = made.intro[1].items[0]  # type: ignore[attr-defined]
    assert "This study (alibi_encoder=directional, sources without bos or eos, in an encoder-decoder): " \
        in line
    for markers, said in [({"source_eos": "True"}, "sources ending in eos"),
                          ({"source_bos": "True", "source_eos": "True"}, "sources wrapped in bos and eos")]:
        for seed in range(3):  # the same runs with the source markers the run recorded
            rows[2 * seed + 1].update({f"params.data.{k}": v for k, v in markers.items()})
        made = part(Inputs(build_study(parent, pd.DataFrame(rows)), Path("unused")))
        assert made is not None
        line = made.intro[1].items[0]  # type: ignore[attr-defined]
        assert f"(alibi_encoder=directional, {said}, in an encoder-decoder): " in line


def test_an_encoder_only_option_is_not_shown_for_a_decoder_only_run() -> None:
    from ablate.report.sections.published import as_run

    rows = [{"run_id": f"{v}-{seed}", "status": "FINISHED",
             "start_time": pd.Timestamp(seed, unit="s", tz="UTC"),
             "tags.ablate.variant": v, "tags.ablate.seed": str(seed), "tags.ablate.status": "finished",
             "params.model.arch": "decoder_only", "params.model.positions": pos,
             "params.model.alibi_encoder": "directional",
             "tags.ablate.component_versions": '{"positions": 2}', "metrics.val/ppl": 60.0 + seed}
            for seed in range(2) for v, pos in [("baseline", "sinusoidal"), ("positions=alibi", "alibi")]]
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED", "params": {},
              "metrics": {}, "tags": {"ablate.study": "s", "ablate.kind": "ablation"}}
    assert as_run(build_study(parent, pd.DataFrame(rows)), "positions=alibi") == ""


def test_an_option_at_its_off_value_is_left_out_of_how_a_variant_ran() -> None:
    """QK-norm's ``qk_norm_length`` 0 means 'not used' (g0 comes from ``qk_norm_scale``): not shown then."""
    from ablate.report.sections.published import as_run

    def described(length: str) -> str:
        rows = [{"run_id": f"{v}-{seed}", "status": "FINISHED",
                 "start_time": pd.Timestamp(seed, unit="s", tz="UTC"),
                 "tags.ablate.variant": v, "tags.ablate.seed": str(seed), "tags.ablate.status": "finished",
                 "params.model.attention": att, "params.model.qk_norm_scale": "12.0",
                 "params.model.qk_norm_length": length, "metrics.val/bleu": 30.0 + seed,
                 "tags.ablate.component_versions": versions}
                for seed in range(2)
                for v, att, versions in [("baseline", "sdpa", "{}"),
                                         ("attention=qk_norm", "qk_norm", '{"attention": 2}')]]
        parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED", "params": {},
                  "metrics": {}, "tags": {"ablate.study": "s", "ablate.kind": "ablation"}}
        return as_run(build_study(parent, pd.DataFrame(rows)), "attention=qk_norm")

    assert described("0") == " (qk_norm_scale=12.0, in an encoder-decoder)"
    assert described("64") == " (qk_norm_scale=12.0, qk_norm_length=64, in an encoder-decoder)"


def test_a_claim_on_a_variant_that_changes_several_settings_says_they_are_judged_together() -> None:
    """A preset differs from the baseline in several settings at once: a claim about one of them (post-LN
    for c-lightning-2024) is judged on all of them, and its line lists them; a one-setting variant's line
    does not."""
    m = "params.model."
    base = {f"{m}residual": "pre_norm", f"{m}mask": "-inf", f"{m}norm_eps": "1e-06"}
    preset = {f"{m}residual": "post_norm", f"{m}mask": "-1e9", f"{m}norm_eps": "1e-05"}
    single = {**base, f"{m}residual": "post_norm"}
    rows = [{"run_id": f"{v}-{seed}", "status": "FINISHED",
             "start_time": pd.Timestamp(seed, unit="s", tz="UTC"),
             "tags.ablate.variant": v, "tags.ablate.seed": str(seed), "tags.ablate.status": "finished",
             **params, "metrics.val/bleu": value + seed}
            for seed in range(4)
            for v, params, value in [("baseline", base, 30.0), ("c-preset", preset, 29.9),
                                     ("residual=post_norm", single, 29.8)]]
    claims = [{"variant": v, "effect": "none", "source": "Xiong et al. 2020", "margin": 0.5}
              for v in ("c-preset", "residual=post_norm")]
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED", "params": {},
              "metrics": {}, "tags": {"ablate.study": "s", "ablate.kind": "ablation",
                                      "ablate.expect": json.dumps(claims)}}
    made = part(Inputs(build_study(parent, pd.DataFrame(rows)), Path("unused")))
    assert made is not None
    bundled, alone = made.intro[1].items  # type: ignore[attr-defined]
    assert bundled.startswith("**Reproduced** (Xiong et al. 2020): `c-preset` (3 settings changed at once, "
                              "judged together: `model.mask` -inf → -1e9; `model.norm_eps` 1e-06 → 1e-05; "
                              "`model.residual` pre_norm → post_norm) no effect (within ±0.5).")
    assert alone.startswith("**Reproduced** (Xiong et al. 2020): `residual=post_norm` no effect "
                            "(within ±0.5).")
    records = made.data["published"]
    assert records[0]["changes"] == ["model.mask", "model.norm_eps", "model.residual"]
    assert records[1]["changes"] == []
    # a factorial cell's label names both of its settings: the line does not list them again
    from ablate.report.sections.published import bundled

    cell = {**single, f"{m}mask": "-1e9"}
    frame = pd.DataFrame(rows + [{**rows[0], "run_id": "cell-0", "tags.ablate.variant": "mask=-1e9, "
                                  "residual=post_norm", **cell}])
    study = build_study(parent, frame)
    assert bundled(study, "mask=-1e9, residual=post_norm") == []
    assert [k for k, _, _ in bundled(study, "c-preset")] == ["model.mask", "model.norm_eps", "model.residual"]


def test_a_claim_line_says_when_the_size_changes_with_the_choice_and_when_the_test_split_disagrees() -> None:
    """Tied embeddings change the model's size (-42% on the Multi30k cell): the line says so. QK-norm's
    validation verdict was 'better' while the test split left it open: the line says that too, instead of
    leaving it to a warning further down."""
    from ablate.report.compute.val_and_test import verdicts
    from ablate.stats.sequential import Design, evaluate, run_sequence

    base = [30.0, 31.0, 29.5]
    val = {"embeddings=tied": [27.0, 27.6, 26.3], "attention=qk_norm": [32.0, 33.1, 31.4]}
    test = {"embeddings=tied": [27.1, 27.9, 26.4], "attention=qk_norm": [30.5, 34.5, 28.0]}  # noisy on test
    params = {"baseline": 7_250_800, "embeddings=tied": 4_182_000, "attention=qk_norm": 7_250_816}
    rows = [{"run_id": f"{v}-{seed}", "status": "FINISHED",
             "start_time": pd.Timestamp(seed, unit="s", tz="UTC"),
             "tags.ablate.variant": v, "tags.ablate.seed": str(seed), "tags.ablate.status": "finished",
             "metrics.val/bleu": (base if v == "baseline" else val[v])[seed],
             "metrics.test/bleu": (base if v == "baseline" else test[v])[seed],
             "metrics.model/params": params[v]}
            for v in params for seed in range(3)]
    claims = [{"variant": "embeddings=tied", "effect": "none", "source": "Press & Wolf 2017", "margin": 0.5},
              {"variant": "attention=qk_norm", "effect": "better", "source": "Henry et al. 2020"}]
    tags = {"ablate.study": "s", "ablate.kind": "ablation", "ablate.expect": json.dumps(claims),
            "ablate.sequential": json.dumps({"looks": [3, 4], "alpha": 0.05, "min_effect": 0.5}),
            "ablate.metric": "final/val/bleu"}
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED", "params": {},
              "metrics": {}, "tags": tags}
    study = build_study(parent, pd.DataFrame(rows))
    made = part(Inputs(study, Path("unused")))
    assert made is not None
    tied, qk = made.intro[1].items  # type: ignore[attr-defined]
    assert tied.endswith(" It has 42% fewer parameters than the baseline (4.18 M against 7.25 M): the size "
                         "changes with the choice.")
    assert "fewer parameters" not in qk and "more parameters" not in qk  # 16 more: well within 5%
    # the answers the line reports are the study's own: validation decides, test on the same seeds and look
    design = Design((3, 4), 0.05, 0.5, family=2)
    val_look = run_sequence([v - b for v, b in zip(val["attention=qk_norm"], base, strict=True)], design)
    test_look = evaluate([t - b for t, b in zip(test["attention=qk_norm"], base, strict=True)], design, 1)
    assert val_look is not None and val_look.state == "effect" and test_look.state == "open"
    assert qk.startswith("**Reproduced** (Henry et al. 2020): `attention=qk_norm` better than the baseline.")
    # an open test reading neither confirms nor excludes the validation verdict: worded as open, not flagged
    assert qk.endswith(f" The test split, on the same seeds and look, is open (Δ "
                       f"{test_look.diff:+.2f} BLEU [{test_look.lo:+.2f}, {test_look.hi:+.2f}]).")
    assert "test split" not in tied  # tied: worse on both splits
    assert {v.variant: v.agrees for v in verdicts(study, design)} == {"embeddings=tied": True,
                                                                      "attention=qk_norm": None}
    assert [r["test_answer"] for r in made.data["published"]] == ["worse", "open"]


def test_a_new_studys_seeds_are_sized_at_the_observed_effect_and_across_its_interval() -> None:
    """Never at an assumed effect: rope-margin's "better by more than 0.05" at its observed -0.070
    [-0.099, -0.040] (paired sd 0.038, 15 seeds, the study's maximum) needs far more seeds than the 0.083
    its plan assumed, and none at the interval's end inside the margin."""
    across = seeds_across(-0.070, -0.099, -0.040, 0.038, 15, 0.05, "beyond", 0.05)
    ev = replace(_ev(-0.070, -0.099, -0.040, significant=True, n=15, runs=15, max_reached=15),
                 seeds_across=across)
    outcome, why = judge(_claim("better", 0.05), ev, False)
    assert outcome == OPEN and across.observed is not None and across.at_lo is not None
    assert (f"a new study would need {across.observed} seeds at the observed effect, {across.at_lo} "
            "to more than 10,000 across its interval's ends") in why
    # one phrase where no size settles it at any of the three: the opening table says the same
    nowhere = replace(across, observed=None, at_lo=None, at_hi=None, most=100)
    assert nowhere.words() == ("no study of up to 100 seeds would settle it, at the observed effect or at "
                               "either end of its interval")
    assert new_study_advice(None, across=nowhere).startswith(nowhere.words())
    assert f"these seeds had {across.power_here:.0%} at the observed effect" in why


def test_a_verdict_whose_deciding_bound_sits_on_its_margin_is_marked_borderline() -> None:
    """GQA's "within +-0.03" cleared its margin by 0.0002: the verdict stands, marked borderline, with the
    interval's ends over the seeds left out one at a time."""
    diffs = [0.010, 0.020, 0.015, 0.028, 0.012, 0.018]
    loo = leave_one_out(diffs, 0.95)
    ev = replace(_ev(0.0172, 0.0044, 0.0298, n=6, runs=6), leave_one_out=loo)
    outcome, why = judge(_claim("none", 0.03), ev, False)
    assert outcome == REPRODUCED
    assert why.startswith("the interval lies within ±0.03 (borderline: the deciding bound +0.0298 lies "
                          "within 10% of the ±0.03 margin; with one seed left out its interval's ends range "
                          "over")
    clear = replace(ev, lo=-0.005, hi=0.012)
    assert "borderline" not in judge(_claim("none", 0.03), clear, False)[1]
