"""Adaptive seeds (``ablation.seeds: {min, max}``) and a study's export/import.

The planning tests feed cell records to the planner (no training); the end-to-end test runs a real tiny
synthetic study on a real MLflow sqlite store and Optuna journal, exports it, imports it into fresh stores,
continues it and regenerates its report.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ablate.cli import main as cli_main
from ablate.launch.local_study import main_ablate
from ablate.spec.load import SpecError
from ablate.study.cell_queue import CellRecord
from ablate.study.designs import plan_study
from ablate.study.seed_rounds import comparison_progress, format_progress, needed_keys
from tests.factories import TINY_STUDY_HEAD
from tests.report_studies import EXPORTS
from tests.stores import mlflow_store

SPEC = TINY_STUDY_HEAD + """\
ablation:
  axes: {{model.mask: [-1e9], model.positions: [learned]}}
  metric: val/loss
  expect: [{{variant: mask=-1e9, effect: identical, source: "no row is fully masked"}}]
{seeds}
"""


def write(folder: Path, name: str, seeds: str = "  seeds: {min: 2, max: 3}") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, seeds=seeds))
    return path


@pytest.mark.parametrize(("seeds", "message"), [
    ("  seeds: {min: 4, max: 3}", "max 3 is below min 4"),
    ("  seeds: {min: 1, max: 3}", "ablation.seeds"),
    ("  seeds: [0, 1]\n  min_effect: 0.1", "min_effect decides when to stop adding seeds"),
    ("  seeds: {min: 2, max: 3}\n  repeats: 3", "give seeds or repeats, not both"),
])
def test_seed_range_is_validated(tmp_path: Path, seeds: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        plan_study(str(write(tmp_path, "bad", seeds)))
    assert message in str(err.value)


def test_list_and_repeats_forms_still_give_fixed_seeds(tmp_path: Path) -> None:
    assert plan_study(str(write(tmp_path, "a", "  seeds: [3, 5]"))).seeds == [3, 5]
    fixed = plan_study(str(write(tmp_path, "b", "  repeats: 2")))
    assert fixed.seeds == [0, 1] and fixed.design is None and len(fixed.cells) == 6


def test_more_seeds_go_only_to_open_comparisons(tmp_path: Path) -> None:
    plan = plan_study(str(write(tmp_path, "plan", "  seeds: {min: 3, max: 5}\n  min_effect: 0.05")))
    assert plan.design is not None and plan.design.looks == (3, 4, 5) and plan.seeds == [0, 1, 2, 3, 4]
    key = {(c.label, c.seed): c.key for c in plan.cells}
    first = needed_keys(plan, plan.design, {})
    assert first == [c.key for c in plan.cells if c.seed < 3]  # round one: min seeds of every variant
    base, learned = [2.0, 2.5, 3.0, 2.2, 2.4], [2.4, 2.2, 3.3, 2.0, 2.8]  # learned: spread, sign unclear
    records = {}
    for s in range(3):
        records[key[("baseline", s)]] = CellRecord("finished", base[s])
        records[key[("mask=-1e9", s)]] = CellRecord("finished", base[s])  # identical in every seed
        records[key[("positions=learned", s)]] = CellRecord("finished", learned[s])
    state = comparison_progress(plan, plan.design, records)
    assert state["mask=-1e9"].state == "identical" and state["mask=-1e9"].needed == 3
    assert state["positions=learned"].state == "open" and state["positions=learned"].needed == 4
    second = set(needed_keys(plan, plan.design, records)) - set(records)
    assert second == {key[("baseline", 3)], key[("positions=learned", 3)]}
    # Seed 3 still running: nothing new is asked for, and the comparison stays open.
    records[key[("baseline", 3)]] = CellRecord("running", None)
    assert set(needed_keys(plan, plan.design, records)) - set(records) == {key[("positions=learned", 3)]}
    for s in (3, 4):
        records[key[("baseline", s)]] = CellRecord("finished", base[s])
        records[key[("positions=learned", s)]] = CellRecord("finished", learned[s])
    final = comparison_progress(plan, plan.design, records)["positions=learned"]
    assert final.state == "undecided" and final.look is not None and final.look.n == 5 and final.look.final
    # the progress line says it has its seeds, not that it "needs 5" with 5 in hand; an open one still needs
    lines = format_progress(plan, plan.design, records).splitlines()
    assert "positions=learned  undecided  has its 5 seeds; n=5" in next(x for x in lines if "learned" in x)
    # A variant that diverged in every seed is decided: no pair to test, and no more seeds for it.
    for s in range(3):
        records[key[("positions=learned", s)]] = CellRecord("diverged", None)
    lost = comparison_progress(plan, plan.design, records)["positions=learned"]
    assert lost.state == "no_pairs" and lost.needed == 3
    for s in range(3):  # a baseline that diverged in every seed leaves no comparison anything to test
        records[key[("baseline", s)]] = CellRecord("diverged", None)
    assert {p.state for p in comparison_progress(plan, plan.design, records).values()} == {"no_pairs"}
    assert set(needed_keys(plan, plan.design, records)) <= set(records)  # and asks for no more seeds


def test_dry_run_states_the_adaptive_plan(bare_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workdir = bare_workdir
    path = write(workdir, "dry")
    assert main_ablate(str(path), dry_run=True) == 0
    out = capsys.readouterr().out
    assert "3 variants x 2 to 3 seeds (adaptive) = 6 to 9 cells" in out
    assert "Pocock group-sequential paired t-test: 2 planned looks at n = 2, 3 seeds" in out
    assert "round 1 runs the 6 cells below" in out
    assert sorted(os.listdir(workdir)) == ["dry.yaml"]


def test_import_of_a_folder_that_is_no_export_is_a_one_line_error(
        bare_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workdir = bare_workdir
    (workdir / "notes").mkdir()
    assert cli_main(["import", str(workdir / "notes")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not a study export" in err and len(err.splitlines()) == 1
    assert not (workdir / "mlflow.db").exists() and not (workdir / ".ablate").exists()  # nothing written


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_imported_study_exports_again_byte_for_byte(workdir: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Import, then export: the same files (original run and parent ids, MLflow's user and source tags, the
    list of artifacts the first export left out), so a study moved between stores, continued and exported
    again changes only the files of the cells that changed; and the same once more from a second store."""
    committed = EXPORTS / "rep-abl"  # exported by `ablate export` from the store that trained it
    assert cli_main(["import", str(committed)]) == 0
    assert cli_main(["export", "rep-abl", "--out", str(workdir / "again")]) == 0
    assert _files(workdir / "again") == _files(committed)
    record = json.loads(next((committed / "cells").glob("*/run.json")).read_text())
    assert record["artifacts_left_out"] and {"mlflow.user", "mlflow.source.name"} <= set(record["tags"])

    second = workdir / "second"
    second.mkdir()
    monkeypatch.chdir(second)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(second))
    assert cli_main(["import", str(workdir / "again")]) == 0
    assert cli_main(["export", "rep-abl", "--out", str(second / "twice")]) == 0
    assert _files(second / "twice") == _files(committed)


