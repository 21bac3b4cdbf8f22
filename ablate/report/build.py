"""`ablate report STUDY`: a comparison report of one study, read back from MLflow.

Writes ``report.md``, a self-contained ``report.html``, ``runs.csv``, ``report.json`` (every number at full
precision) and ``figures/*.png`` to ``reports/<study>/``, and logs the folder under ``report/`` in the
study's parent run. Everything is sorted and formatted with fixed precision, and the figures are
byte-stable, so the same runs give the same files except for the one "Report generated on" line.
The report opens with its summary (verdicts and warnings for an ablation; the best trial, its
``best.yaml`` and the command that retrains it for a search); the data, hardware and code tables come last.
Statistics live in ``ablate.report.stats``, rendering in ``ablate.report.render`` / ``figures``, the
environment in ``environment``, full-factorial, search and attention sections in ``factorial``,
``search`` and ``attention``, and the floor / ceiling check of the quality metric in ``bounds``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from ablate.report import attention, environment, factorial, published, search
from ablate.report import figures as figs
from ablate.report import stats as st
from ablate.report.bounds import at_bounds, bound_suffix, bound_text
from ablate.report.data import (
    COST_COLUMNS,
    QUALITY,
    EffectRow,
    Study,
    design_params,
    effects,
    factorial_effects,
    load_study,
    main_table_columns,
    padding_text,
    quality_meta,
    spec_diff,
    summarise,
)
from ablate.report.render import (
    STAMP_PREFIX,
    Block,
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
from ablate.report.seeds import decided_metric, design_of, seeds_section, sequential_summary

__all__ = ["build_report", "load_study", "main_report"]


# ---------------------------------------------------------------- output helpers
def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return None if not math.isfinite(value) else value
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_runs_csv(study: Study, path: Path) -> None:
    metric_keys = sorted({k for r in study.runs for k in r.metrics})
    varying = sorted(k for k in {k for r in study.runs for k in design_params(r.params)}
                     if len({r.params.get(k) for r in study.runs}) > 1)
    from ablate.tracking.transfer import origin_id  # an imported run shows the id it was exported with

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["variant", "seed", "status", "spec_hash", "run_id", *metric_keys, *varying])
    for r in study.runs:
        w.writerow([r.variant, r.seed, r.status, r.spec_hash, origin_id(r.run_id, r.tags),
                    *[repr(r.metrics[k]) if k in r.metrics else "" for k in metric_keys],
                    *[r.params.get(k, "") for k in varying]])
    path.write_text(buf.getvalue())


def stamp() -> str:
    """The one line that may differ between reruns; SOURCE_DATE_EPOCH pins it (reproducible builds)."""
    from ablate import __version__

    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    now = time.gmtime(int(epoch)) if epoch and epoch.isdigit() else time.gmtime()
    return f"{STAMP_PREFIX}{time.strftime('%Y-%m-%d %H:%M:%S', now)} UTC by ablate {__version__}"


def fmt_duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h {s % 3600 // 60:02d}m {s % 60:02d}s ({seconds:,.1f} s)"


# ---------------------------------------------------------------- sections
def setup_section(study: Study) -> Section:
    """What was run, in a few lines: the study, its seeds, the metric it is judged on, the compute spent."""
    runs = study.runs
    seeds = sorted({r.seed for r in runs})
    total = sum(r.metrics.get("train/wall_time_s", 0.0) for r in runs)
    from ablate.tracking.transfer import origin_id

    p = study.parent
    items = [f"Study `{study.name}` ({study.kind}), parent run `{origin_id(p['run_id'], p['tags'])}`, "
             f"{len(study.variants)} variants, {len(runs)} runs",
             f"Seeds: {', '.join(map(str, seeds)) or '—'}",
             f"Quality metric: `{study.primary}` "
             f"({'higher' if QUALITY[study.quality][2] else 'lower'} is better)",
             f"Total compute time (sum of run wall times): {fmt_duration(total)}"]
    if study.kind == "search":  # the tuner optimised its objectives; the quality metric is reported beside
        goals = ", ".join(f"`{m}` ({'maximise' if up else 'minimise'})" for m, up in search.objectives(study))
        items[2] = f"Objective: {goals}; also reported: `{study.primary}`"
    if p["params"].get("ablation.design"):
        items.insert(1, f"Design: `{p['params']['ablation.design']}`")
    items.append("Data, hardware, versions and the baseline's full spec: see the last section")
    blocks: list[Block] = [Bullets(items)]
    if study.dropped:
        blocks.append(Note(f"{study.dropped} superseded run(s) of an already covered (variant, seed) cell "
                           "were ignored (a retried cell keeps its best, latest run).", "info"))
    blocks += [Note(n, "info") for n in study.notes]
    return Section("Setup", blocks)


def environment_section(study: Study, env: dict[str, list[str]], datasets: list[list[str]]) -> Section:
    """The reference tables (data, hardware and versions, the baseline's every param), after the results."""
    runs = study.runs
    ref = study.of(study.baseline)[0].params if study.baseline else (runs[0].params if runs else {})
    data = sorted((k, v) for k, v in design_params(ref).items() if k.startswith("data.") and v != "null")
    data_rows = [[f"`{k}`", v] for k, v in data] + datasets
    padding = padding_text(study)
    if padding:
        data_rows.append(["padding (`data/padding_fraction`)", padding])
    blocks: list[Block] = []
    if data_rows:
        blocks.append(Table(["data", "value"], data_rows, "ll", "Data"))
    blocks.append(Table(["environment", "value"], environment.hardware_rows(env), "ll",
                        "Hardware, versions and code"))
    if ref:
        spec_rows = [[f"`{k}`", v] for k, v in sorted(design_params(ref).items())]
        title = f"Baseline spec ({study.baseline or 'first run'}): every resolved param"
        blocks.append(Table(["param", "value"], spec_rows, "ll", title, collapsed=True))
    return Section("Data, hardware and code", blocks)


def _params_of(study: Study, variant: str) -> float:
    """The variant's parameter count, from any of its runs that logged it (a failed run may not have)."""
    counts = [r.metrics["model/params"] for r in study.of(variant) if "model/params" in r.metrics]
    return counts[0] if counts else math.nan


def axes_section(study: Study) -> Section | None:
    if study.baseline is None:
        return None
    base = study.of(study.baseline)[0]
    axes: dict[str, set[str]] = {}
    rows = []
    for v in study.variants[1:]:
        other = study.of(v)[0]
        diff = spec_diff(base.params, other.params)
        for k, a, b in diff:
            axes.setdefault(k, {a}).add(b)
        dp = _params_of(study, v) - _params_of(study, study.baseline)
        text = "; ".join(f"`{k}`: {a} → {b}" for k, a, b in diff) or "no spec difference"
        rows.append([v, text, st.fmt(dp, 0, signed=True)])
    blocks: list[Block] = [Table(["axis", "values (baseline first)"],
                                 [[f"`{k}`", ", ".join([base.params.get(k, "—")] +
                                                       sorted(axes[k] - {base.params.get(k, "—")}))]
                                  for k in sorted(axes)], "ll", "Axes")]
    blocks.append(Table(["variant", "differs from the baseline in", "Δ params"], rows, "llr",
                        "What differs between variants (spec diff and parameter count)"))
    return Section("Axes and what differs", blocks)


def main_table(study: Study, summary: dict[str, dict[str, Any]]) -> Table:
    """Counts and the quality metrics per variant (the cost columns are in ``cost_table``)."""
    cols = [c for c in main_table_columns(study) if c[0] not in COST_COLUMNS]
    header = ["variant", "runs", "finished", "diverged", *[h for _, h, _ in cols]]
    rows = []
    for v in study.variants:
        s = summary[v]
        rows.append([v, str(s["runs"]), str(s["finished"]), str(s["diverged"]),
                     *[st.fmt_summary(s["metrics"][k], d) for k, _, d in cols]])
    return Table(header, rows, caption="Mean ± 95% t-interval half-width over the seeds of finished runs")


def cost_table(study: Study) -> Table | None:
    """Parameters, throughput, memory and wall time per variant; None when no run logged any of them."""
    cols = [c for c in main_table_columns(study) if c[0] in COST_COLUMNS]
    if not cols:
        return None
    rows = [[v, *[cost_cell([r.metrics[k] for r in study.finished(v) if k in r.metrics], d)
                  for k, _, d in cols]] for v in study.variants]
    return Table(["variant", *[h for _, h, _ in cols]], rows,
                 caption="Cost: mean over the seeds of finished runs (lowest–highest seed)")


def cost_cell(values: list[float], decimals: int) -> str:
    """Mean and the seeds' range: a cost is never negative, as a mean ± t-interval of two seeds can be."""
    finite = [x for x in values if math.isfinite(x)]
    if not finite:
        return "—"
    mean = st.fmt(sum(finite) / len(finite), decimals)
    lo, hi = st.fmt(min(finite), decimals), st.fmt(max(finite), decimals)
    return mean if lo == hi else f"{mean} ({lo}–{hi})"


def results_section(study: Study, summary: dict[str, dict[str, Any]], rows: list[EffectRow],
                    fig_dir: Path) -> list[Section]:
    blocks: list[Block] = []
    none = [v for v in study.variants if summary[v]["finished"] == 0]
    few = [v for v in study.variants if summary[v]["finished"] == 1]
    tiny = [(v, summary[v]["finished"]) for v in study.variants if 2 <= summary[v]["finished"] <= st.TINY]
    # Labels can hold commas (two axes changed); quoted and joined with ";" they stay readable.
    def names(labels: list[str]) -> str:
        return "; ".join(f"`{v}`" for v in labels)

    more = (f"Re-run with {st.TINY + 1} or more seeds (ablation.seeds)" if design_of(study) is None else
            "This study adds seeds itself where a verdict is still open (ablate ablate); meanwhile the "
            "summary judges it by the group-sequential test (Adaptive seeds)")
    if none:
        blocks.append(Note(f"no finished run for {names(none)}: every run diverged or failed, so "
                           "there is no quality to compare (see Divergence and failures)."))
    if few:
        blocks.append(Note(f"too few seeds: {names(few)} ha" + ("s" if len(few) == 1 else "ve")
                           + " a single finished run, so differences involving "
                           + ("it" if len(few) == 1 else "them") + " are reported without interval or "
                           f"test. {more} before drawing conclusions."))
    if tiny:
        blocks.append(Note(
            f"too few seeds to conclude: {'; '.join(f'`{v}` ({n})' for v, n in tiny)} ha"
            + ("s" if len(tiny) == 1 else "ve") + " only 2–3 finished seeds. Their effects get a bootstrap "
            "interval and an exact permutation p-value, and with 2–3 seeds on each side such a test cannot "
            "reach p < 0.05 (2 paired seeds: p ≥ 0.5; 3: p ≥ 0.25), so those effects are never called "
            f"significant. {more}."))
    blocks.append(main_table(study, summary))
    blocks += [t for t in [cost_table(study)] if t]
    out = [Section("Results", blocks)]
    if rows:
        eff_blocks: list[Block] = [Para(f"Each variant against `{study.baseline}` on `{study.primary}` "
                                        "(the summary at the top) and on `val/loss`.")]
        table_rows = []
        for r in rows:
            _, dec, _ = quality_meta(r.metric)
            e = r.effect
            ci = f"[{st.fmt(e.lo, dec, True)}, {st.fmt(e.hi, dec, True)}]" if e.tested else "—"
            ci += " bootstrap" if e.tested and e.interval == "bootstrap" else ""
            # The axis each variant changes is in the "What differs" table: left out here so the table fits.
            table_rows.append([r.variant, r.metric, st.fmt(e.diff, dec, True), ci,
                               e.test if e.tested else "—",
                               f"{e.n_base}/{e.n_variant}", st.fmt_p(e.p), st.fmt_p(r.p_holm)])
        header = ["variant", "metric", "Δ vs baseline", "95% CI", "test", "n (base/ var)", "p", "p (Holm)"]
        eff_blocks.append(Table(header, table_rows, "llrrlrrr", "Effects against the baseline (n: finished "
                                "seeds of the baseline / of the variant)"))
        prim = [r for r in rows if r.metric == study.primary]
        figs.forest_plot([(r.variant, r.effect.diff, r.effect.lo, r.effect.hi) for r in prim],
                         f"Δ {study.primary} vs {study.baseline} (95% CI)", fig_dir / "forest.png")
        eff_blocks.append(Figure("figures/forest.png", f"Effect of each variant on {study.primary} "
                                 "against the baseline (dot: difference of means; bar: 95% CI)"))
        eff_blocks.append(Para("Method: " + st.METHOD_NOTE))
        out.append(Section("Effects", eff_blocks))
    return out


def cost_points(study: Study, cost_key: str = "train/wall_time_s") -> list[figs.CostPoint]:
    """Per variant with finished runs: mean cost and quality, each with the range of its seeds (lowest to
    highest measured value, so a wall time's bar never reaches below zero), and whether it is on the
    Pareto front of the means."""
    q = study.primary
    found = []
    for v in study.variants:
        runs = [r for r in study.finished(v) if cost_key in r.metrics and q in r.metrics
                and math.isfinite(r.metrics[cost_key]) and math.isfinite(r.metrics[q])]
        if runs:
            xs, ys = [r.metrics[cost_key] for r in runs], [r.metrics[q] for r in runs]
            found.append((v, sum(xs) / len(xs), min(xs), max(xs), sum(ys) / len(ys), min(ys), max(ys)))
    front = st.pareto_front([p[1] for p in found], [p[4] for p in found], QUALITY[study.quality][2])
    return [figs.CostPoint(*p, on_front=f) for p, f in zip(found, front, strict=True)]


def cost_section(study: Study, fig_dir: Path) -> Section | None:
    q = study.primary
    pts = cost_points(study)
    if not pts:
        return None
    figs.quality_vs_cost(pts, "wall time (s)", q, fig_dir / "quality_vs_cost.png")
    on = [p.label for p in pts if p.on_front]
    return Section("Quality vs cost", [
        Figure("figures/quality_vs_cost.png", f"{q} against wall time per variant (mean over finished seeds; "
               "bars: lowest to highest seed); the Pareto front is joined"),
        Para("On the Pareto front (no other variant is both cheaper and better): " + ", ".join(on) + ".")])


def curves_section(study: Study, fig_dir: Path) -> Section | None:
    from ablate.tracking.read import metric_history

    metrics = ["train/loss", "val/loss"] + ([f"val/{study.quality}"] if study.quality != "loss" else [])
    curves: dict[str, dict[str, list[list[tuple[int, float]]]]] = {}
    for v in study.variants:
        for r in study.finished(v):
            for m in metrics:
                curves.setdefault(v, {}).setdefault(m, []).append(metric_history(r.run_id, m))
    if not curves:
        return None
    figs.learning_curves(curves, metrics, fig_dir / "learning_curves.png")
    blocks: list[Block] = [Figure("figures/learning_curves.png",
                                  "Per variant (own colour, line style and marker): mean over seeds, band = "
                                  "min to max across seeds (finished runs)")]
    for group in figs.overlapping_variants(curves, metrics):
        blocks.append(Note(f"{', '.join(group)} have identical curves in every seed: their lines lie on top "
                           "of each other (told apart by line style and marker only).", "info"))
    return Section("Learning curves", blocks)


def failures_section(study: Study) -> Section:
    bad = [r for r in study.runs if r.status != "finished"]
    if not bad:
        return Section("Divergence and failures", [Para(f"All {len(study.runs)} runs finished.")])
    from ablate.tracking.read import metric_history

    rows = []
    for r in bad:
        history = metric_history(r.run_id, "train/loss")
        loss = history[-1][1] if history else r.metrics.get("train/loss", math.nan)
        step = str(history[-1][0]) if history else "—"
        reason = r.tags.get("ablate.reason") or r.tags.get("ablate.error") or ""
        shown = st.fmt(loss, 4) if loss < 1e8 else f"{loss:.3g}"  # the trainer logs 1e9 for a non-finite loss
        rows.append([r.variant, str(r.seed), r.status, step, shown, reason])
    return Section("Divergence and failures", [
        Note(f"{len(bad)} of {len(study.runs)} runs ended {', '.join(sorted({r.status for r in bad}))}: "
             "they are counted in the main table and left out of its means."),
        Table(["variant", "seed", "status", "last step", "last train/loss", "reason"], rows, "lrlrrl")])


# ---------------------------------------------------------------- the command
def build_report(study: Study, out_dir: Path) -> Path:
    """Write the report files for ``study`` into ``out_dir``; returns the markdown path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fig_dir = out_dir / "figures"
    if fig_dir.exists():
        shutil.rmtree(fig_dir)  # a rerun must not keep figures the new report no longer has
    fig_dir.mkdir()
    env = environment.environment(study)
    datasets = environment.study_dataset_rows(study)
    doc = Document(f"{study.kind.capitalize()} report: {study.name}", stamp())
    setup = setup_section(study)
    if len(datasets) > len({row[1].split(" (digest")[0] for row in datasets}):
        setup.blocks.append(Note("the runs did not all train on the same data: the dataset digests "
                                 "differ between seeds or variants (listed per group in the Data table at "
                                 "the end)."))
    doc.sections.append(setup)
    from ablate.tracking.transfer import origin_id  # an imported study shows the id it was exported with

    parent_id = origin_id(study.parent["run_id"], study.parent["tags"])
    data: dict[str, Any] = {"study": study.name, "kind": study.kind, "parent_run_id": parent_id,
                            "datasets": [row[1] for row in datasets]}
    if study.kind == "search":
        doc.intro += search.search_summary(study)
        doc.sections += search.search_sections(study, fig_dir, data)
    else:
        summary = summarise(study)
        rows = effects(study)
        factorial_rows = factorial_effects(study)
        bounds = at_bounds(study, study.primary)
        warnings = [bound_text(b) for b in bounds]
        for r in rows:
            if r.metric == study.primary:
                r.verdict += bound_suffix(bounds, r.variant, study.baseline)
        doc.intro += published.published_checks(study, rows, data)  # first: what the study set out to check
        doc.intro += [Note(w) for w in warnings]
        sequential = sequential_summary(study)
        if sequential is not None:  # the verdicts the study stopped by, as in its Adaptive seeds section
            doc.intro += [Para(f"**Summary** on `{decided_metric(study)}`, each variant against "
                               f"`{study.baseline}`, by the group-sequential test this study chose its seeds "
                               "by (see Adaptive seeds below):"), Bullets(sequential)]
        elif verdicts := [r.verdict for r in rows if r.metric == study.primary]:
            doc.intro += [Para(f"**Summary** on `{study.primary}`, each variant against `{study.baseline}` "
                               "(details, tests and caveats below):"), Bullets(verdicts)]
        if factorial_rows:
            fixed = "; fixed-sample tests, blind to the adaptive stopping" if sequential is not None else ""
            doc.intro += [Para("**Main effects and interactions** (full factorial, cells matched by seed and "
                               f"the other axes{fixed}):"),
                          Bullets([r.verdict for r in factorial_rows if r.metric == study.primary])]
        data["warnings"] = warnings
        doc.sections += [s for s in [axes_section(study)] if s]
        doc.sections += results_section(study, summary, rows, fig_dir)
        doc.sections += [s for s in [seeds_section(study, data)] if s]
        doc.sections += [s for s in [factorial.factorial_section(study, factorial_rows, fig_dir)] if s]
        extras = (curves_section(study, fig_dir), cost_section(study, fig_dir))
        doc.sections += [s for s in extras if s]
        data |= {"baseline": study.baseline, "primary_metric": study.primary,
                 "variants": {v: {**{k: s[k] for k in ("runs", "finished", "diverged", "failed", "pruned",
                                                      "seeds")},
                                  "metrics": {k: {"n": m.n, "mean": m.mean, "half_width": m.half_width}
                                              for k, m in s["metrics"].items()}} for v, s in summary.items()},
                 "effects": [{"variant": r.variant, "axis": r.axis, "metric": r.metric, "diff": r.effect.diff,
                              "lo": r.effect.lo, "hi": r.effect.hi, "p": r.effect.p, "p_holm": r.p_holm,
                              "test": r.effect.test, "n_base": r.effect.n_base,
                              "n_variant": r.effect.n_variant, "interval": r.effect.interval,
                              "verdict": r.verdict} for r in rows],
                 "factorial": [{"kind": r.kind, "label": r.label, "metric": r.metric, "diff": r.effect.diff,
                                "lo": r.effect.lo, "hi": r.effect.hi, "p": r.effect.p, "p_holm": r.p_holm,
                                "test": r.effect.test, "interval": r.effect.interval, "n": r.effect.n_min,
                                "incomplete": r.incomplete, "verdict": r.verdict} for r in factorial_rows]}
    doc.sections.append(failures_section(study))
    att = attention.attention_section(study, fig_dir)
    if att is not None:
        doc.sections.append(att)
    doc.sections.append(environment_section(study, env, datasets))
    (out_dir / "report.md").write_text(render_markdown(doc))
    (out_dir / "report.html").write_text(render_html(doc, out_dir))
    write_runs_csv(study, out_dir / "runs.csv")
    (out_dir / "report.json").write_text(json.dumps(_clean(data), indent=2, sort_keys=True) + "\n")
    return out_dir / "report.md"


def main_report(study: str, out: str | None = None) -> int:
    """`ablate report STUDY [--out DIR]`: STUDY is a study name or the parent run id."""
    from ablate.tracking.read import log_report_artifacts

    loaded = load_study(study)
    out_dir = Path(out) if out else Path("reports") / loaded.name
    md = build_report(loaded, out_dir)
    n_fig = len(list((out_dir / "figures").glob("*.png")))
    try:
        log_report_artifacts(loaded.parent["run_id"], out_dir)
        logged = f"; logged under report/ in run {loaded.parent['run_id']}"
    except Exception as exc:  # noqa: BLE001 - the files are written; a read-only store must not lose them
        logged = f"; could not log it to MLflow ({type(exc).__name__}: {exc})"
    print(f"report: {md} and {out_dir / 'report.html'} ({len(loaded.runs)} runs, {n_fig} figures){logged}")
    return 0 if "could not" not in logged else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main_report(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
