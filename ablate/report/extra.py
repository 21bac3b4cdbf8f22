"""Report sections beyond the ablation tables: environment, full-factorial effects, search studies,
attention heat maps.

Search studies are read from what ``ablate/tune`` logged (this module never imports optuna): child runs
tagged ``ablate.trial`` (trial number) and ``ablate.kind: trial``, the objectives in the parent's
``search.objectives`` param, the tuner's best trial in its ``ablate.best_trial`` tag, and the parameter
importances in the parent's ``importance.json`` artifact (``{"evaluator", "importances": {objective: ...}}``).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import ablate.tracking.record as R
from ablate.report import figures as figs
from ablate.report import stats as st
from ablate.report.render import Block, Figure, Note, Para, Section, Table

if TYPE_CHECKING:
    from ablate.report.data import FactorialRow, Run, Study

TRIAL_TAGS = (R.TRIAL, "optuna.trial_number")
IMPORTANCES = (R.IMPORTANCE_ARTIFACT,)  # what ablate/study/results.py logs (one name, one artifact)
TOP_TRIALS = 10


# ---------------------------------------------------------------- environment
# Tags every run carries -> the label shown; hardware first, then the software, then the code.
ENV_TAGS = {R.DEVICE: "device", R.CPU: "CPU", R.HOST: "host"}
CODE_TAGS = {R.GIT_COMMIT: "git commit", R.GIT_DIRTY: "uncommitted changes"}
# environment.json keys (the first run's) shown when no tag says the same.
ENV_JSON = {"cpu": "CPU", "cpu_count": "CPU cores (logical)", "gpu": "GPU", "platform": "platform"}
ORDER = ["device", "CPU", "CPU cores (logical)", "GPU", "host", "platform"]


def environment(study: Study) -> dict[str, list[str]]:
    """Distinct values across the runs of every environment tag, plus what the first run's
    environment.json adds (CPU model, core count, platform). Absent entries are simply not shown."""
    from ablate.tracking.read import read_text_artifact

    env: dict[str, set[str]] = {}
    for r in study.runs:
        for tag, value in r.tags.items():
            version = tag.startswith("ablate.version.")
            label = ENV_TAGS.get(tag) or CODE_TAGS.get(tag) or (
                tag.removeprefix("ablate.version.") + " version" if version else None)
            if label and value:
                env.setdefault(label, set()).add(value)
    if study.runs:
        text = read_text_artifact(study.runs[0].run_id, "environment.json")
        try:
            found = json.loads(text) if text else {}
        except ValueError:
            found = {}
        for key, shown in ENV_JSON.items():
            recorded = found.get(key) if isinstance(found, dict) else None
            if recorded not in (None, "") and shown not in env:
                env[shown] = {str(recorded)}
    return {k: sorted(v) for k, v in env.items()}


def hardware_rows(env: dict[str, list[str]]) -> list[list[str]]:
    """Hardware rows first (device, CPU, cores, host), then versions, then the code's commit."""
    code = list(CODE_TAGS.values())

    def rank(k: str) -> tuple[int, int, str]:
        return (0, ORDER.index(k), k) if k in ORDER else (2, code.index(k), k) if k in code else (1, 0, k)

    rows = [[k, "; ".join(env[k])] for k in sorted(env, key=rank)]
    return rows or [["(none recorded)", "—"]]


