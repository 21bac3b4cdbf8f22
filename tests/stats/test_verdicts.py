"""The report's verdicts as a reviewer reads them (ablate/report/sections/forest_plot.py): validation
decides, the test split is shown beside each verdict on the same seeds and look and flagged where it
disagrees, the regime is stated, and the report opens with the forest plot of those intervals. Studies built
from run records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablate.report.compute.comparisons import design_of
from ablate.report.compute.loaded_study import build_study
from ablate.report.compute.val_and_test import verdicts
from ablate.report.render import Figure, Note, Para
from ablate.report.section_api import Inputs
from ablate.report.sections.forest_plot import part
from ablate.report.sections.summary import part as summary_part
from ablate.stats.verdict import HeldOut, Look, Reading, Verdict, agrees, held_out_reading
from ablate.study.recorded_study import TuneRecord

BASE_VAL = [30.0, 31.0, 29.5]
BASE_TEST = [31.0, 30.0, 30.5]
# (val, test) per seed: "swiglu" is better on val and on test; "rope" better on val, worse on test
VARIANTS = {"ffn=swiglu": ([32.0, 33.1, 31.4], [33.0, 32.1, 32.4]),
            "positions=rope": ([32.0, 33.1, 31.4], [29.0, 28.1, 28.4])}


def _study(params: dict[str, str], sequential: bool = True, lm: bool = False):  # type: ignore[no-untyped-def]
    rows = []
    for seed in range(3):
        rows.append(("baseline", seed, BASE_VAL[seed], BASE_TEST[seed]))
        for name, (val, test) in VARIANTS.items():
            rows.append((name, seed, val[seed], test[seed]))
    frame = pd.DataFrame([{"run_id": f"r{i}", "status": "FINISHED", "start_time": pd.Timestamp(i, unit="s"),
                           "tags.ablate.variant": v, "tags.ablate.seed": str(s),
                           "tags.ablate.status": "finished",
                           "params.model.d_model": "256", "params.model.encoder_layers": "2",
                           "params.model.decoder_layers": "2", "params.train.max_steps": "720",
                           "metrics.model/params": 7.25e6, "metrics.val/bleu": val, "metrics.test/bleu": test,
                           **({"params.model.arch": "decoder_only"} if lm else {})}
                          for i, (v, s, val, test) in enumerate(rows)])
    tags = {"ablate.study": "s", "ablate.kind": "ablation", "ablate.metric": "val/bleu"}
    if sequential:
        design = {"looks": [3, 4], "alpha": 0.05, "min_effect": 0.5, "family": 2}
        tags["ablate.sequential"] = json.dumps(design)
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED", "params": params,
              "metrics": {}, "tags": tags}
    return build_study(parent, frame)


def test_the_test_split_is_judged_on_the_same_seeds_and_look_and_a_disagreement_is_flagged(
        tmp_path: Path) -> None:
    study = _study({"ablation.converged": "False", "ablation.tuned_on": "baseline"})
    design = design_of(study)
    assert design is not None and design.family == 2
    rows = {v.variant: v for v in verdicts(study, design)}
    swiglu, rope = rows["ffn=swiglu"], rows["positions=rope"]
    assert swiglu.val is not None and swiglu.val.look == 1 and swiglu.val_answer == "better"
    assert swiglu.test is not None and swiglu.test.n == 3 and swiglu.test_answer == "better" and swiglu.agrees
    assert rope.val_answer == "better" and rope.test_answer == "worse" and rope.agrees is False

    made = summary_part(Inputs(study, tmp_path))
    lines = made.intro[1].items  # type: ignore[attr-defined]
    rope_line = next(line for line in lines if line.startswith("positions=rope"))
    assert "; test: -2.00 BLEU [-2.48, -1.52]" in rope_line
    assert rope_line.endswith("**the test set disagrees (worse on test, better on validation)**")
    assert "disagrees" not in next(line for line in lines if line.startswith("ffn=swiglu"))
    flags = [b for b in made.intro if isinstance(b, Note)]
    assert len(flags) == 1 and "`positions=rope`" in flags[0].text and "`ffn=swiglu`" not in flags[0].text


def test_the_report_opens_with_the_forest_plot_of_its_verdicts_and_states_the_regime(tmp_path: Path) -> None:
    made = part(Inputs(_study({"ablation.converged": "False", "ablation.tuned_on": "baseline"}), tmp_path))
    assert made is not None and made.name == "verdicts"
    figure, regime = made.intro
    assert isinstance(figure, Figure) and figure.path == "figures/verdicts.png"
    assert (tmp_path / "verdicts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "±0.5 BLEU" in figure.caption and "2 comparisons, each at level 0.025" in figure.caption
    assert isinstance(regime, Para)
    # The spec's default once logged ablation.tuned_on 'baseline' for every study: never read as a statement
    assert regime.text == ("**Regime** these verdicts hold for: 2+2 layers, d_model 256 (7.25 M "
                           "parameters, baseline), 720 steps, the spec's hyperparameters (who tuned them is "
                           "not recorded), not converged (declared).")
    assert made.data["verdicts"][1]["agrees"] is False
    assert made.data["regime"]["converged"] is False and made.data["regime"]["tuned_on"] is None
    stated = _study({"ablation.converged": "False"})
    stated.record = stated.record.model_copy(update={"tuned_on": "baseline"})  # the author set tuned_on
    again = part(Inputs(stated, tmp_path))
    assert again is not None and "hyperparameters tuned on `baseline` (as the study states)" in \
        again.intro[1].text  # type: ignore[attr-defined]


def test_a_fixed_seed_study_states_its_regime_too(tmp_path: Path) -> None:
    """No sequential design, so no forest plot, but the regime the published-result lines point to; a
    decoder-only model is one stack."""
    made = part(Inputs(_study({"ablation.converged": "False"}, sequential=False, lm=True), tmp_path))
    assert made is not None and made.data["verdicts"] == []
    (regime,) = made.intro
    assert isinstance(regime, Para) and regime.text.startswith(
        "**Regime** these results hold for: 2 decoder-only layers, d_model 256 (7.25 M parameters, baseline)")
    assert not (tmp_path / "verdicts.png").exists()


def test_the_regime_names_the_own_best_arm_only_once_it_has_runs(tmp_path: Path) -> None:
    """A study that declares tune: but whose searches have not finished has no own-best section yet: its
    regime line does not point to one."""
    study = _study({"ablation.converged": "False"})
    tune = TuneRecord(space={}, baseline={}, trials=8, sampler="tpe", pruner="median")
    study.record = study.record.model_copy(update={"tune": tune})
    made = part(Inputs(study, tmp_path))
    assert made is not None and "own best" not in made.data["regime"]["text"]


def _said(answer: str, diff: float, lo: float, hi: float, final: bool = True) -> Verdict:
    state = "effect" if lo > 0 or hi < 0 else "open"
    look = Look(8, 6, diff, lo, hi, 1.0, 2.0, state, final, decided=answer != "open")  # type: ignore[arg-type]
    reading = {"better": Reading.BETTER, "worse": Reading.WORSE, "no effect": Reading.NO_EFFECT,
               "open": Reading.OPEN_AT_MAX}[answer]
    return Verdict(reading, look, None if answer in ("open", "no effect") else answer == "better")


@pytest.mark.parametrize(("val", "test", "margin", "says"), [
    # validation open, the test interval away from 0 (RoPE in modern-axes: test [+0.07, +2.16]): flagged
    (("open", 1.21, -0.34, 2.77), ("better", 1.12, 0.07, 2.16), None, HeldOut.UNSETTLED_EFFECT),
    (("open", 1.21, -0.34, 2.77), ("open", 0.5, -0.2, 1.2), None, None),
    # an effect on validation: a test interval over 0 is open, one wholly on the other side disagrees
    (("better", 1.58, 0.2, 3.0), ("open", 1.0, -0.5, 2.5), None, HeldOut.OPEN),
    (("better", 1.58, 0.2, 3.0), ("worse", -2.0, -2.5, -1.5), None, HeldOut.DISAGREES),
    (("better", 1.58, 0.2, 3.0), ("better", 1.4, 0.1, 2.7), None, HeldOut.AGREES),
    # no effect within ±0.5 on validation: the test interval disagrees only when wholly beyond the margin
    (("no effect", 0.1, -0.3, 0.4), ("worse", -0.4, -0.7, -0.1), 0.5, HeldOut.OPEN),
    (("no effect", 0.1, -0.3, 0.4), ("worse", -1.0, -1.4, -0.6), 0.5, HeldOut.DISAGREES),
])
def test_the_test_flag_in_both_directions(val: tuple[str, float, float, float],
                                          test: tuple[str, float, float, float], margin: float | None,
                                          says: HeldOut | None) -> None:
    assert held_out_reading(_said(*val), _said(*test), margin) == says
    flag = {HeldOut.AGREES: True, HeldOut.DISAGREES: False, HeldOut.UNSETTLED_EFFECT: False}
    assert agrees(_said(*val), _said(*test), margin) is (flag.get(says) if says is not None else None)


def test_a_diverged_cell_stays_in_its_pair_against_its_own_side() -> None:
    from ablate.stats.pairing import paired_differences

    pairs = [(("finished", 30.0), ("finished", 31.0)), (("finished", 29.0), ("finished", 28.0)),
             (("finished", 30.0), ("diverged", None)), (("diverged", float("nan")), ("finished", 33.0)),
             (("finished", 30.0), ("failed", None)), (("diverged", None), ("diverged", None))]
    # BLEU defines a diverged model's score, 0: the variant's diverged seed scores 0 - 30, the baseline's
    # diverged seed 33 - 0; a failed cell (an error) and two diverged cells stay out
    assert paired_differences(pairs, "val/bleu", True) == ([1.0, -1.0, -30.0, 33.0, None, None], 2)
    # a loss has no such score: the least favourable difference the finished pairs show, for the side that
    # diverged (lower is better: the variant's diverged pair takes the largest, the baseline's the smallest)
    loss = [((s, None if v is None else 3.0 - v / 10), (t, None if w is None else 3.0 - w / 10))
            for (s, v), (t, w) in pairs]
    diffs, counted = paired_differences(loss, "val/loss", False)
    assert diffs[:4] == [pytest.approx(-0.1), pytest.approx(0.1), pytest.approx(0.1), pytest.approx(-0.1)]
    assert diffs[4:] == [None, None] and counted == 2
    # before any pair finished there is nothing to take the least favourable of
    assert paired_differences(loss[2:3], "val/loss", False) == ([None], 0)


def _family_wise_error(family: int, studies: int = 2000, seed: int = 11) -> float:
    """Simulated null studies of 3 comparisons with a tuned arm: 2 own-best comparisons read new cells (their
    searches moved the settings), 1 reads the very cells of its baseline's-settings comparison. The share of
    studies with any false effect among the verdicts both arms state, each walked at alpha / ``family``."""
    from ablate.stats.sequential import Design, planned_looks, walk

    design = Design(planned_looks(3, 8), 0.05, None, family)
    rng = np.random.default_rng(seed)
    errors = 0
    for _ in range(studies):
        base = rng.standard_normal((3, 8))  # no true effect anywhere
        own = np.vstack([rng.standard_normal((2, 8)), base[2:3]])  # the third is the same cells
        verdicts = [walk(list(d), design)[-1] for arm in (base, own) for d in arm]
        errors += any(v.state == "effect" for v in verdicts)
    return errors / studies


def test_one_family_over_both_arms_keeps_the_family_wise_error_at_alpha() -> None:
    from ablate.stats.verdict import one_family

    family = one_family(3, 2)  # the shared comparison counts once: 5 distinct tests
    assert family == 5
    joint = _family_wise_error(family)
    assert joint <= 0.05 + 2 * (0.05 * 0.95 / 2000) ** 0.5
    # judging each arm as its own family of 3 spends alpha / 3 on 5 distinct tests: above alpha
    assert _family_wise_error(3) > joint


def test_a_pair_whose_cells_ran_on_different_hardware_is_flagged_in_its_row(tmp_path: Path) -> None:
    from ablate.report.sections import seeds

    study = _study({"ablation.converged": "False"})
    for r in study.runs:  # rope's seed 1 ran on another machine than its baseline; swiglu's all on one
        r.tags["ablate.cpu"] = "Intel Xeon" if (r.variant, r.seed) == ("positions=rope", 1) else "AMD EPYC"
    made = seeds.part(Inputs(study, tmp_path))
    assert made is not None
    rows = {r["variant"]: r for r in made.data["sequential"]["comparisons"]}
    assert rows["positions=rope"]["cross_hardware_pairs"] == 1
    assert rows["ffn=swiglu"]["cross_hardware_pairs"] == 0
    assert "**1 pair on different hardware**" in rows["positions=rope"]["verdict"]
    assert "different hardware" not in rows["ffn=swiglu"]["verdict"]


def test_a_diverged_cell_with_no_finished_pair_to_compare_stays_out() -> None:
    from ablate.stats.pairing import paired_differences

    # higher is better and no score for nothing usable: nothing finished to take the least favourable of
    assert paired_differences([(("finished", 1.0), ("diverged", None))], "val/acc", True) == ([None], 0)
    assert paired_differences([(("diverged", None), ("finished", 1.0))], "val/acc", True) == ([None], 0)
