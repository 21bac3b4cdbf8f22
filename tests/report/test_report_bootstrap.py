"""The report's paired bootstrap over sentences (`ablate.report.sections.sampling`) and the translations
artifact it reads (`ablate.tracking.translations`).

The fast tests check the artifact's codec, that the interval is sacreBLEU's own paired bootstrap (its
p-value, its scores) and the section's rules (pairing by seed, comparisons without translations listed as
such, no section for a study recorded before runs logged them) on runs whose artifacts are stubbed. The
slow test trains a real two-variant, two-seed study on a small text corpus, builds the section from the
MLflow store, and moves the study through `ablate export` / `ablate import`.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sacrebleu
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest, _bootstrap_resample

from ablate.report.compute import sentence_bootstrap
from ablate.report.compute.loaded_study import Run, Study
from ablate.report.section_api import Inputs
from ablate.report.sections import sampling
from ablate.tracking import record, translations
from ablate.tracking.translations import SplitTranslations

SUBJECTS = ["a dog", "two children", "a woman", "the man", "a bird", "the cat", "a child", "an old man"]
VERBS = ["runs", "sleeps", "sings", "reads a book", "plays outside", "eats bread"]
PLACES = ["in the park", "on the street", "at home", "near the river"]


def sentences(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [f"{rnd.choice(SUBJECTS)} {rnd.choice(VERBS)} {rnd.choice(PLACES)}" for _ in range(n)]


def degrade(refs: list[str], drop: float, seed: int) -> list[str]:
    """Hypotheses that lose each word of the reference with probability ``drop``."""
    rnd = random.Random(seed)
    return [" ".join(w for w in r.split() if rnd.random() > drop) for r in refs]


# ---------------------------------------------------------------- the artifact
def test_translations_round_trip_byte_stable_one_line_per_sentence(tmp_path: Path) -> None:
    hyps, refs = ["ein hund läuft", 'er sagt "ja"\tjetzt', ""], ["a dog runs", 'he says "yes" now', "x"]
    data = translations.encode(hyps, refs)
    assert data == translations.encode(hyps, refs)  # no timestamp in the gzip header
    lines = gzip.decompress(data).decode("utf-8").splitlines()
    assert len(lines) == 3 and json.loads(lines[1]) == {"hyp": hyps[1], "ref": refs[1]}
    assert translations.decode(data) == SplitTranslations(hyps, refs)
    path = translations.write(tmp_path, "val", hyps, refs)
    assert path.name == Path(record.translations_artifact("val")).name == "val.jsonl.gz"
    with pytest.raises(ValueError, match="2 hypotheses for 3 references"):
        translations.encode(hyps[:2], refs)


# ---------------------------------------------------------------- sacreBLEU's paired bootstrap
def sacrebleus_paired_bootstrap(baseline: list[str], variant: list[str],
                                references: list[str]) -> tuple[float, float, float, float, float, str]:
    """The section's figures the way sacreBLEU's own code gives them: PairedTest's scores, p and signature,
    and the interval from ``_bootstrap_resample`` (seeded as the paired test is) on each system."""
    metric = BLEU(references=[references])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SACREBLEU_SEED", sentence_bootstrap.SEED)
        systems = [("baseline", baseline), ("variant", variant)]
        signatures, scores = PairedTest(systems, {"BLEU": metric}, None, test_type="bs", n_samples=1000)()
        resampled = [np.array([s.score for s in _bootstrap_resample(
            metric._extract_corpus_statistics(hyps, None), metric, 1000)[1]]) for hyps in (baseline, variant)]
    diffs = np.sort(resampled[1] - resampled[0])
    base, var = scores["BLEU"]
    p = 1.0 if baseline == variant else var.p_value
    return base.score, var.score, float(diffs[25]), float(diffs[974]), p, str(signatures["BLEU"])


@pytest.mark.parametrize("fallback", [False, True])
def test_the_figures_are_sacrebleus_to_the_last_digit(monkeypatch: pytest.MonkeyPatch,
                                                      fallback: bool) -> None:
    """Scores, interval, p and signature equal sacreBLEU's own paired bootstrap exactly (==, not approx), by
    the one-product sums and by sacreBLEU's per-resample float32 sums (what counts too large to be exact
    take), for a clear difference, a small one and two identical systems."""
    if fallback:
        monkeypatch.setattr(sentence_bootstrap, "EXACT_SUMS", 0)
    refs = sentences(300, 11)
    for base, var in ((degrade(refs, 0.3, 12), degrade(refs, 0.15, 13)),
                      (degrade(refs, 0.2, 14), degrade(refs, 0.19, 15)),
                      (degrade(refs, 0.2, 16), degrade(refs, 0.2, 16))):
        ours = sentence_bootstrap.paired_bootstrap(base, var, refs)
        assert ours == sacrebleus_paired_bootstrap(base, var, refs)


def test_the_interval_comes_from_sacrebleus_own_paired_bootstrap() -> None:
    refs = sentences(200, 0)
    base, var = degrade(refs, 0.3, 1), degrade(refs, 0.15, 2)
    b, v, lo, hi, p, signature = sentence_bootstrap.paired_bootstrap(base, var, refs)
    assert b == pytest.approx(sacrebleu.corpus_bleu(base, [refs]).score)
    assert v == pytest.approx(sacrebleu.corpus_bleu(var, [refs]).score)
    assert lo < v - b < hi  # the observed difference lies inside its bootstrap interval
    assert 0 < lo  # the variant drops half as many words: clearly better on 200 sentences
    # p is sacreBLEU's own, from `sacrebleu --paired-bs` run the same way (its default seed, 1,000 resamples)
    _, scores = PairedTest([("b", base), ("v", var)], {"BLEU": BLEU()}, [refs], test_type="bs",
                           n_samples=1000)()
    assert p == scores["BLEU"][1].p_value
    assert "bs:1000" in signature and "seed:12345" in signature and "tok:13a" in signature


def test_identical_systems_differ_by_exactly_zero_at_p_1() -> None:
    """An identity (conv1d = linear) translates alike: sacreBLEU's p counts resampled differences strictly
    above the observed 0, none, and would read 1/1001; the report says p = 1."""
    refs = sentences(50, 3)
    hyps = degrade(refs, 0.2, 4)
    _, _, lo, hi, p, _ = sentence_bootstrap.paired_bootstrap(hyps, list(hyps), refs)
    assert lo == hi == 0.0 and p == 1.0
    _, scores = PairedTest([("b", hyps), ("v", list(hyps))], {"BLEU": BLEU()}, [refs], test_type="bs")()
    assert scores["BLEU"][1].p_value == pytest.approx(1 / 1001)


def test_the_interval_narrows_with_more_sentences() -> None:
    refs = sentences(400, 5)
    base, var = degrade(refs, 0.3, 6), degrade(refs, 0.2, 7)
    _, _, lo_small, hi_small, _, _ = sentence_bootstrap.paired_bootstrap(base[:100], var[:100], refs[:100])
    _, _, lo, hi, _, _ = sentence_bootstrap.paired_bootstrap(base, var, refs)
    assert hi - lo < hi_small - lo_small


# ---------------------------------------------------------------- the section, on stubbed artifacts
def _run(variant: str, seed: int) -> Run:
    return Run(f"{variant}-{seed}", variant, seed, "finished", "h", 0.0, {}, {}, {})


@pytest.fixture
def stored(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[tuple[str, str], SplitTranslations]]:
    """Runs' translations by (run id, split), served where the section reads MLflow."""
    store: dict[tuple[str, str], SplitTranslations] = {}

    def list_artifacts(run_id: str, path: str | None = None) -> list[str]:
        return sorted(record.translations_artifact(s) for r, s in store if r == run_id)

    monkeypatch.setattr(sentence_bootstrap, "list_artifacts", list_artifacts)  # where the reader looks
    monkeypatch.setattr(translations, "read", lambda run_id, split: store.get((run_id, split)))
    yield store


