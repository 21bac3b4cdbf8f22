"""The numbers of the report's "Test-set sampling": each variant against the baseline by sacreBLEU's own
paired bootstrap over sentences, on val and on test.

The seed intervals elsewhere in the report measure how much a result moves when the model is trained
again (seed to seed). This section measures the other source of uncertainty: which sentences happen to be
in the evaluation set. The runs of a variant and of the baseline are paired by seed; the paired seeds'
(baseline hypothesis, variant hypothesis, reference) triples are put into one corpus, so that a resampling
unit is one sentence of one seed; `sacrebleu.significance.PairedTest` (``sacrebleu --paired-bs``: the
Koehn 2004 test, as Moses' ``bootstrap-hypothesis-difference-significance.pl``) resamples it 1,000 times.
The BLEU difference's interval is taken from the same resamples: sacreBLEU's ``_bootstrap_resample`` draws
its indices from a generator seeded as the paired test's is, so the baseline's and the variant's scores
come from the same resampled sentences (checked here against the paired test's own variant mean).

The hypotheses and references come from each run's ``translations/`` artifact
(`ablate.tracking.translations`), so a report made from an export alone gives the same figures. Runs
recorded before that artifact existed have none: their comparisons are listed as such, never estimated.
A study none of whose runs has translations gets no section.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest, _bootstrap_resample, estimate_ci

from ablate.report.compute import statistics as st
from ablate.report.compute.loaded_study import Run, Study
from ablate.tracking import record, translations
from ablate.tracking.read import list_artifacts
from ablate.tracking.translations import SplitTranslations

SPLITS = ("val", "test")
RESAMPLES = 1000  # sacreBLEU's default for --paired-bs
SEED = "12345"  # sacreBLEU's default SACREBLEU_SEED, pinned: the same runs give the same intervals


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


@contextmanager
def _pinned_seed() -> Iterator[None]:
    """sacreBLEU reads its resampling seed from SACREBLEU_SEED: pin it (a report is reproducible, and the
    interval's resamples must be the paired test's)."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = SEED
    try:
        yield
    finally:
        if old is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = old


def paired_bootstrap(baseline: Sequence[str], variant: Sequence[str], references: Sequence[str],
                     resamples: int = RESAMPLES) -> tuple[float, float, float, float, float, str]:
    """sacreBLEU's paired bootstrap of ``variant`` against ``baseline`` (one corpus, one reference each):
    (baseline BLEU, variant BLEU, interval low, interval high, p, signature). The interval is the 2.5th
    and 97.5th percentile of the variant - baseline differences over the test's own resamples (the bounds
    sacreBLEU's ``estimate_ci`` takes)."""
    metric = BLEU(references=[list(references)])  # the references are tokenised once, and cached
    with _pinned_seed():
        signatures, scores = PairedTest([("baseline", list(baseline)), ("variant", list(variant))],
                                        {"BLEU": metric}, None, test_type="bs", n_samples=resamples)()
        base_result, var_result = scores["BLEU"]
        resampled = []
        for hyps in (baseline, variant):
            _, found = _bootstrap_resample(metric._extract_corpus_statistics(list(hyps), None), metric,
                                           resamples)
            resampled.append(np.array([s.score for s in found]))
    assert not isinstance(base_result, str) and not isinstance(var_result, str)
    var_mean, _ = estimate_ci(resampled[1])
    if var_result.mean is None or not math.isclose(float(var_mean), float(var_result.mean), abs_tol=1e-9):
        raise RuntimeError("sacreBLEU's resamples differ from its paired test's (its seeding changed?)")
    diffs = np.sort(resampled[1] - resampled[0])
    k = len(diffs) // 40
    p = math.nan if var_result.p_value is None else float(var_result.p_value)
    if list(baseline) == list(variant):
        # Every resampled difference is 0, and sacreBLEU counts only those strictly above the observed
        # one: it would say p = 1/(resamples + 1) for two identical systems. Nothing differs: p = 1.
        p = 1.0
    lo, hi = float(diffs[k]), float(diffs[len(diffs) - k - 1])
    return float(base_result.score), float(var_result.score), lo, hi, p, str(signatures["BLEU"])


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
