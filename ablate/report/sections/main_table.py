"""The report's core for an ablation: what differs between the variants ("Axes and what differs"), their
quality and cost per variant ("Results"), and each variant's effect against the baseline ("Effects").

The effects are computed in ``ablate.report.compute.loaded_study`` (tests in ``stats``); this module only
lays them out.
"""

from __future__ import annotations

from collections.abc import Mapping

from ablate.report import plots as figs
from ablate.report.compute import statistics as st
from ablate.report.compute.comparisons import EQUIVALENCE_PAIRS, design_of
from ablate.report.compute.loaded_study import (
    COST_COLUMNS,
    EffectRow,
    Study,
    main_table_columns,
    params_of,
    quality_meta,
    variant_diff,
)
from ablate.report.compute.run_counts import VariantSummary
from ablate.report.compute.val_and_test import held_out_effects
from ablate.report.render import Block, Figure, Note, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section
from ablate.report.sections.costs import cost_table


@section(70)
def axes_part(inp: Inputs) -> Part | None:
    """The axes the study varies and, per variant, its spec diff and parameter count against the baseline."""
    study = inp.study
    if study.baseline is None:
        return None
    axes: dict[str, tuple[str, set[str]]] = {}  # key -> (the baseline's value, the variants' values)
    rows = []
    for v in study.variants[1:]:
        diff = variant_diff(study, v)
        for k, a, b in diff:
            if a != "—":  # "—": an option of the variant's own component (the "what differs" table has it)
                axes.setdefault(k, (a, set()))[1].add(b)
        dp = params_of(study, v) - params_of(study, study.baseline)
        text = "; ".join(f"`{k}`: {a} → {b}" for k, a, b in diff) or "no spec difference"
        rows.append([v, text, st.fmt(dp, 0, signed=True)])
    blocks: list[Block] = [Table(["axis", "values (baseline first)"],
                                 [[f"`{k}`", ", ".join([axes[k][0], *sorted(axes[k][1] - {axes[k][0]})])]
                                  for k in sorted(axes)], "ll", "Axes")]
    blocks.append(Table(["variant", "differs from the baseline in", "Δ params"], rows, "llr",
                        "What differs between variants (spec diff and parameter count)"))
    return Part("axes", [Section("Axes and what differs", blocks)])


def main_table(study: Study, summary: Mapping[str, VariantSummary]) -> Table:
    """Counts and the quality metrics per variant (the cost columns are in ``costs.cost_table``)."""
    cols = [c for c in main_table_columns(study) if c[0] not in COST_COLUMNS]
    header = ["variant", "runs", "finished", "diverged", *[h for _, h, _ in cols]]
    rows = []
    for v in study.variants:
        s = summary[v]
        rows.append([v, str(s.runs), str(s.finished), str(s.diverged),
                     *[st.fmt_summary(s.metrics[k], d) for k, _, d in cols]])
    return Table(header, rows, caption="Mean ± 95% t-interval half-width over the seeds of finished runs")


def seed_notes(study: Study, summary: Mapping[str, VariantSummary]) -> list[Block]:
    """Warnings about variants with too few finished seeds for an interval or a significant test."""
    blocks: list[Block] = []
    none = [v for v in study.variants if summary[v].finished == 0]
    few = [v for v in study.variants if summary[v].finished == 1]
    tiny = [(v, summary[v].finished) for v in study.variants if 2 <= summary[v].finished <= st.TINY]

    # Labels can hold commas (two axes changed); quoted and joined with ";" they stay readable.
    def names(labels: list[str]) -> str:
        return "; ".join(f"`{v}`" for v in labels)

    more = (f"Re-run with {st.TINY + 1} or more seeds (ablation.seeds)" if design_of(study) is None else
            "This study adds seeds itself where a verdict is still open (ablate study); meanwhile the "
            "summary judges it by the group-sequential test (Adaptive seeds)")
    if none:
        blocks.append(Note(f"no finished run for {names(none)}: every run diverged or failed, so "
                           "there is no quality to compare (see Divergence and failures)."))
    if few:
        blocks.append(Note(f"too few seeds: {names(few)} ha" + ("s" if len(few) == 1 else "ve")
                           + " a single finished run, so differences involving "
                           + ("it" if len(few) == 1 else "them") + " are reported without interval or "
                           f"test. {more} before drawing conclusions."))
    if tiny and design_of(study) is None:
        blocks.append(Note(
            f"too few seeds to conclude: {'; '.join(f'`{v}` ({n})' for v, n in tiny)} ha"
            + ("s" if len(tiny) == 1 else "ve") + " only 2–3 finished seeds. Their effects get a bootstrap "
            "interval and an exact permutation p-value, and with 2–3 seeds on each side such a test cannot "
            "reach p < 0.05 (2 paired seeds: p ≥ 0.5; 3: p ≥ 0.25), so those effects are never called "
            f"significant. {more}."))
    elif tiny:  # adaptive seeds: the verdicts at the top are the sequential test's, which these words match
        blocks.append(Note(
            f"few seeds: {'; '.join(f'`{v}` ({n})' for v, n in tiny)} ha"
            + ("s" if len(tiny) == 1 else "ve") + " only 2–3 finished seeds. The Effects table's "
            "fixed-sample tests (a bootstrap interval and an exact permutation p-value) cannot reach "
            "p < 0.05 with so few (2 paired seeds: p ≥ 0.5; 3: p ≥ 0.25). The verdicts at the top are the "
            "group-sequential t-test's: it states an effect as soon as its interval excludes 0, and no "
            f"effect only from {EQUIVALENCE_PAIRS} paired seeds on; until then such a comparison stays open "
            "(this study adds seeds to it, up to seeds.max)."))
    return blocks