def test_report_states_the_sequential_verdicts_with_the_studys_code() -> None:
    import pandas as pd

    from ablate.report.compute.loaded_study import build_study
    from ablate.report.render import Table
    from ablate.report.section_api import Inputs
    from ablate.report.sections.seeds import part, sequential_summary
    from ablate.stats.sequential import Design, run_sequence

    base = [30.0, 31.0, 29.5, 30.4, 30.9]
    learned = [30.3, 30.2, 30.6, 29.9, 31.5]  # open: small differences of both signs
    worse = [30.0, 29.1, 30.8]  # decided at the first look: about 30 BLEU worse in all 3 seeds
    rows = []
    for seed, value in enumerate(base):
        rows.append(("baseline", seed, "finished", value))
        rows.append(("positions=learned", seed, "finished", learned[seed]))
        if seed < 3:
            rows.append(("mask=-1e9", seed, "finished", value))
            rows.append(("residual=post_norm", seed, "diverged", float("nan")))
            rows.append(("warmup=0", seed, "finished", value - worse[seed]))
        if seed < 2:  # before the first look
            rows.append(("ffn=conv1d", seed, "finished", value + 0.5 * (seed + 1)))
    frame = pd.DataFrame([{"run_id": f"r{i}", "status": "FINISHED", "start_time": pd.Timestamp(i, unit="s"),
                           "tags.ablate.variant": v, "tags.ablate.seed": str(s), "tags.ablate.status": st,
                           "metrics.val/bleu": x} for i, (v, s, st, x) in enumerate(rows)])
    tags = {"ablate.study": "s", "ablate.kind": "ablation", "ablate.metric": "val/bleu",
            "ablate.sequential": json.dumps({"looks": [3, 4, 5], "alpha": 0.05, "min_effect": 0.5})}
    parent = {"run_id": "p", "experiment_id": "1", "run_name": "s", "status": "FINISHED", "params": {},
              "metrics": {}, "tags": tags}
    made = part(Inputs(build_study(parent, frame), Path("unused")))  # the section draws no figure
    assert made is not None and made.name == "seeds" and len(made.sections) == 1
    section, data = made.sections[0], made.data
    assert "3 planned looks at n = 3, 4, 5 seeds" in section.blocks[0].text
    table = next(b for b in section.blocks if isinstance(b, Table))
    verdicts = {row[0]: row[-1] for row in table.rows}
    assert verdicts["mask=-1e9"] == "identical to the baseline in every seed"
    # diverged in every seed: a result, not a missing pair; BLEU scores a diverged model 0, so each of its
    # pairs counts against it and the comparison says so
    assert verdicts["residual=post_norm"].startswith("effect: worse")
    assert verdicts["residual=post_norm"].endswith("(3 diverged cells counted against its side)")
    post = next(r for r in data["sequential"]["comparisons"] if r["variant"] == "residual=post_norm")
    assert post["diverged_pairs"] == 3 and post["diff"] == pytest.approx(-sum(base[:3]) / 3)
    # a tag without a family (recorded before family-wise correction): the study's 5 comparisons are one
    family = Design((3, 4, 5), 0.05, 0.5, family=5)
    expected = run_sequence([v - b for v, b in zip(learned, base, strict=True)], family)
    assert expected is not None and expected.state == "open" and expected.final
    assert verdicts["positions=learned"] == "undecided at the maximum of 5 seeds"
    # before its first look the table gives the pairs so far and their mean, as the summary does, not 0 / —
    early = next(row for row in table.rows if row[0] == "ffn=conv1d")
    assert early[2:5] == ["2", "+0.75", "—"]
    early_record = next(c for c in data["sequential"]["comparisons"] if c["variant"] == "ffn=conv1d")
    assert early_record["pairs"] == 2 and early_record["diff"] == pytest.approx(0.75)
    got = next(c for c in data["sequential"]["comparisons"] if c["variant"] == "positions=learned")
    assert (got["lo"], got["hi"], got["detectable"]) == (expected.lo, expected.hi, expected.detectable)
    assert data["sequential"]["nominal_level"] == family.nominal < Design((3, 4, 5)).nominal < 0.05
    # The report's summary says the same as the section: by the sequential test, not by the fixed-sample
    # one, which cannot reach p < 0.05 with 3 seeds and would call a 30 BLEU gap untestable.
    summary = {line.split(": ", 1)[0]: line for line in sequential_summary(build_study(parent, frame)) or []}
    decided = run_sequence([-w for w in worse], family)
    assert decided is not None and decided.state == "effect" and decided.look == 1
    ci = f"[{decided.lo:+.2f}, {decided.hi:+.2f}]"
    assert summary["warmup=0"] == (f"warmup=0: {decided.diff:+.2f} BLEU {ci} (repeated 95% CI), effect: "
                                   "worse than the baseline (3 paired seeds, look 1 of 3)")
    assert summary["mask=-1e9"].endswith("identical to the baseline in every seed (3 paired seeds, look 1 "
                                         "of 3)")
    assert summary["positions=learned"].endswith("undecided at the maximum of 5 seeds (5 paired seeds, "
                                                 "look 3 of 3)")
    assert summary["ffn=conv1d"] == ("ffn=conv1d: +0.75 BLEU so far (2 paired seeds), open: fewer than 3 "
                                     "complete seeds so far")
    assert summary["residual=post_norm"].startswith("residual=post_norm: -30.17 BLEU [")
    assert "effect: worse than the baseline (3 paired seeds, look 1 of 3)" in summary["residual=post_norm"]