def _study(runs: list[Run], variants: list[str]) -> Study:
    return Study("s", "ablation", {}, runs, variants, variants[0], "bleu", "test/bleu")


def _give(store: dict[tuple[str, str], SplitTranslations], run: Run, refs: dict[str, list[str]],
          drop: float) -> None:
    for split, r in refs.items():
        hyps = degrade(r, drop, run.seed * 10 + len(run.variant))
        store[(run.run_id, split)] = SplitTranslations(hyps, r)
        run.metrics[f"{split}/bleu"] = sacrebleu.corpus_bleu(hyps, [r]).score


def test_pairs_by_seed_and_lists_comparisons_without_translations(
        stored: dict[tuple[str, str], SplitTranslations], tmp_path: Path) -> None:
    refs = {"val": sentences(40, 8), "test": sentences(40, 9)}
    runs = [_run(v, s) for v in ("baseline", "better", "old") for s in (0, 1)] + [_run("better", 2)]
    for run in runs:
        if run.variant != "old":  # 'old' ran before runs logged their translations
            _give(stored, run, refs, 0.3 if run.variant == "baseline" else 0.1)
    p = sampling.part(Inputs(_study(runs, ["baseline", "better", "old"]), tmp_path))
    assert p is not None and not p.failed
    data = p.data["bleu_bootstrap"]
    assert data["not_resampled"] == ["old on val: no hypotheses recorded",
                                     "old on test: no hypotheses recorded"]
    for split in ("val", "test"):
        got = data["comparisons"]["better"][split]
        assert got["seeds"] == [0, 1] and got["sentences"] == 80  # seed 2 has no baseline run to pair with
        base = [h for s in (0, 1) for h in stored[(f"baseline-{s}", split)].hypotheses]
        both = refs[split] * 2
        assert got["baseline"] == pytest.approx(sacrebleu.corpus_bleu(base, [both]).score)
        assert got["lo"] < got["diff"] < got["hi"]
        assert got["seed_diff"] == pytest.approx(
            sum(r.metrics[f"{split}/bleu"] for r in runs if r.variant == "better" and r.seed < 2) / 2
            - sum(r.metrics[f"{split}/bleu"] for r in runs if r.variant == "baseline") / 2)
    (section,) = p.sections
    text = json.dumps([vars(b) for b in section.blocks], ensure_ascii=False)
    assert "test-set sampling" in text.lower() and "seed-to-seed" in text
    assert "no hypotheses recorded" in text
    # The over-seeds interval is named as what it is (one comparison's, fixed-sample; two seeds: resampled)
    # and no uncorrected p-value sits beside the corrected verdicts.
    [table] = [b for b in section.blocks if hasattr(b, "header")]
    assert table.header[-1] == "Δ BLEU [95% over seeds, one test alone]"
    assert not any(h.startswith("p ") for h in table.header)
    assert all(row[-1].endswith("(percentile bootstrap over 2 differences)") for row in table.rows)
    assert "not the verdict's interval" in text and "kind of interval the verdicts use" not in text


