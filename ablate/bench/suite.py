"""`ablate bench`: train-step and decode throughput of every variant, next to torch.nn.Transformer.

What is measured, all in one process on the same synthetic batches:

* **train**: target tokens/s of forward + backward + clip + optimizer step (warm-up excluded, median of the
  per-step rates) for the spec's variant ("default") and for every registered name of every axis (the other
  components as the spec's), in fp32 and, where there are bf16 units (CPU AVX512-BF16/AMX, CUDA), in bf16
  autocast; the same for ``torch.nn.Transformer`` with the same dimensions, batches, padding and masks.
* **peak memory** of model + optimizer + step: CUDA max allocated, or on CPU the resident-set high-water mark
  (reset through ``/proc/self/clear_refs``) minus the resident set before the model was built.
* **MFU**: achieved model FLOP/s over this machine's measured matmul peak (best of several n x n
  ``torch.matmul``, fp32 for fp32 rows, bf16 for bf16 rows). Model FLOPs of one training step count
  multiply-accumulates (MACs) on the real (non-pad) tokens, x2 FLOPs per MAC, x3 for forward + backward::

      MACs = S*Le*(4d^2 + 2*d*d_ff) + T*Ld*(8d^2 + 2*d*d_ff) + T*d*V           (dense: "N params x tokens")
           + 2*d*(Le*sum(s_i^2) + Ld*sum(t_i^2 + t_i*s_i))                  (QK^T and AV of every layer)
      FLOPs = 6 * MACs

  S, T: source / target tokens of the batch; s_i, t_i: per-sentence lengths; Le, Ld: layers; V: vocabulary.
  Padding and the causal half of decoder self-attention are not credited, so both models get the same count.
* **decode**: sentences/s of greedy, batched beam 4 (KV cache) and the tutorials' per-sentence re-decoding
  beam (``ablate.bench.tutorial_beam``, on a subset: it is slow; the speed-up compares both beams on that
  subset); both beams must return identical hypotheses on a tiny trained model (``decode.identical``).
* **decoder-only**: training tokens/s and MFU of the decoder-only language model with the same sizes, for
  every position scheme, on packed blocks, against the same matmul peak (``ablate/bench/lm_speed.py``);
  and its KV cache while decoding, for every ``model.kv_heads`` that divides the heads: the bytes held per
  token, the share of multi-head attention's and the decoding speed (``ablate/bench/kv_cache.py``).
* **framework overhead**: `ablate run`'s training (``Trainer`` with MLflow tracking on, in a temporary sqlite
  store, and the spec's checkpointing) against a bare loop of the same step on the same batches, each event
  timed and projected to the spec's eval/checkpoint cadence and run length; tracking on vs off; evaluation
  time reported apart (method: ``ablate/bench/overhead.py``).

Throughput needs a quiet machine: on shared cores the figures are noise (``machine.busy`` flags a load
average above half the cores, read before the bench starts: its own threads raise it afterwards). There,
``--set train.threads=1`` gives steadier ratios: with several threads every op waits at a thread barrier for
a core the other processes hold. The train settings the bench reads: ``train.threads`` (0: torch's default),
and for the overhead ``eval_every``, ``checkpoint_every`` and ``max_steps`` (the cadence and run length it
projects to) and the ``tracking`` options (its store is always a temporary one).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from ablate.bench.decode_speed import beam_agreement, bench_decode
from ablate.bench.kv_cache import bench_kv_cache, kv_lines
from ablate.bench.lm_speed import LM_FLOP_FORMULA, bench_lm, lm_lines
from ablate.bench.overhead import framework_overhead
from ablate.bench.train_speed import (
    BUILTIN_MODEL,
    FLOP_FORMULA,
    MEMORY_METHOD,
    PAD,
    QUICK,
    QUICK_MODEL,
    BenchConfig,
    bench_training,
    log,
    matmul_peak,
    synthetic_batches,
)
from ablate.engine.builders import build_model
from ablate.hardware import cpu_has_fast_bf16, cuda_has_native_bf16, prepare_device
from ablate.spec import metricnames
from ablate.spec.experiment import ExperimentSpec, ModelSpec
from ablate.spec.load import apply_overrides, load_spec, validate_data

__all__ = ["BenchConfig", "format_table", "main_bench", "run_bench", "targets"]


# ---------------------------------------------------------------- the whole benchmark
def resolve_config(spec_path: str | None, overrides: list[str], quick: bool
                   ) -> tuple[ExperimentSpec, BenchConfig]:
    """The spec to bench (a file, or the built-in bench model) and the measurement settings.

    From a file: its model, batch_tokens and vocabulary size; --quick keeps its components at tiny dims.
    """
    cfg = QUICK if quick else BenchConfig()
    if spec_path is None:
        data = apply_overrides({"name": "bench", "model": dict(QUICK_MODEL if quick else BUILTIN_MODEL),
                                "data": {"batch_tokens": cfg.batch_tokens}}, overrides)
        spec = validate_data(data, None, "bench (built-in config)")
        return spec, replace(cfg, batch_tokens=spec.data.batch_tokens)
    spec = load_spec(spec_path, overrides)
    if quick:
        tiny = ModelSpec.model_validate(spec.model.model_dump() | QUICK_MODEL)
        return spec.model_copy(update={"model": tiny}), cfg
    synthetic = spec.data.synthetic if spec.data.source == "synthetic" else None
    vocab = synthetic.vocab_size if synthetic else spec.data.tokenizer.vocab_size
    return spec, replace(cfg, batch_tokens=spec.data.batch_tokens, vocab=vocab)


def load_average() -> float:
    """The 1-minute load average (0 where the platform has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def machine_info(device: torch.device, peaks: dict[str, float], load: float) -> dict[str, Any]:
    """The machine the figures were measured on; ``load``: the load average before the bench ran (read
    after it, a 2-core machine is always "busy" with the bench's own two threads)."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    if device.type == "cpu":
        try:
            lines = Path("/proc/cpuinfo").read_text().splitlines()
            name = next(x.split(":", 1)[1].strip() for x in lines if x.startswith("model name"))
        except (OSError, StopIteration):
            pass
    return {"device": str(device), "name": name, "platform": platform.platform(), "torch": torch.__version__,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "load_average_1m": load,
            "busy": load > 0.5 * (os.cpu_count() or 1), "bf16": "bf16" in peaks,
            "matmul_peak_flops": peaks, "memory_method": MEMORY_METHOD[device.type]}


def run_bench(spec: ExperimentSpec, cfg: BenchConfig) -> dict[str, Any]:
    load_before = load_average()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    prepare_device(device)  # as `ablate run` trains: so the timed steps are a run's
    if spec.train.threads:
        torch.set_num_threads(spec.train.threads)
    bf16 = cuda_has_native_bf16() if device.type == "cuda" else cpu_has_fast_bf16()
    precisions = ["fp32", "bf16"] if bf16 else ["fp32"]
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    log(f"matmul peak ({cfg.matmul_n}^3) on {device}")
    peaks = {p: matmul_peak(dtypes[p], cfg.matmul_n, device) for p in precisions}
    base = spec.model
    batches, padding = synthetic_batches(cfg, spec.seed)
    timers = bench_training(base, cfg, device, precisions, batches)
    # The peak is the best of a measurement before and after the steps (it is a maximum, load only lowers it).
    peaks = {p: max(peaks[p], matmul_peak(dtypes[p], cfg.matmul_n, device)) for p in precisions}
    rows: list[dict[str, Any]] = []
    for label, timer in timers:
        for p in precisions:
            result = timer.result(p)
            rows.append({"variant": label, "precision": p, **result,
                         "mfu": result.pop("flops_per_s") / peaks[p]})
    baseline = [r for r in rows if r["variant"] == "torch.nn.Transformer"]
    rows = [r for r in rows if r["variant"] != "torch.nn.Transformer"]
    torch_tps = {r["precision"]: r["tokens_per_s"] for r in baseline}
    default_tps = {r["precision"]: r["tokens_per_s"] for r in rows if r["variant"] == "default"}
    for r in rows:
        r["ratio_vs_torch"] = r["tokens_per_s"] / torch_tps[r["precision"]]
        r["ratio_vs_default"] = r["tokens_per_s"] / default_tps[r["precision"]]
    del timers
    lm_rows = bench_lm(base, cfg, device, precisions, peaks)  # the decoder-only stack, same peak
    kv_rows = bench_kv_cache(base, cfg, device)  # decoding memory by kv_heads (MHA, GQA, MQA)
    with tempfile.TemporaryDirectory(prefix="ablate-bench-") as tmp:
        log(f"framework overhead ({cfg.overhead_steps} steps x 3 arms, MLflow in a temporary sqlite store)")
        overhead, data, ospec = framework_overhead(spec, cfg, device, tmp)
        log("decoding")
        tok = data.tokenizers
        fresh = build_model(ospec.model, tok.src_vocab_size, tok.tgt_vocab_size, tok.pad_id, seed=1)
        decode = bench_decode(fresh.to(device), data.splits["test"].src_ids, cfg,
                              ospec.eval.decode.length_penalty, device)
        log("beam agreement (tiny trained model)")
        decode |= beam_agreement(base, cfg, device, tmp)
    config = {"spec": spec.name, "model": {k: getattr(base, k) for k in (*BUILTIN_MODEL, "dropout",
                                                                      "residual", "positions", "ffn", "norm",
                                                                      "mask", "attention")},
              "vocab": cfg.vocab, "batches": [list(b.tgt_out.shape) for b in batches],
              "mean_target_tokens": statistics.mean(int(b.tgt_out.ne(PAD).sum()) for b in batches),
              "target_padding_fraction": padding, "bench": asdict(cfg), "flops_formula": FLOP_FORMULA,
              "timing": f"median of {cfg.iters} steps after {cfg.warmup} warm-up steps per model and "
                        "precision; steps of all rows interleaved round-robin"}
    doc = {"machine": machine_info(device, peaks, load_before), "config": config, "train": rows,
           "torch_nn_transformer": [{k: v for k, v in r.items() if k != "variant"} for r in baseline],
           "decode": decode, "framework_overhead": overhead, "lm_train": lm_rows, "kv_cache": kv_rows,
           "lm_flops_formula": LM_FLOP_FORMULA}
    doc["targets"] = targets(doc)
    return doc



SLOW_BY_DESIGN = ("attention=explicit", "norm=custom")


def targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's performance targets, checked against this run's figures (informative, never asserted)."""
    fp32 = [r for r in doc["train"] if r["precision"] == "fp32"]
    default = {r["precision"]: r for r in doc["train"] if r["variant"] == "default"}
    others = [r for r in fp32 if r["variant"] != "default" and r["variant"] not in SLOW_BY_DESIGN]
    out = [{"name": "default vs torch.nn.Transformer, fp32", "value": default["fp32"]["ratio_vs_torch"],
            "target": 1.15}]
    if others:
        slowest = min(others, key=lambda r: r["ratio_vs_default"])
        out.append({"name": f"slowest variant vs default, fp32 ({slowest['variant']})",
                    "value": slowest["ratio_vs_default"], "target": 0.9})
    if "bf16" in default:
        out.append({"name": "bf16 vs fp32, default", "target": 1.3,
                    "value": default["bf16"]["tokens_per_s"] / default["fp32"]["tokens_per_s"]})
    overhead = doc["framework_overhead"]
    out.append({"name": "framework overhead in ablate run (fraction, at most)", "target": 0.05,
                "at_most": True, "value": overhead["overhead_fraction"]})
    out.append({"name": "MLflow tracking on vs off (fraction, at most)", "target": 0.03, "at_most": True,
                "value": overhead["tracking"]["overhead_fraction"]})
    for t in out:
        t["met"] = t["value"] <= t["target"] if t.get("at_most") else t["value"] >= t["target"]
    return out


def format_table(doc: dict[str, Any]) -> str:
    m, c, d, o = doc["machine"], doc["config"], doc["decode"], doc["framework_overhead"]
    dims = c["model"]
    busy = ", BUSY: figures unreliable" if m["busy"] else ""
    peaks = ", ".join(f"{p} {v / 1e9:,.1f} GFLOP/s" for p, v in m["matmul_peak_flops"].items())
    lines = [f"machine: {m['name']} ({m['device']}, {m['torch_threads']} threads, torch {m['torch']}, "
             f"load before {m['load_average_1m']:.1f}{busy})", f"matmul peak: {peaks}",
             f"model: d {dims['d_model']}, {dims['heads']} heads, {dims['encoder_layers']}+"
             f"{dims['decoder_layers']} layers, d_ff {dims['d_ff']}, vocab {c['vocab']}; batches of ~"
             f"{c['mean_target_tokens']:.0f} target tokens, {100 * c['target_padding_fraction']:.1f}% pad",
             "", f"{'variant':<24}{'prec':<6}{'tok/s':>10}{'step ms':>9}{'vs torch':>10}{'vs default':>11}"
             f"{'peak MB':>9}{'MFU':>7}"]
    torch_rows = [{"variant": "torch.nn.Transformer", **t, "ratio_vs_torch": 1.0,
                   "ratio_vs_default": math.nan} for t in doc["torch_nn_transformer"]]
    for r in torch_rows + doc["train"]:
        vs_default = "-" if math.isnan(r["ratio_vs_default"]) else f"{r['ratio_vs_default']:.2f}x"
        lines.append(f"{r['variant']:<24}{r['precision']:<6}{r['tokens_per_s']:>10,.0f}{r['step_ms']:>9.1f}"
                     f"{r['ratio_vs_torch']:>9.2f}x{vs_default:>11}{r[metricnames.PEAK_MEMORY]:>9.0f}"
                     f"{100 * r['mfu']:>6.1f}%")
    lines += ["", f"decode ({d['sentences']} sentences): greedy {d['greedy_sent_per_s']:.1f} sent/s, "
              f"beam 4 {d['beam4_sent_per_s']:.1f} sent/s, per-sentence reference beam 4 "
              f"{d['reference_beam4_sent_per_s']:.1f} sent/s -> {d['beam_speedup']:.1f}x",
              f"  batched beam == reference on {d['reference_sentences']} sentences: {d['identical']}",
              *overhead_lines(o), *lm_lines(doc.get("lm_train", [])), *kv_lines(doc.get("kv_cache", [])),
              "", "targets:"]
    for t in doc["targets"]:
        sign = "<=" if t.get("at_most") else ">="
        verdict = "ok  " if t["met"] else "MISS"
        lines.append(f"  {verdict} {t['name']}: {t['value']:.3f} ({sign} {t['target']})")
    return "\n".join(lines)


def overhead_lines(o: dict[str, Any]) -> list[str]:
    c, k, tr = o["cadence"], o["components"], o["tracking"]
    pct = lambda x: f"{100 * x:+.1f}%"  # noqa: E731
    every = f"a save every {c['bench_steps_per_save']} steps"
    return [
        f"framework overhead in ablate run: {pct(o['overhead_fraction'])} of training time (MLflow on, eval "
        f"every {c['eval_every']}, checkpoint every {c['checkpoint_every']}, {c['run_steps']} steps): step "
        f"{pct(k['step'])} (in it {pct(o['step_overhead'])}, around it {pct(o['loop_overhead'])}), "
        f"checkpoints {pct(k['checkpoints'])} ({o['checkpoint_seconds']:.3f}s each), "
        f"tracking {pct(k['tracking'])}",
        f"  measured on {o['steps']} steps with {every}: {pct(o['measured_overhead_at_bench_cadence'])} "
        f"(Trainer.fit {o['trainer_seconds']:.2f}s vs bare loop {o['raw_seconds']:.2f}s); evaluation "
        f"{o['evaluation_seconds']:.2f}s in {o['evaluations']} evaluations (not overhead)",
        f"tracking (MLflow on vs off): {pct(tr['overhead_fraction'])} "
        f"({1000 * tr['flush_seconds_per_save']:.1f} ms a flush; start {tr['start_seconds']:.2f}s, "
        f"end {tr['end_seconds']:.2f}s once); measured with {every}: "
        f"{pct(tr['measured_on_vs_off_at_bench_cadence'])}",
    ]


def main_bench(spec_path: str | None, overrides: list[str], as_json: bool, quick: bool) -> int:
    spec, cfg = resolve_config(spec_path, list(overrides), quick)
    doc = run_bench(spec, cfg)
    print(json.dumps(doc, indent=2) if as_json else format_table(doc))
    return 0