def _children(name: str) -> list:
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name(name)
    assert exp is not None
    return [r for r in client.search_runs([exp.experiment_id], max_results=1000)
            if "mlflow.parentRunId" in r.data.tags]


def _report(folder: Path) -> dict[str, str]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.suffix in (".md", ".csv", ".json", ".png"):
            text = p.read_bytes().decode("latin-1")
            out[str(p.relative_to(folder))] = "\n".join(
                line for line in text.splitlines() if "Report generated on" not in line)
    return out


@pytest.mark.soak  # in the soak tier: the default suite stays under 10 minutes
def test_adaptive_study_exports_imports_continues_and_reports_the_same(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(workdir, "seq")
    assert main_ablate(str(path)) == 0
    plan = plan_study(str(path))
    assert plan.design is not None
    children = _children(plan.name)
    ran = {r.data.tags["ablate.cell"] for r in children}
    assert len(ran) == len(children)  # each cell once
    mask_cells = {c.key for c in plan.cells if c.label == "mask=-1e9"}
    assert ran & mask_cells == {c.key for c in plan.cells if c.label == "mask=-1e9" and c.seed < 2}
    # mask -1e9 is identical to -inf here (no fully masked row): decided after the first look, 2 seeds
    learned = comparison_progress(plan, plan.design, {r.data.tags["ablate.cell"]: CellRecord(
        r.data.tags["ablate.status"], r.data.metrics.get("val/loss")) for r in children})["positions=learned"]
    assert learned.needed == len([k for k in ran if k in {c.key for c in plan.cells
                                                           if c.label == "positions=learned"}])
    assert cli_main(["report", "seq", "--out", str(workdir / "rep1")]) == 0
    report = (workdir / "rep1" / "report.md").read_text()
    assert "## Adaptive seeds" in report and "identical to the baseline in every seed" in report
    assert "by the group-sequential test this study chose its seeds by" in report
    # the fixed-sample effects table says why it can disagree with the verdicts it sits below
    effects = report[report.index("## Effects"):]
    assert "as fixed-sample tests (see below how they differ from the verdicts at the top)" in effects
    assert "ignore the study's stopping rule: its seeds were added while a comparison was open" in effects
    assert next(line for line in report.splitlines() if line.startswith("- mask=-1e9: ")).endswith(
        "identical to the baseline in every seed (2 paired seeds, look 1 of 2); "
        "test: 0.000 loss [0.000, 0.000]")  # the test split beside it, on the same seeds
    assert report.index("**Published results this study checks** (on `val/loss`") < report.index("## Setup")
    setup = report[report.index("## Setup"):report.index("## Axes")]
    assert ("- Power plan, recorded before the first cell from no pilot (effects in units of the paired sd)."
            " The smallest effect the design detects with 80% power on `val/loss` (loss): planned: ") in setup
    assert "**Reproduced** (no row is fully masked): `mask=-1e9` identical to the baseline in every seed. " \
        "This study: the same value in all 2 paired seeds" in report
    assert cli_main(["export", "seq", "--out", str(workdir / "export")]) == 0
    export = workdir / "export"
    meta = json.loads((export / "study.json").read_text())
    assert sorted(meta["cells"]) == sorted(ran)
    assert not [p for p in export.rglob("*") if p.suffix in (".pt", ".png") or "tokenizer" in p.parts]
    capsys.readouterr()

    fresh = workdir / "fresh"
    fresh.mkdir()
    monkeypatch.chdir(fresh)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(fresh))
    assert cli_main(["import", str(export)]) == 0
    assert cli_main(["import", str(export)]) == 2  # the study is there now: refused, nothing doubled
    assert "already in this MLflow store" in capsys.readouterr().err
    assert main_ablate(str(path)) == 0  # continues: every needed cell is imported, none runs again
    assert "0 cells queued" in capsys.readouterr().out
    assert len(_children(plan.name)) == len(children)
    assert cli_main(["report", "seq", "--out", str(fresh / "rep2")]) == 0
    assert _report(fresh / "rep2") == _report(workdir / "rep1")