def test_no_section_for_a_study_recorded_before_translations(
        stored: dict[tuple[str, str], SplitTranslations], tmp_path: Path) -> None:
    runs = [_run(v, s) for v in ("baseline", "x") for s in (0, 1)]
    assert sampling.part(Inputs(_study(runs, ["baseline", "x"]), tmp_path)) is None
    exact = Study("s", "ablation", {}, runs, ["baseline", "x"], "baseline", "exact_match", "test/exact_match")
    assert sampling.part(Inputs(exact, tmp_path)) is None  # not a BLEU study


def test_a_baseline_recorded_before_translations_is_said_once(
        stored: dict[tuple[str, str], SplitTranslations], tmp_path: Path) -> None:
    """Variants retrained since runs log translations, against a baseline from before: one paragraph says
    why nothing pairs, not a 'no hypotheses' line for every variant and split."""
    refs = {"val": sentences(30, 3), "test": sentences(30, 4)}
    runs = [_run(v, s) for v in ("baseline", "x", "y") for s in (0, 1)]
    for run in runs[2:]:
        _give(stored, run, refs, 0.2)
    p = sampling.part(Inputs(_study(runs, ["baseline", "x", "y"]), tmp_path))
    assert p is not None and p.data["bleu_bootstrap"]["comparisons"] == {}
    assert p.data["bleu_bootstrap"]["not_resampled"] == ["baseline: no hypotheses recorded"]
    (section,) = p.sections
    text = json.dumps([vars(b) for b in section.blocks], ensure_ascii=False)
    assert "the baseline's 2 runs were recorded before runs logged their translations" in text
    assert "(4 of the study's 6 finished runs have them)" in text and "x on val" not in text