# ---------------------------------------------------------------- full-factorial designs
def factorial_section(study: Study, rows: list[FactorialRow], fig_dir: Path) -> Section | None:
    """Main effects and interactions of a full-factorial study, with a cell-means grid for two axes."""
    from ablate.report.data import cell_means, quality_meta

    if not rows:
        return None
    blocks: list[Block] = [Para(
        "A main effect compares each axis value with the baseline's value of that axis over cells matched "
        "on every other axis and on the seed (one difference per matched pair, so it averages over the "
        "other axes). An interaction `A=a × B=b` is the effect of A=a (against the baseline's A) when B=b "
        "minus its effect when B has the baseline's value: zero when the axes act independently.")]
    grid = cell_means(study, study.primary)
    if grid is not None:
        _, dec, _ = quality_meta(study.primary)

        def cell(va: str, vb: str) -> str:
            bad = grid.unfinished[(va, vb)]
            return st.fmt_summary(grid.means[(va, vb)], dec) + (f" ({bad} unfinished)" if bad else "")

        (a, b) = grid.axes
        blocks.append(Table(["", *[f"{b}={vb}" for vb in grid.cols]],
                            [[f"{a}={va}", *[cell(va, vb) for vb in grid.cols]] for va in grid.rows],
                            caption=f"{study.primary} per cell: mean ± 95% t-interval half-width over "
                                    "finished seeds (the baseline's values first)"))
    table_rows = []
    for r in rows:
        _, dec, _ = quality_meta(r.metric)
        e = r.effect
        ci = f"[{st.fmt(e.lo, dec, True)}, {st.fmt(e.hi, dec, True)}]" if e.tested else "—"
        if e.tested and e.interval == "bootstrap":
            ci += " bootstrap"
        table_rows.append([r.label, r.metric, st.fmt(e.diff, dec, True), ci, e.test if e.tested else "—",
                           str(e.n_min), str(r.incomplete), st.fmt_p(e.p), st.fmt_p(r.p_holm)])
    blocks.append(Table(["comparison", "metric", "Δ", "95% CI", "test", "n", "incomplete", "p", "p (Holm)"],
                        table_rows, "llrrlrrrr", "Main effects and interactions"))
    prim = [r for r in rows if r.metric == study.primary]
    figs.forest_plot([(r.label, r.effect.diff, r.effect.lo, r.effect.hi) for r in prim],
                     f"Δ {study.primary} (95% CI)", fig_dir / "factorial.png")
    blocks.append(Figure("figures/factorial.png", f"Main effects and interactions on {study.primary} "
                         "(dot: mean matched difference; bar: 95% CI)"))
    return Section("Factorial effects", blocks)


# ---------------------------------------------------------------- search studies
def objectives(study: Study) -> list[tuple[str, bool]]:
    """[(metric, maximize)] from the parent's ``search.objectives`` param (JSON), else val/loss minimised."""
    raw = study.parent["params"].get("search.objectives")
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    if isinstance(parsed, list) and parsed and all(isinstance(o, dict) and "metric" in o for o in parsed):
        return [(str(o["metric"]), o.get("direction") == "maximize") for o in parsed]
    return [("val/loss", False)]


def trial_number(run: Run, fallback: int) -> int:
    for tag in TRIAL_TAGS:
        value = run.tags.get(tag, "")
        if value.isdigit():
            return int(value)
    return fallback


def importances(study: Study, objective: str) -> tuple[str, list[tuple[str, float]]]:
    """(evaluator, sorted (field, importance)) of ``objective`` from the tuner's importance.json.

    tune.py logs ``{"evaluator": name, "importances": {objective: {field: value}}}``; a plain
    ``{field: value}`` is accepted too.
    """
    from ablate.tracking.read import read_text_artifact

    text = None
    for name in IMPORTANCES:
        text = read_text_artifact(study.parent["run_id"], name)
        if text:
            break
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        data = {}
    evaluator = str(data.get("evaluator", "")) if isinstance(data, dict) else ""
    found = data.get("importances", data) if isinstance(data, dict) else {}
    if isinstance(found, dict) and found and all(isinstance(v, dict) for v in found.values()):
        found = found.get(objective) or found[sorted(found)[0]]
    if not isinstance(found, dict):
        return evaluator, []
    pairs = [(str(k), float(v)) for k, v in found.items() if isinstance(v, int | float)]
    return evaluator, sorted(pairs, key=lambda kv: (-kv[1], kv[0]))


def _shown(text: str) -> str:
    """Sampled floats at 4 significant digits (0.008558894657793087 -> 0.008559); other values as logged."""
    try:
        number = float(text)
    except ValueError:
        return text
    return text if number.is_integer() or len(text) <= 8 else f"{number:.4g}"