def test_a_significant_comparison_whose_none_claim_is_open_says_the_study_goes_on() -> None:
    """presets-multi30k's c-lightning-2024 at 5 seeds: worse [-2.10, -0.12], which neither lies within its
    claim's ±0.5 nor wholly beyond it, so the study adds seeds; the verdict must not read as final."""
    from ablate.report.compute.comparisons import Comparison
    from ablate.report.sections.seeds import _verdict
    from ablate.stats.sequential import Design, run_sequence, walk
    from ablate.stats.verdict import Reading, read

    design = Design((3, 4, 5, 6, 7, 8), 0.05, 0.5, family=5)
    diffs = [-1.5, -0.6, -1.3, -0.9, -1.25]
    claimed = run_sequence(diffs, design, "none", 0.5)
    plain = run_sequence(diffs, design)
    assert claimed is not None and plain is not None
    assert claimed.state == plain.state == "effect" and not claimed.decided and plain.decided
    open_claim = read(walk(diffs, design, "none", 0.5), higher=True)
    assert open_claim.reading == Reading.CLAIM_OPEN and not open_claim.decided
    said = _verdict(Comparison("c", 5, open_claim, tuple(diffs)), design, True, "BLEU", 2)
    assert said == ("effect: worse than the baseline so far; its claim's question is open, so the study "
                    "adds seeds")
    answered = read(walk(diffs, design), higher=True)
    assert answered.reading == Reading.WORSE and answered.decided
    assert _verdict(Comparison("c", 5, answered, tuple(diffs)), design, True, "BLEU", 2) == \
        "effect: worse than the baseline"