def test_different_references_are_not_paired(stored: dict[tuple[str, str], SplitTranslations],
                                             tmp_path: Path) -> None:
    runs = [_run("baseline", 0), _run("x", 0)]
    _give(stored, runs[0], {"val": sentences(20, 1)}, 0.2)
    _give(stored, runs[1], {"val": sentences(20, 2)}, 0.2)  # another val set: nothing to pair
    p = sampling.part(Inputs(_study(runs, ["baseline", "x"]), tmp_path))
    assert p is not None and p.data["bleu_bootstrap"]["comparisons"] == {}
    assert p.data["bleu_bootstrap"]["not_resampled"] == [f"x on val: {sentence_bootstrap.OTHER_SENTENCES}",
                                                         "x on test: no hypotheses recorded"]


# ---------------------------------------------------------------- real runs, from the MLflow store
STUDY = """
name: boot-text
seed: 0
data:
  source: files
  files:
    root: CORPUS
    train: {src: train.src, tgt: train.tgt}
    val: {src: val.src, tgt: val.tgt}
    test: {src: test.src, tgt: test.tgt}
  src_lang: de
  tgt_lang: en
  tokenizer: {kind: wordlevel, vocab_size: 100}
  max_len: 12
  batch_tokens: 256
model: {d_model: 32, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 64, dropout: 0.0}
train:
  max_steps: 24
  eval_every: 12
  checkpoint_every: 12
  schedule: {name: constant, warmup_steps: 0}
  optimizer: {lr: 0.005}
  threads: 1
eval: {samples: 0, decode: {strategy: greedy}}
tracking: {log_checkpoint: false}
ablation:
  axes: {model.residual: [pre_norm, post_norm]}
  seeds: [0, 1]
"""