def _value(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def search_sections(study: Study, fig_dir: Path, data: dict[str, Any]) -> list[Section]:
    from ablate.report.data import design_params

    objs = objectives(study)
    metric, maximize = objs[0]
    trials = sorted(((trial_number(r, i), r) for i, r in enumerate(study.runs)), key=lambda t: t[0])
    keys = sorted({k for _, r in trials for k in design_params(r.params)})
    varied = [k for k in keys if len({r.params.get(k) for _, r in trials}) > 1]
    counts = {s: sum(1 for _, r in trials if r.status == s) for s in sorted({r.status for _, r in trials})}
    p = study.parent["params"]
    goals = ", ".join(f"`{m}` ({'max' if mx else 'min'}imise)" for m, mx in objs)
    overview: list[Block] = [Para(
        f"{len(trials)} trials ({', '.join(f'{n} {s}' for s, n in counts.items())}); objective"
        f"{'s' if len(objs) > 1 else ''}: " + goals
        + (f"; sampler `{p['search.sampler']}`" if "search.sampler" in p else "")
        + (f"; pruner `{p['search.pruner.name']}`" if "search.pruner.name" in p else "")
        + (f"; best trial (tuner): {best_tag}" if (best_tag := study.parent["tags"].get("ablate.best_trial"))
           else "") + ".")]
    done = [(n, r) for n, r in trials if r.status == "finished" and metric in r.metrics]
    if len(done) < len(trials):
        overview.append(Note(f"{len(trials) - len(done)} trial(s) were pruned, diverged or failed: they are "
                             "left out of the ranking (their last values are not comparable).", "info"))
    ranked = sorted(done, key=lambda t: ((-1 if maximize else 1) * t[1].metrics[metric], t[0]))
    obj_cols = [m for m, _ in objs]
    # model/params: a sampled component can change the parameter count, so the ranking shows it.
    extra = [k for k in (f"test/{study.quality}", "train/wall_time_s", "model/params")
             if k not in obj_cols and any(k in r.metrics for _, r in done)]
    shown_metrics = obj_cols + extra
    rows = [[str(i + 1), str(n), r.variant,
             *[st.fmt(r.metrics.get(m, math.nan), 0 if m == "model/params" else 4) for m in shown_metrics],
             *[_shown(r.params.get(k, "—")) for k in varied]]
            for i, (n, r) in enumerate(ranked[:TOP_TRIALS])]
    best = Table(["rank", "trial", "run", *obj_cols, *extra, *[f"`{k}`" for k in varied]], rows,
                 "rrl" + "r" * len(obj_cols + extra) + "l" * len(varied),
                 f"Top {min(TOP_TRIALS, len(ranked))} finished trials by {metric}")
    best_blocks: list[Block] = [best]
    if len(objs) == 2:
        (m0, max0), (m1, max1) = objs
        both = [(n, r) for n, r in done if m1 in r.metrics]
        # Objective 0 as a cost (lower is better after the sign flip), objective 1 as the quality.
        front = st.pareto_front([-r.metrics[m0] if max0 else r.metrics[m0] for _, r in both],
                                [r.metrics[m1] for _, r in both], higher_quality_is_better=max1)
        on = [str(n) for (n, _), f in zip(both, front, strict=True) if f]
        best_blocks.append(Para(f"Pareto front of `{m0}` and `{m1}`: trials {', '.join(on) or '—'}."))
        data["pareto_trials"] = [int(n) for n in on]
    sections = [Section("Search", overview), Section("Best trials", best_blocks)]
    evaluator, imp = importances(study, metric)
    if imp:
        figs.importances_bar(imp, fig_dir / "importances.png")
        by = f" ({evaluator})" if evaluator else ""
        imp_blocks: list[Block] = [
            Table(["param", "importance"], [[f"`{k}`", f"{v:.4f}"] for k, v in imp], "lr",
                  f"Importance of each searched parameter for {metric}{by}, as logged by the tuner"),
            Figure("figures/importances.png", f"Parameter importances for {metric}{by}")]
    else:
        imp_blocks = [Note(f"the parent run has no {IMPORTANCES[0]} (too few complete trials?): no parameter "
                           "importances to show.", "info")]
    sections.append(Section("Parameter importances", imp_blocks))
    figs.optimisation_history([(n, r.metrics[metric]) for n, r in done], metric, maximize,
                              fig_dir / "optimisation_history.png")
    plots: list[Block] = [Figure("figures/optimisation_history.png",
                                 f"{metric} per finished trial and the best so far")]
    if varied and len(done) >= 2:
        table = [[_value(r.params.get(k, "")) for k in varied] for _, r in done]
        figs.parallel_coordinates(varied, table, [r.metrics[metric] for _, r in done], metric,
                                  fig_dir / "parallel_coords.png")
        plots.append(Figure("figures/parallel_coords.png",
                            f"Parallel coordinates of the searched parameters, coloured by {metric}"))
    sections.append(Section("Optimisation history", plots))
    data.update({"objectives": [{"metric": m, "maximize": mx} for m, mx in objs],
                 "importances": dict(imp), "importance_evaluator": evaluator,
                 "trials": [{"number": n, "run": r.variant, "status": r.status,
                             "values": {m: r.metrics.get(m) for m in obj_cols},
                             "params": {k: r.params.get(k) for k in varied}} for n, r in trials],
                 "best_trial": ranked[0][0] if ranked else None})
    return sections


# ---------------------------------------------------------------- attention heat maps
def attention_section(study: Study, fig_dir: Path) -> Section | None:
    """Heat maps for one sample when a finished run used ``model.attention: explicit``; never fatal."""
    candidates = [r for r in study.runs
                  if r.status == "finished" and r.params.get("model.attention") == "explicit"]
    if not candidates:
        return None
    run = candidates[0]
    try:
        caption = draw_attention(run.run_id, fig_dir / "attention.png")
    except Exception as exc:  # noqa: BLE001 - an optional figure: report why, keep the report
        why = f"{type(exc).__name__}: {exc}"
        return Section("Attention", [Note(f"attention maps of run {run.variant} (seed {run.seed}) could not "
                                          f"be drawn: {why}", "info")])
    return Section("Attention", [Figure("figures/attention.png",
                                        f"{run.variant}, seed {run.seed}: {caption}")])


def draw_attention(run_id: str, path: Path) -> str:
    import torch

    from ablate.data.prepare import prepare_data
    from ablate.engine.model import build_model
    from ablate.engine.train import load_checkpoint
    from ablate.spec.load import load_spec
    from ablate.tracking.read import download_artifact

    with tempfile.TemporaryDirectory() as tmp:
        spec_file = download_artifact(run_id, "spec.yaml", tmp)
        ckpt_file = download_artifact(run_id, "checkpoints/best.pt", tmp)
        if spec_file is None or ckpt_file is None:
            raise FileNotFoundError("the run has no spec.yaml or checkpoints/best.pt artifact")
        spec = load_spec(spec_file, check_hardware=False)  # a finished run: read, not trained here
        state = load_checkpoint(ckpt_file)["model"]
    data = prepare_data(spec)
    tok = data.tokenizers
    model = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=spec.seed)
    model.load_state_dict(state)
    split_name = "test" if "test" in data.splits and data.splits["test"].src_ids else "val"
    split = data.splits[split_name]
    # The longest of the first 100 sentences that still fits a readable map (<= 24 tokens each side).
    fits = [i for i in range(min(100, len(split.src_ids)))
            if len(split.src_ids[i]) <= 24 and len(split.tgt_ids[i]) <= 23]
    pick = max(fits or [0], key=lambda i: (len(split.src_ids[i]) + len(split.tgt_ids[i]), -i))
    src_ids, tgt_ids = list(split.src_ids[pick]), [tok.bos_id, *split.tgt_ids[pick]]
    maps = model.attention_maps(torch.tensor([src_ids]), torch.tensor([tgt_ids]))
    src_labels = [_token(tok.decode_src, i, tok) for i in src_ids]
    tgt_labels = [_token(tok.decode_tgt, i, tok) for i in tgt_ids]
    # The last layer, averaged over heads: (heads, Tq, Tk) -> (Tq, Tk).
    last = {k: np.asarray(v[-1].float().mean(0).cpu()) for k, v in maps.items()}
    labels = {"encoder_self": (src_labels, src_labels), "decoder_self": (tgt_labels, tgt_labels),
              "cross": (tgt_labels, src_labels)}
    figs.attention_heatmaps(last, labels, path)
    return (f"attention of the last layer (mean over heads) on {split_name} sentence {pick}; "
            "encoder self, decoder self, cross (queries: target prefix, keys: source)")


def _token(decode: Any, i: int, tok: Any) -> str:
    special = {tok.pad_id: "<pad>", tok.bos_id: "<s>", tok.eos_id: "</s>", tok.unk_id: "<unk>"}
    if i in special:
        return special[i]
    text = str(decode([i])).strip()
    return text or f"#{i}"
