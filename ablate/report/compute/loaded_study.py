"""A study read back from MLflow, as plain data: runs, variants, the baseline, summaries and effects.

Rules for turning MLflow runs into a comparison: one run per (variant, seed) cell (a retried cell keeps its
best, latest run); statistics over finished runs only; every non-baseline variant compared with the
baseline on the primary quality metric and on val/loss (see ``ablate.stats.fixed_sample`` for the
tests). A full-factorial study's main effects and interactions: ``ablate.report.compute.contrasts``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ablate.report.compute import statistics as st
from ablate.report.compute.rung_runs import by_rung
from ablate.spec import metricnames
from ablate.spec.axis_fields import ignored_fields, new_components_default
from ablate.spec.experiment import ExperimentSpec, flatten
from ablate.stats.fixed_sample import Effect, compare
from ablate.stats.multiplicity import holm
from ablate.study.pilot import MACHINE_COLUMN, RUNG_COLUMN  # noqa: F401  # runs.csv's columns, for build.py
from ablate.study.recorded_study import StudyRecord, from_tags, parse
from ablate.study.sizing import scale_note
from ablate.tracking import record
from ablate.tracking.read import child_runs, find_study_runs, read_text_artifact, tags_and_params
from ablate.tracking.run_files import origin_id
from ablate.tracking.tracker import param_value
from ablate.tracking.versions import stale_reason

# Params that never describe a design choice: identity, bookkeeping, the study sections themselves.
IGNORED_PARAMS = ("name", "seed", "description", "tracking", "ablation", "search")
IGNORED_PREFIXES = ("tracking.", "ablation.", "search.", "train.out_dir", "data.cache_dir", "train.threads",
                    "train.device")
STATUS_RANK = {"finished": 0, "diverged": 1, "pruned": 2, "failed": 3, "killed": 4, "interrupted": 4,
               "running": 5}
# A cell in one of these states is no result yet: `ablate study` resumes it from its checkpoint.
IN_PROGRESS = ("killed", "interrupted", "running")
QUALITY = {  # metric suffix -> (unit shown, decimals, higher is better)
    "bleu": ("BLEU", 2, True), "chrf": ("chrF", 2, True), "exact_match": ("exact match", 3, True),
    "loss": ("loss", 3, False),
}
# Main-table columns: (metric key, header, decimals); '{q}' is the study's quality metric.
COLUMNS = [
    ("val/{q}", "val {Q}", None), ("test/{q}", "test {Q}", None),
    # train.weight_average: the averaged weights' reading beside the best checkpoint's (only runs with it)
    (metricnames.averaged("val/{q}"), "val {Q} averaged", None), (metricnames.averaged("test/{q}"),
                                                                  "test {Q} averaged", None),
    (metricnames.VAL_CHRF, "val chrF", 2),
    (metricnames.TEST_CHRF, "test chrF", 2), (metricnames.VAL_LOSS, "val loss", 3), (metricnames.VAL_PPL,
                                                                                     "val ppl", 2),
    # a language model's loss in bits per byte of text (tokenizer-independent: nats / ln 2 x tokens / bytes)
    (metricnames.VAL_BPB, "val bits/byte", 3), (metricnames.TEST_BPB, "test bits/byte", 3),
    (metricnames.MODEL_PARAMS, "params", 0), (metricnames.KV_CACHE, "KV cache B/token", 0),
    (metricnames.TOKENS_PER_S, "tokens/s", 0), (metricnames.RUN_MEMORY, "run MB", 1),
    (metricnames.PEAK_MEMORY, "peak MB", 1), (metricnames.WALL_TIME, "wall s", 1),
]
# The cost columns among them: the report shows them in a table of their own, so neither table runs off
# a page.
COST_COLUMNS = (metricnames.MODEL_PARAMS, metricnames.KV_CACHE, metricnames.TOKENS_PER_S,
                metricnames.RUN_MEMORY, metricnames.PEAK_MEMORY, metricnames.WALL_TIME)


@dataclass
class Run:
    run_id: str
    variant: str
    seed: int
    status: str
    spec_hash: str
    start_time: float
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]

    @property
    def shown_id(self) -> str:
        """The id a report names the run by: the one it was first logged under, so that a report regenerated
        from an imported export names the same runs (the import's own ids are new each time)."""
        return origin_id(self.run_id, self.tags)


@dataclass
class Study:
    name: str
    kind: str  # 'ablation' | 'search'
    parent: dict[str, Any]
    runs: list[Run]  # deduplicated, sorted by (variant order, seed)
    variants: list[str]  # baseline first
    baseline: str | None
    quality: str  # 'bleu' | 'exact_match' | 'loss'
    primary: str  # the metric effects are computed on, e.g. 'test/bleu'
    dropped: int = 0  # superseded duplicates of a (variant, seed) cell
    notes: list[str] = field(default_factory=list)
    # With ablation.tune / ablation.confirm, ``runs`` are the cells at the baseline's settings,
    # and each later arm ('own_best', 'confirm') is a study of its own runs beside them; each variant's
    # tuning search, with its trials' runs.
    arms: dict[str, Study] = field(default_factory=dict)
    searches: list[Search] = field(default_factory=list)
    # Runs withdrawn from the comparisons (an earlier implementation of their variant, another precision
    # than the study's), each with the reason it was withdrawn: listed in the report's appendix.
    withdrawn: list[tuple[Run, str]] = field(default_factory=list)
    # A ladder (ablation.scales): each rung's cells as a study of its own, in order of compute; ``runs``
    # are then the largest rung's (``rung``), whose verdicts every section that knows no ladder states.
    rungs: dict[str, Study] = field(default_factory=dict)
    rung: str | None = None
    # What the study stated about itself (ablate/study/recorded_study.py), as `load_study` parsed it
    record: StudyRecord = field(default_factory=StudyRecord)

    def finished(self, variant: str) -> list[Run]:
        return [r for r in self.runs if r.variant == variant and r.status == "finished"]

    def of(self, variant: str) -> list[Run]:
        return [r for r in self.runs if r.variant == variant]


@dataclass
class Search:
    """A variant's tuning search (ablation.tune): its run, and its trials' runs."""

    run: Run
    trials: list[Run]


# ---------------------------------------------------------------- loading
def _runs_from_frame(frame: pd.DataFrame) -> list[Run]:
    out = []
    for rec in frame.to_dict("records"):
        tags, params = tags_and_params(rec)
        if tags.get(record.SPEC_PRECISION):
            # a cell trained at its study's precision logs it; its spec said auto, as the cells' before it
            # did: no difference between them (what each resolved to is its ablate.precision tag)
            params["train.precision"] = tags[record.SPEC_PRECISION]
        # final/<name> (the run's result) read as <name>; older runs logged it as <name>'s last value
        metrics = record.result_metrics({k[8:]: float(v) for k, v in rec.items()
                                    if k.startswith("metrics.") and pd.notna(v)})
        status = tags.get(record.STATUS) or str(rec.get("status", "")).lower()
        seed_text = tags.get(record.SEED, params.get("seed", "0"))
        start = rec.get("start_time")
        out.append(Run(
            run_id=str(rec["run_id"]), variant=tags.get(record.VARIANT) or tags.get(record.RUN_NAME, "?"),
            seed=int(seed_text) if seed_text.lstrip("-").isdigit() else 0, status=status,
            spec_hash=tags.get(record.SPEC_HASH, ""), params=params, metrics=metrics, tags=tags,
            start_time=start.timestamp() if hasattr(start, "timestamp") else 0.0))
    return out


def _dedupe(runs: list[Run]) -> tuple[list[Run], int]:
    """One run per (variant, seed): the best status, then the latest (a retried cell beats its failure)."""
    best: dict[tuple[str, int], Run] = {}
    for r in runs:
        key = (r.variant, r.seed)
        cur = best.get(key)
        if cur is None or (STATUS_RANK.get(r.status, 9), -r.start_time, r.run_id) < \
                (STATUS_RANK.get(cur.status, 9), -cur.start_time, cur.run_id):
            best[key] = r
    return list(best.values()), len(runs) - len(best)


def detect_quality(runs: Sequence[Run], requested: str = "auto") -> str:
    name = requested.split("/")[-1] if requested and requested != "auto" else ""
    if name in QUALITY:
        return name
    keys = {k for r in runs for k in r.metrics}
    for q in ("bleu", "exact_match"):
        if f"val/{q}" in keys or f"test/{q}" in keys:
            return q
    return "loss"


def _superseded_note(stale: list[tuple[Run, str]]) -> str:
    """The report's note on the runs it leaves out as superseded: their variant's implementation changed
    since they ran, or they ran at another precision than the study's (ablate/study/precision.py)."""
    def listed(picked: list[tuple[Run, str]], sep: str) -> str:
        whys = sep.join(sorted({why for _, why in picked}))
        return f"({whys}): " + "; ".join(sorted(f"{r.variant} seed {r.seed}" for r, _ in picked))

    version = [(r, w) for r, w in stale if not w.startswith(record.SUPERSEDED_PRECISION)]
    precision = [(r, w) for r, w in stale if w.startswith(record.SUPERSEDED_PRECISION)]
    notes = []
    if version:
        notes.append(f"{len(version)} run(s) of a variant whose implementation changed since they ran are "
                     f"left out {listed(version, ', ')}. They stay in the store, tagged {record.SUPERSEDED}; "
                     "`ablate study` retrains those cells under the new version")
    if precision:
        notes.append(f"{len(precision)} run(s) that trained at another precision than the study's cells are "
                     f"left out {listed(precision, '; ')}. They stay in the store, tagged "
                     f"{record.SUPERSEDED}; `ablate study` trains those cells again at the study's "
                     "precision")
    return ". ".join(notes)


def _other_precision(tags: Mapping[str, str]) -> str | None:
    why = tags.get(record.SUPERSEDED)
    return why if why is not None and why.startswith(record.SUPERSEDED_PRECISION) else None


def _arms_of(run: Run, listed: Mapping[str, Mapping[str, str]]) -> set[str]:
    """The arms a cell's run belongs to: the one that queued it (its tag; none: the baseline's settings)
    and each arm the parent's arms.json lists its cell under (a cell two arms share)."""
    key = run.tags.get(record.CELL, "")
    return {run.tags.get(record.ARM, record.BASELINE_ARM)} | {arm for arm,
                                                              cells in listed.items() if key in cells}


def build_study(parent: dict[str, Any], frame: pd.DataFrame,
                arms: Mapping[str, Mapping[str, str]] | None = None,
                trials: Mapping[str, pd.DataFrame] | None = None, rec: StudyRecord | None = None) -> Study:
    """The study from its parent and child runs; ``arms`` (the parent's arms.json) and ``trials`` (search
    run id -> its trials' runs) for a study with ablation.tune / ablation.confirm; ``rec`` the study's record
    (default: read from the parent's tags, a study recorded before the record artifact)."""
    rec = rec if rec is not None else from_tags(parent["tags"])
    every = _runs_from_frame(frame)
    # A child run of kind search is a variant's tuning search (ablation.tune, study/variant_searches.py), not
    # a cell.
    cells = [r for r in every if r.tags.get(record.KIND) != "search"]
    if rec.ladder is not None:  # a ladder (ablation.scales); a tuned ladder's tuning cells are never compared
        return _ladder(parent, [r for r in cells if r.tags.get(record.ARM) != record.LADDER_TUNE_ARM], rec)
    listed = arms or {}
    study = _study(parent, [r for r in cells if record.BASELINE_ARM in _arms_of(r, listed)], rec)
    for arm in record.ARMS[1:]:
        runs = [r for r in cells if arm in _arms_of(r, listed)]
        if runs:
            study.arms[arm] = _study(parent, runs, rec)
    latest = {r.variant: r for r in sorted((r for r in every if r.tags.get(record.KIND) == "search"),
                                           key=lambda r: (r.start_time, r.run_id))}
    found = trials or {}
    study.searches = [Search(latest[v], _runs_from_frame(found[latest[v].run_id])
                             if latest[v].run_id in found else []) for v in study.variants if v in latest]
    return study


def _ladder(parent: dict[str, Any], cells: list[Run], rec: StudyRecord) -> Study:
    """A ladder: each rung's cells a study of their own, the largest rung standing for the study."""
    names = rec.ladder.names if rec.ladder is not None else []
    rungs = {name: _study(parent, runs, rec) for name, runs in by_rung(names, cells).items()}
    top = list(rungs)[-1] if rungs else None
    return dataclasses.replace(rungs[top], rungs=rungs, rung=top) if top else _study(parent, [], rec)


def _study(parent: dict[str, Any], every: list[Run], rec: StudyRecord) -> Study:
    # superseded: an older version of the variant (read from the run, tagged or not), or another precision
    # than the study's (tagged when the study pinned one)
    stale = [(r, why) for r in every if (why := stale_reason(r.params, r.tags) or _other_precision(r.tags))
             is not None]
    left_out = {r.run_id for r, _ in stale}
    runs, dropped = _dedupe([r for r in every if r.run_id not in left_out])
    waiting = sorted(f"{r.variant} seed {r.seed}" for r in runs if r.status in IN_PROGRESS)
    runs = [r for r in runs if r.status not in IN_PROGRESS]
    tags, params = parent["tags"], parent["params"]
    name = tags.get(record.STUDY) or parent["run_name"] or parent["run_id"]
    is_search = tags.get(record.KIND) == "search" or any(r.tags.get(record.KIND) == "trial" for r in runs)
    labels = sorted({r.variant for r in runs})
    baseline = "baseline" if "baseline" in labels else None
    notes = [_superseded_note(stale)] if stale else []
    if waiting:  # an interrupted study's report: say what it does not cover yet
        cells = "; ".join(waiting)
        notes.append(f"{len(waiting)} cell(s) interrupted or still running are left out ({cells}): "
                     "`ablate study` resumes them from their checkpoints, and a report made after that "
                     "includes them")
    if baseline is None and labels and not is_search:
        baseline = labels[0]
        notes.append(f"no variant is labelled 'baseline': effects are measured against {baseline!r}")
    variants = ([baseline] if baseline else []) + [v for v in labels if v != baseline]
    order = {v: i for i, v in enumerate(variants)}
    runs.sort(key=lambda r: (order[r.variant], r.seed, r.run_id))
    requested = params.get("ablation.metric", "auto")
    quality = detect_quality(runs, requested)
    if requested != "auto" and "/" in requested:
        primary = requested  # the study asked for this metric explicitly
    else:
        # 'auto': the held-out test score when the runs have it (val picked the checkpoint), else val.
        has_test = any(f"test/{quality}" in r.metrics for r in runs if r.status == "finished")
        primary = f"{'test' if has_test else 'val'}/{quality}"
        # runs with train.weight_average: their averaged reading, the one 'auto' decides on
        if any(record.averaged(primary) in r.metrics for r in runs if r.status == "finished"):
            primary = record.averaged(primary)
    return Study(name, "search" if is_search else "ablation", parent, runs, variants, baseline, quality,
                 primary, dropped, notes, withdrawn=stale, record=rec)


def load_study(study: str) -> Study:
    """The study (a name or the parent's run id) read back from MLflow; with tune: or confirm:, its arms
    (the parent's arms.json) and each search's trials too."""
    parent, frame = find_study_runs(study)
    rec = parse(read_text_artifact(parent["run_id"], record.STUDY_RECORD_ARTIFACT), parent["tags"])
    if rec.arm_design is None:
        return build_study(parent, frame, rec=rec)
    text = read_text_artifact(parent["run_id"], record.ARMS_ARTIFACT)
    searches = [str(row["run_id"]) for row in frame.to_dict("records")
                if row.get(f"tags.{record.KIND}") == "search"]
    trials = {run_id: child_runs(run_id, parent["experiment_id"]) for run_id in searches}
    return build_study(parent, frame, json.loads(text) if text else None, trials, rec)


# ---------------------------------------------------------------- analysis
def design_params(params: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in params.items() if k not in IGNORED_PARAMS and not k.startswith(IGNORED_PREFIXES)}


@functools.cache
def spec_defaults() -> dict[str, str]:
    """Every spec field's default, as a run logs it as a param: what a run that predates a field ran with."""
    spec = ExperimentSpec.model_validate({"name": "defaults"})
    return {k: param_value(v) for k, v in flatten(spec.resolved()).items()}


def spec_diff(base: dict[str, str], other: dict[str, str]) -> list[tuple[str, str, str]]:
    """(key, baseline value, variant value) for every design param that differs, sorted by key. A field
    one run did not log (it ran before the field existed) counts as the field's default, so a field added
    since is no difference; a key with no default (a component's option) shows as "—". A field a component
    of either run ignores (``model.activation`` under a gated FFN) is no difference either."""
    a, b = design_params(base), design_params(other)
    ignored = ignored_fields(a) | ignored_fields(b)  # a sub-axis the component of either run does not take
    d = spec_defaults()
    pairs = [(k, a.get(k, d.get(k, "—")), b.get(k, d.get(k, "—"))) for k in sorted(set(a) | set(b))]
    return [(k, va, vb) for k, va, vb in pairs
            if va != vb and k not in ignored and not new_components_default(k, va, vb)]


def variant_diff(study: Study, variant: str) -> list[tuple[str, str, str]]:
    """``variant``'s spec diff against the baseline (spec_diff), read off each one's first run; [] where
    either has no run (every run of a variant shares its design params: only the seed differs)."""
    base, runs = (study.of(study.baseline) if study.baseline else []), study.of(variant)
    return spec_diff(base[0].params, runs[0].params) if base and runs else []


def params_of(study: Study, variant: str) -> float:
    """The variant's parameter count, from any of its runs that logged it (a failed one may not); else NaN."""
    counts = [r.metrics[metricnames.MODEL_PARAMS] for r in study.of(variant)
              if metricnames.MODEL_PARAMS in r.metrics]
    return counts[0] if counts else math.nan


def hardware(run: Run) -> str:
    """The machine a run ran on, as its tags name it (CPU, and GPU where there was one)."""
    return record.machine(run.tags) or "unknown CPU"


def quality_meta(key: str) -> tuple[str, int, bool]:
    """(unit, decimals, higher is better) of a metric key such as 'test/bleu' or 'val/loss'; any other (a
    downstream task's acc, acc_norm, bpb) in its direction as the record declares it."""
    suffix = key.split("/")[-1]
    return QUALITY.get(suffix, (suffix, 3, metricnames.higher_is_better(key)))


def main_table_columns(study: Study) -> list[tuple[str, str, int]]:
    q = study.quality
    unit, dec, _ = QUALITY[q]
    cols: list[tuple[str, str, int]] = []
    for key, header, decimals in COLUMNS:
        key = key.format(q=q)
        if key in [c[0] for c in cols] or not any(key in r.metrics for r in study.runs):
            continue
        cols.append((key, header.format(Q=unit), dec if decimals is None else decimals))
    return cols


def padding_text(study: Study) -> str | None:
    """The share of padding in the training batches (metric ``data/padding_fraction``), None if not logged:
    one value when every run saw the same batches; otherwise the range and the value per variant."""
    key = metricnames.PADDING
    per_variant = {v: sorted({round(r.metrics[key], 6) for r in study.of(v) if key in r.metrics})
                   for v in study.variants}
    values = sorted({x for xs in per_variant.values() for x in xs})
    if not values:
        return None
    what = "of the token positions in training batches are padding"
    if len(values) == 1:
        return f"{100 * values[0]:.1f}% {what} (every run)"
    shown = "; ".join(f"{v}: {', '.join(f'{100 * x:.1f}%' for x in xs)}"
                      for v, xs in per_variant.items() if xs)
    return f"{100 * values[0]:.1f}–{100 * values[-1]:.1f}% {what} ({shown})"


@dataclass
class EffectRow:
    variant: str
    axis: str
    metric: str
    effect: Effect
    p_holm: float
    verdict: str
    answer: str = ""  # the verdict's short word (better, worse, no detectable effect, not testable, ...)


def _other_rungs_p(study: Study, metric: str) -> list[float]:
    """A ladder's comparisons at its other rungs (one family with the largest's): their p-values."""
    def values(s: Study, v: str) -> dict[int, float]:
        return {r.seed: r.metrics[metric] for r in s.finished(v) if metric in r.metrics}
    return [compare(values(s, s.baseline or ""), values(s, v)).p for name, s in study.rungs.items()
            if name != study.rung for v in s.variants if v != s.baseline]


def effects(study: Study) -> list[EffectRow]:
    """Every non-baseline variant against the baseline, on the primary metric and on val/loss; a ladder's
    Holm correction runs over its comparisons at every rung (one family)."""
    if study.baseline is None:
        return []
    metrics = [study.primary] + ([metricnames.VAL_LOSS] if study.primary != metricnames.VAL_LOSS else [])
    rows: list[EffectRow] = []
    for metric in metrics:
        family: list[tuple[str, str, Effect]] = []
        base = {r.seed: r.metrics[metric] for r in study.finished(study.baseline) if metric in r.metrics}
        for v in study.variants[1:]:
            axis = ", ".join(k for k, _, _ in variant_diff(study, v)) or "(no spec difference)"
            other = {r.seed: r.metrics[metric] for r in study.finished(v) if metric in r.metrics}
            family.append((v, axis, compare(base, other)))
        adjusted = holm([e.p for _, _, e in family] + _other_rungs_p(study, metric))[:len(family)]
        unit, dec, higher = quality_meta(metric)
        unit = unit if metric == study.primary else metric
        for (v, axis, e), ph in zip(family, adjusted, strict=True):
            text = st.effect_sentence(v, e, unit, higher, dec)
            bad = [r.status for r in study.of(v) if r.status != "finished"]
            if bad:
                total = len(study.of(v))
                if len(set(bad)) == 1:
                    text += f" ({len(bad)} of {total} runs {bad[0]})"
                else:
                    counts = ", ".join(f"{bad.count(s)} {s}" for s in sorted(set(bad)))
                    text += f" ({len(bad)} of {total} runs did not finish: {counts})"
            rows.append(EffectRow(v, axis, metric, e, ph, text, st.answer(e, higher)))
    return rows


def scale_changes(study: Study, metric: str) -> list[str]:
    """Per variant whose settings change the verdicts' metric's own scale (label smoothing, the tokenizer
    on a loss), the sentence the plan prints too (ablate.study.sizing.scale_note)."""
    notes = (scale_note(f"`{variant}`", metric, (k for k, _, _ in variant_diff(study, variant)))
             for variant in study.variants[1:])
    return [note for note in notes if note is not None]