def test_an_effect_that_later_seeds_reopen_is_named_beside_the_open_verdict() -> None:
    """presets-multi30k's c-lightning-2024: worse at look 3 (5 seeds), its none claim open, so it got
    seeds; at 7 a seed where the baseline trained badly widened the interval back over 0. The verdict says
    open and names the earlier reading with its interval; a comparison decided at its last look, or one
    never decided, names none."""
    from ablate.report.compute import statistics as st
    from ablate.report.compute.comparisons import Comparison
    from ablate.report.sections.seeds import _verdict, reopened_phrase
    from ablate.stats.sequential import Design, walk
    from ablate.stats.verdict import Reading, read, reopened

    design = Design((3, 4, 5, 6, 7, 8), 0.05, 0.5, family=5)
    diffs = [-1.5, -0.6, -1.3, -0.9, -1.25, -0.7, 2.3]
    looks = walk(diffs, design, "none", 0.5)
    assert [lk.n for lk in looks] == [3, 4, 5, 6, 7]  # no look answered the claim, so every one was taken
    assert looks[-1].state == "open" and looks[2].state == "effect"
    earlier = reopened(looks)
    assert earlier is not None and earlier.state == "effect" and earlier.hi < 0
    assert earlier.look == max(lk.look for lk in looks[:-1] if lk.state == "effect")  # the latest such look
    verdict = read(looks, higher=True)
    assert verdict.reading == Reading.REOPENED and verdict.earlier == earlier and verdict.answer == "open"
    said = _verdict(Comparison("c", 7, verdict, tuple(diffs)), design, True, "BLEU", 2)
    assert said == (f"open: the study has not finished its rounds; at look {earlier.look} "
                    f"({earlier.n} seeds) it read worse ({st.fmt_interval(earlier.lo, earlier.hi, 2)}), "
                    "and the seeds since reopened it")
    assert reopened_phrase(None, design, 2, True, "BLEU") == ""
    # the claim line at the top of the report says it too, as a sentence
    from ablate.report.compute.val_and_test import OnBothSplits
    from ablate.report.sections.published import _reopened
    v = OnBothSplits("c", verdict, None)
    assert _reopened(v, design, 2, True, "BLEU") == (
        f" At look {earlier.look} ({earlier.n} seeds) it read worse "
        f"({st.fmt_interval(earlier.lo, earlier.hi, 2)}), and the seeds since reopened it.")
    assert _reopened(OnBothSplits("c", read(looks[-1:]), None), design, 2, True, "BLEU") == ""
    # decided at its last look, or never read an effect: nothing to name
    assert reopened(walk(diffs[:5], design)) is None
    assert reopened(walk([0.3, -0.2, 0.4, -0.1, 0.2], design, "none", 0.5)) is None
    assert reopened([]) is None


def test_a_range_of_one_look_is_stated_as_one(tmp_path: Path) -> None:
    """seeds {min: 4, max: 4}: one look at 4 seeds, said so, not "4 to 4 seeds ... 12 to 12 cells"."""
    from ablate.study.designs import format_plan

    head = format_plan(plan_study(str(write(tmp_path, "one", "  seeds: {min: 4, max: 4}")))).splitlines()[0]
    assert "3 variants x 4 seeds (one look) = 12 cells" in head
