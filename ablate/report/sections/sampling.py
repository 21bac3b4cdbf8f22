"""The report's "Test-set sampling": for a BLEU study, each variant against the baseline by sacreBLEU's own
paired bootstrap over sentences, on val and on test (computed by
``ablate.report.compute.sentence_bootstrap``).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ablate.report.compute import statistics as st
from ablate.report.compute.loaded_study import Study
from ablate.report.compute.sentence_bootstrap import (
    NO_HYPOTHESES,
    RESAMPLES,
    SPLITS,
    TranslationReader,
    compare,
    seed_interval,
)
from ablate.report.render import Block, Bullets, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section

TITLE = "Test-set sampling: paired bootstrap over sentences"


def _kind(seed: st.Effect) -> str:
    """What the over-seeds interval is, where it is not a t-interval."""
    if seed.interval == "bootstrap":
        return f" (percentile bootstrap over {seed.n_min} differences)"
    if seed.interval == "none":
        return " (no interval)"
    return ""


@section(130)
def part(inp: Inputs) -> Part | None:
    study = inp.study
    if study.kind != "ablation" or study.quality != "bleu" or study.baseline is None:
        return None
    reader = TranslationReader()
    if not any(reader.has(r) for r in study.runs if r.status == "finished"):
        return None  # recorded before runs logged their translations: nothing to say, no section
    base = study.finished(study.baseline)
    if not any(reader.has(r) for r in base):
        return _baseline_without_translations(study, reader, len(base))
    rows: list[list[str]] = []
    missing: list[str] = []
    data: dict[str, Any] = {}
    signature = ""
    failed = False
    for variant in study.variants[1:]:
        for split in SPLITS:
            try:
                found = compare(reader, base, study.finished(variant), split)
            except RuntimeError as exc:
                missing.append(f"{variant} on {split}: could not be resampled ({exc})")
                failed = True
                continue
            if isinstance(found, str):
                missing.append(f"{variant} on {split}: {found}")
                continue
            signature = found.signature
            seed = seed_interval(study, variant, split, found.seeds)
            rows.append([variant, split, str(len(found.seeds)), f"{found.sentences:,}",
                         st.fmt(found.baseline, 2), st.fmt(found.variant, 2),
                         f"{st.fmt(found.diff, 2, signed=True)} {st.fmt_interval(found.lo, found.hi, 2)}",
                         f"{st.fmt(seed.diff, 2, signed=True)} {st.fmt_interval(seed.lo, seed.hi, 2)}"
                         + _kind(seed)])
            data.setdefault(variant, {})[split] = {**asdict(found), "seed_diff": seed.diff,
                                                   "seed_lo": seed.lo, "seed_hi": seed.hi}
    blocks: list[Block] = [_intro()]
    if rows:
        blocks.append(Table(
            ["variant", "split", "seeds", "sentences", "baseline BLEU", "variant BLEU",
             "Δ BLEU [95% bootstrap over sentences]", "Δ BLEU [95% over seeds, one test alone]"], rows,
            align="llrrrrrr",
            caption="Paired bootstrap over sentences (and seeds): variant − baseline, corpus BLEU. Both "
                    "intervals are of one comparison alone, at 95%: neither is the verdict's (which is "
                    "corrected for the study's looks and family), and no p-value is shown beside them"))
    if missing:
        blocks.append(Para("Not resampled:"))
        blocks.append(Bullets(missing))
    if signature:
        blocks.append(Para(f"sacreBLEU signature: `{signature}`."))
    return Part("bootstrap", [Section(TITLE, blocks)],
                data={"bleu_bootstrap": {"comparisons": data, "not_resampled": missing,
                                         "resamples": RESAMPLES, "signature": signature}},
                failed=failed)


def _intro() -> Para:
    return Para(
        "How much of the uncertainty is test-set sampling. Each variant's runs are paired with the "
        "baseline's by seed, and the paired seeds' sentences are put into one corpus (a resampling unit is "
        "one sentence of one seed). sacreBLEU's paired bootstrap (`sacrebleu --paired-bs`, "
        f"{RESAMPLES:,} resamples) redraws that corpus's sentences: the interval says how far the BLEU "
        "difference could move with another sample of sentences from the same distribution, the models "
        "held fixed. It does not include seed-to-seed training variance; the last column does: a "
        "fixed-sample interval of the runs' own BLEU paired by seed on the same seeds (a t-interval, or a "
        "percentile bootstrap over the differences when there are too few seeds for one; each row says "
        "which), for this comparison alone: it is not the verdict's interval, which is wider because it "
        "holds over every look and every comparison of the study. Where the bootstrap interval is much "
        "narrower than the seed interval, retraining, "
        "not the size of the evaluation set, limits what the study can tell apart. BLEU here is corpus "
        "BLEU over all paired seeds' sentences together, so it can differ slightly from the mean of the "
        "per-run scores.")


def _baseline_without_translations(study: Study, reader: TranslationReader, n_base: int) -> Part:
    """The section of a study whose baseline ran before runs logged their translations: nothing pairs."""
    finished = [r for r in study.runs if r.status == "finished"]
    having = sum(1 for r in finished if reader.has(r))
    why = (f"Nothing can be resampled yet: the baseline's {n_base} runs were recorded before runs logged "
           f"their translations, so no variant's run has a baseline run of its seed to pair with "
           f"({having} of the study's {len(finished)} finished runs {'has' if having == 1 else 'have'} "
           "them). The section fills in once the baseline has runs with translations.")
    missing = [f"{study.baseline}: {NO_HYPOTHESES}"]
    return Part("bootstrap", [Section(TITLE, [_intro(), Para(why)])],
                data={"bleu_bootstrap": {"comparisons": {}, "not_resampled": missing, "resamples": RESAMPLES,
                                         "signature": ""}})
