"""The numbers of the report's "Test-set sampling": each variant against the baseline by sacreBLEU's own
paired bootstrap over sentences, on val and on test.

The seed intervals elsewhere in the report measure how much a result moves when the model is trained
again (seed to seed). This section measures the other source of uncertainty: which sentences happen to be
in the evaluation set. The runs of a variant and of the baseline are paired by seed; the paired seeds'
(baseline hypothesis, variant hypothesis, reference) triples are put into one corpus, so that a resampling
unit is one sentence of one seed; sacreBLEU's paired bootstrap (``sacrebleu --paired-bs``: the Koehn 2004
test, as Moses' ``bootstrap-hypothesis-difference-significance.pl``) resamples it 1,000 times, here
replicated to the last digit from sacreBLEU's own sentence statistics, seed and score function (see
`paired_bootstrap`). The BLEU difference's interval is taken from the same resamples, so the baseline's
and the variant's scores come from the same resampled sentences.

The hypotheses and references come from each run's ``translations/`` artifact
(`ablate.tracking.translations`), so a report made from an export alone gives the same figures. Runs
recorded before that artifact existed have none: their comparisons are listed as such, never estimated.
A study none of whose runs has translations gets no section.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sacrebleu.metrics import BLEU

from ablate.report.compute import statistics as st
from ablate.report.compute.loaded_study import Run, Study
from ablate.tracking import record, translations
from ablate.tracking.read import list_artifacts
from ablate.tracking.translations import SplitTranslations

SPLITS = ("val", "test")
RESAMPLES = 1000  # sacreBLEU's default for --paired-bs
SEED = "12345"  # sacreBLEU's default SACREBLEU_SEED, pinned: the same runs give the same intervals
EXACT_SUMS = 2 ** 24  # float32 holds every integer below it: sums of counts below it are exact in any order


@dataclass(frozen=True)
class Paired:
    """variant - baseline in corpus BLEU over the paired seeds' concatenated sentences."""

    seeds: list[int]
    sentences: int  # resampling units: sentences x seeds
    baseline: float  # corpus BLEU of the baseline's hypotheses (all paired seeds together)
    variant: float
    diff: float  # variant - baseline
    lo: float  # 95% interval of the difference over sacreBLEU's paired resamples
    hi: float
    p: float  # sacreBLEU's paired bootstrap p-value (two-sided, H0: no difference); 1 for identical output
    signature: str


def _resample_indices(sentences: int, resamples: int) -> np.ndarray:
    """The (resamples, sentences) indices sacreBLEU's paired test and its ``_bootstrap_resample`` both draw:
    ``np.random.default_rng(SACREBLEU_SEED).choice(sentences, size=(resamples, sentences))``."""
    return np.random.default_rng(int(SEED)).choice(sentences, size=(resamples, sentences), replace=True)


def _resampled_scores(metric: BLEU, stats: np.ndarray, idxs: np.ndarray) -> np.ndarray:
    """Each resample's corpus BLEU, as sacreBLEU computes it: its float32 sums of the resampled sentences'
    statistics, passed to ``_compute_score_from_stats``. The statistics are n-gram and length counts, so
    where no resample's sum can reach 2^24 the float32 sums are exact integers whatever the order of
    summation, and one product gives them (how often each resample draws each sentence, times the
    sentences' statistics); past that, sacreBLEU's own per-resample float32 sums."""
    resamples, sentences = idxs.shape
    if sentences * float(stats.max(initial=0.0)) < EXACT_SUMS:
        rows = (idxs + sentences * np.arange(resamples)[:, None]).ravel()
        draws = np.bincount(rows, minlength=resamples * sentences).reshape(resamples, sentences)
        sums = (draws.astype(np.float64) @ stats).astype(np.float32)
    else:
        single = stats.astype(np.float32)
        sums = np.stack([single[row].sum(0) for row in idxs])
    return np.array([metric._compute_score_from_stats(row).score for row in sums])


@functools.lru_cache(maxsize=8)
def _metric(references: tuple[str, ...]) -> BLEU:
    """sacreBLEU's BLEU, these references tokenised once (a study's comparisons share their references)."""
    return BLEU(references=[list(references)])


@functools.lru_cache(maxsize=64)
def _statistics(hypotheses: tuple[str, ...], references: tuple[str, ...]) -> list[list[int]]:
    """Each sentence's BLEU statistics (sacreBLEU's own extraction), once per system: every comparison with
    the baseline on the same seeds reads the baseline's."""
    return _metric(references)._extract_corpus_statistics(list(hypotheses), None)