def text_corpus(root: Path) -> Path:
    """Template sentences; the source side is the target with each word spelled backwards."""
    root.mkdir(parents=True)
    for split, n, seed in (("train", 400, 10), ("val", 30, 11), ("test", 30, 12)):
        tgt = sentences(n, seed)
        (root / f"{split}.tgt").write_text("".join(f"{t}\n" for t in tgt))
        (root / f"{split}.src").write_text("".join(" ".join(w[::-1] for w in t.split()) + "\n" for t in tgt))
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The study trained by `ablate study` (4 runs), exported, and imported into a second store."""
    import torch

    from ablate.launch.local_study import main_ablate
    from ablate.study.export_study import main_export
    from tests.stores import mlflow_store

    root = tmp_path_factory.mktemp("bootstrap")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("MLFLOW_TRACKING_URI", mlflow_store(root))
        (root / "study.yaml").write_text(STUDY.replace("CORPUS", str(text_corpus(root / "corpus"))))
        assert main_ablate("study.yaml") == 0
        assert main_export("boot-text", str(root / "export")) == 0
    torch.set_num_threads(threads)
    yield root


def _part_data(root: Path, store: str) -> dict[str, Any]:
    from ablate.report.compute.loaded_study import load_study

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("MLFLOW_TRACKING_URI", store)
        study = load_study("boot-text")
        assert [len(study.finished(v)) for v in study.variants] == [2, 2]
        p = sampling.part(Inputs(study, root))
        assert p is not None and not p.failed
        data: dict[str, Any] = p.data["bleu_bootstrap"]
        return data


def _hyps(found: SplitTranslations | None) -> list[str]:
    assert found is not None
    return found.hypotheses


@pytest.mark.slow
def test_paired_bootstrap_of_two_real_runs_hypotheses(trained: Path) -> None:
    from mlflow import MlflowClient

    from ablate.report.compute.loaded_study import load_study

    store = f"sqlite:///{trained / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", store)
        study = load_study("boot-text")
        runs = {(r.variant, r.seed): r for r in study.runs}
        read = {(k, split): translations.read(r.run_id, split)
                for k, r in runs.items() for split in ("val", "test")}
    # Each run logged the hypotheses its final BLEU was computed on, one line per sentence in corpus order.
    refs = {split: sentences(30, seed) for split, seed in (("val", 11), ("test", 12))}
    for (key, split), got in read.items():
        assert got is not None and got.references == refs[split]
        assert sacrebleu.corpus_bleu(got.hypotheses, [got.references]).score == pytest.approx(
            runs[key].metrics[f"{split}/bleu"], abs=1e-9)
        names = {f.path for f in MlflowClient(store).list_artifacts(runs[key].run_id,
                                                                    record.TRANSLATIONS_DIR)}
        assert names == {record.translations_artifact("val"), record.translations_artifact("test")}
    variant = study.variants[1]
    data = _part_data(trained, store)
    assert data["not_resampled"] == []
    for split in ("val", "test"):
        got = data["comparisons"][variant][split]
        base = [h for s in (0, 1) for h in _hyps(read[(("baseline", s), split)])]
        var = [h for s in (0, 1) for h in _hyps(read[((variant, s), split)])]
        assert base != var  # the two variants translate differently: a real comparison
        both = refs[split] * 2
        _, scores = PairedTest([("b", base), ("v", var)], {"BLEU": BLEU()}, [both], test_type="bs")()
        assert got["seeds"] == [0, 1] and got["sentences"] == 60
        assert got["baseline"] == pytest.approx(scores["BLEU"][0].score)
        assert got["variant"] == pytest.approx(scores["BLEU"][1].score)
        assert got["p"] == scores["BLEU"][1].p_value
        assert got["lo"] <= got["diff"] <= got["hi"] and got["lo"] < got["hi"]


@pytest.mark.slow
def test_export_and_import_carry_the_translations(trained: Path) -> None:
    from ablate.study.export_study import main_import
    from tests.stores import mlflow_store

    cells = sorted((trained / "export" / "cells").iterdir())
    assert len(cells) == 4
    for cell in cells:
        for split in ("val", "test"):
            path = cell / "artifacts" / record.translations_artifact(split)
            assert len(translations.decode(path.read_bytes()).hypotheses) == 30
            assert path.stat().st_size < 2_000  # 30 short sentences; a Multi30k split is about 25 KB
    before = _part_data(trained, f"sqlite:///{trained / 'mlflow.db'}")
    moved = trained / "moved"
    moved.mkdir()
    store = mlflow_store(moved)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(moved)
        mp.setenv("MLFLOW_TRACKING_URI", store)
        assert main_import(str(trained / "export")) == 0
    assert _part_data(moved, store) == before  # the report from the export alone: the same figures


@pytest.mark.slow
def test_a_committed_export_without_translations_gets_no_section(tmp_path: Path) -> None:
    from ablate.report.compute.loaded_study import load_study
    from ablate.study.export_study import main_import
    from tests.stores import mlflow_store

    # tutorial-axes-multi30k's first 37 cells ran before runs logged their translations; its last 6 (seeds
    # 5-7 of two variants, run since) have them, and its report says once that the baseline has none. Here
    # the export as it was before those: no run with translations at all
    committed = Path(__file__).resolve().parents[2] / "reports" / "tutorial-axes-multi30k" / "export"
    export = tmp_path / "export"
    shutil.copytree(committed, export, ignore=shutil.ignore_patterns("translations"))
    assert list(committed.rglob("*translations*")) and not list(export.rglob("*translations*"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        mp.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
        assert main_import(str(export)) == 0
        study = load_study("tutorial-axes-multi30k")
        assert study.quality == "bleu" and len(study.variants) > 1
        assert sampling.part(Inputs(study, tmp_path)) is None