def effects_section(inp: Inputs, rows: list[EffectRow]) -> Section:
    """The effects table, the forest plot of the primary metric (written to the figures folder) and the
    method."""
    study = inp.study
    adaptive = design_of(study) is not None
    others = [m for m in dict.fromkeys(r.metric for r in rows) if m != study.primary]
    also = "".join(f" and on `{m}`" for m in others)  # the primary is often val/loss itself: said once
    blocks: list[Block] = [Para(f"Each variant against `{study.baseline}` on `{study.primary}`"
                                + (f"{also}, as fixed-sample tests (see below how they differ from the "
                                   "verdicts at the top)." if adaptive
                                   else f" (the summary at the top){also}."))]
    table_rows = []
    for r in rows:
        _, dec, _ = quality_meta(r.metric)
        e = r.effect
        ci = st.fmt_interval(e.lo, e.hi, dec) if e.tested else "—"
        ci += " bootstrap" if e.tested and e.interval == "bootstrap" else ""
        # The axis each variant changes is in the "What differs" table: left out here so the table fits.
        table_rows.append([r.variant, r.metric, st.fmt(e.diff, dec, True), ci, e.test if e.tested else "—",
                           f"{e.n_base}/{e.n_variant}", st.fmt_p(e.p), st.fmt_p(r.p_holm)])
    header = ["variant", "metric", "Δ vs baseline", "95% CI", "test", "n (base/ var)", "p", "p (Holm)"]
    blocks.append(Table(header, table_rows, "llrrlrrr", "Effects against the baseline (n: finished "
                        "seeds of the baseline / of the variant)"))
    if not adaptive:  # an adaptive study opens with the forest plot of its own verdicts
        prim = [r for r in rows if r.metric == study.primary]
        notes = [st.untestable_note(r.effect) for r in prim]
        figs.forest_plot([(r.variant, r.effect.diff, r.effect.lo, r.effect.hi) for r in prim],
                         f"Δ {study.primary} vs {study.baseline} (95% CI)", inp.fig_dir / "forest.png", notes)
        blocks.append(Figure("figures/forest.png", f"Effect of each variant on {study.primary} "
                             "against the baseline (dot: difference of means; bar: 95% CI)"
                             + (st.UNTESTABLE_CAPTION if any(notes) else "")))
    else:
        blocks.append(Para("These fixed-sample intervals and p-values (paired by seed) ignore the study's "
                           "stopping rule: its seeds were added while a comparison was open, so their "
                           "nominal 95% overstates the evidence, and they can call an effect significant "
                           "that the study's repeated interval leaves open. The verdicts are the sequential "
                           "ones at the top and in Adaptive seeds."))
    blocks.append(Para("Method: " + st.METHOD_NOTE))
    return Section("Effects", blocks)


@section(80)
def part(inp: Inputs) -> Part:
    """"Results" and, with a baseline to compare to, "Effects"; ``data``: the baseline, the primary metric,
    each variant's counts and metrics, and each effect with its verdict."""
    study, summary, rows = inp.study, inp.summary, inp.effects
    results: list[Block] = [*seed_notes(study, summary), main_table(study, summary)]
    results += [t for t in [cost_table(study)] if t]
    sections = [Section("Results", results)]
    if rows:
        sections.append(effects_section(inp, rows))
    counts = ("runs", "finished", "diverged", "failed", "pruned", "seeds")
    data = {"baseline": study.baseline, "primary_metric": study.primary,
            "variants": {v: {**{k: getattr(s, k) for k in counts},
                             "metrics": {k: {"n": m.n, "mean": m.mean, "half_width": m.half_width}
                                         for k, m in s.metrics.items()}} for v, s in summary.items()},
            "effects": [{"variant": r.variant, "axis": r.axis, "metric": r.metric, "diff": r.effect.diff,
                         "lo": r.effect.lo, "hi": r.effect.hi, "p": r.effect.p, "p_holm": r.p_holm,
                         "test": r.effect.test, "n_base": r.effect.n_base, "n_variant": r.effect.n_variant,
                         "interval": r.effect.interval, "verdict": r.verdict, "answer": r.answer}
                        for r in rows],
            # the test split beside the deciding metric (paper tables: ablate report --format latex/csv)
            "test_effects": [{"variant": t.variant, "metric": t.metric, "diff": t.effect.diff,
                              "lo": t.effect.lo, "hi": t.effect.hi, "answer": t.answer}
                             for t in held_out_effects(study)]}
    return Part("results", sections, data=data)