def paired_bootstrap(baseline: Sequence[str], variant: Sequence[str], references: Sequence[str],
                     resamples: int = RESAMPLES) -> tuple[float, float, float, float, float, str]:
    """sacreBLEU's paired bootstrap of ``variant`` against ``baseline`` (one corpus, one reference each):
    (baseline BLEU, variant BLEU, interval low, interval high, p, signature). The interval is the 2.5th
    and 97.5th percentile of the variant - baseline differences over the test's own resamples (the bounds
    sacreBLEU's ``estimate_ci`` takes).

    The figures are `sacrebleu --paired-bs`'s to the last digit (``sacrebleu.significance._paired_bs_test``:
    the same indices, the same float32 sums, its p-value ``(#{|d*| - mean|d*| > |d|} + 1) / (resamples +
    1)``; tests/report/test_report_bootstrap.py holds them to its PairedTest), computed without its
    per-resample copies of the corpus: a report on a translation study's 5,000-sentence corpora took a minute
    in sacreBLEU's loops."""
    refs = tuple(references)
    metric = _metric(refs)
    extracted = [_statistics(tuple(hyps), refs) for hyps in (baseline, variant)]
    stats = [np.array(e, dtype=np.float64) for e in extracted]
    base_score, var_score = (metric._aggregate_and_compute(e).score for e in extracted)
    idxs = _resample_indices(len(refs), resamples)
    scores_base, scores_var = (_resampled_scores(metric, s, idxs) for s in stats)
    sample_diffs = np.abs(scores_var - scores_base)
    above = int(np.sum(sample_diffs - sample_diffs.mean() > abs(base_score - var_score)))
    p = (above + 1) / (resamples + 1)
    if list(baseline) == list(variant):
        # Every resampled difference is 0, and sacreBLEU counts only those strictly above the observed
        # one: it would say p = 1/(resamples + 1) for two identical systems. Nothing differs: p = 1.
        p = 1.0
    diffs = np.sort(scores_var - scores_base)
    k = len(diffs) // 40
    lo, hi = float(diffs[k]), float(diffs[len(diffs) - k - 1])
    signature = metric.get_signature()
    signature.update("seed", SEED)
    signature.update("bs", resamples)
    return float(base_score), float(var_score), lo, hi, p, str(signature)


class TranslationReader:
    """Each run's translations, read from MLflow once."""

    def __init__(self) -> None:
        self._have: dict[str, set[str]] = {}
        self._read: dict[tuple[str, str], SplitTranslations | None] = {}

    def has(self, run: Run) -> set[str]:
        if run.run_id not in self._have:
            names = set(list_artifacts(run.run_id, record.TRANSLATIONS_DIR))
            self._have[run.run_id] = {s for s in SPLITS if record.translations_artifact(s) in names}
        return self._have[run.run_id]

    def get(self, run: Run, split: str) -> SplitTranslations | None:
        key = (run.run_id, split)
        if key not in self._read:
            self._read[key] = translations.read(run.run_id, split) if split in self.has(run) else None
        return self._read[key]


NO_HYPOTHESES = "no hypotheses recorded"
OTHER_SENTENCES = "the baseline's and the variant's references differ"


def compare(reader: TranslationReader, base: Sequence[Run], other: Sequence[Run], split: str) -> Paired | str:
    """The variant's runs against the baseline's, paired by seed, on ``split``; why not, when no seed has
    both runs' translations of the same sentences."""
    by_seed = {r.seed: r for r in base}
    seeds, b_hyps, v_hyps, refs = [], [], [], []
    why = NO_HYPOTHESES
    for run in sorted(other, key=lambda r: r.seed):
        if run.seed not in by_seed:
            continue
        b, v = reader.get(by_seed[run.seed], split), reader.get(run, split)
        if b is None or v is None:
            continue
        if b.references != v.references:  # another evaluation set (a data change): nothing to pair
            why = OTHER_SENTENCES
            continue
        seeds.append(run.seed)
        b_hyps += b.hypotheses
        v_hyps += v.hypotheses
        refs += b.references
    if not refs:
        return why
    base_bleu, var_bleu, lo, hi, p, signature = paired_bootstrap(b_hyps, v_hyps, refs)
    return Paired(seeds, len(refs), base_bleu, var_bleu, var_bleu - base_bleu, lo, hi, p, signature)


def seed_interval(study: Study, variant: str, split: str, seeds: list[int]) -> st.Effect:
    metric = f"{split}/bleu"
    pick = set(seeds)
    assert study.baseline is not None
    base = {r.seed: r.metrics[metric] for r in study.finished(study.baseline)
            if r.seed in pick and metric in r.metrics}
    other = {r.seed: r.metrics[metric] for r in study.finished(variant)
             if r.seed in pick and metric in r.metrics}
    return st.compare(base, other)
