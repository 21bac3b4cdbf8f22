"""`ablate bench`: the JSON document, the FLOP count, the baseline and the variant sweep.

No timing is asserted anywhere (shared CI cores make throughput noise); the tests check that the
benchmark measures the right things: schema, positive finite ratios, every registered variant, the
batched beam agreeing with the per-sentence reference, and the parts (baseline, FLOPs) by value.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import registry
from ablate.bench.kv_cache import bench_kv_cache, kv_lines
from ablate.bench.overhead import saves_per_step, temporary_tracking_store
from ablate.bench.suite import machine_info, resolve_config, targets
from ablate.bench.train_speed import (
    QUICK,
    QUICK_MODEL,
    TorchTransformer,
    axis_variants,
    synthetic_batches,
    train_flops,
)
from ablate.engine.builders import build_model
from ablate.spec.experiment import ModelSpec
from ablate.spec.model import options_of

# A spec file whose variant differs from the default in two components and sets its own train cadence: the
# bench must measure this variant (the "default" row) and project the overhead to this cadence.
SPEC = """\
name: bench-spec
model: {d_model: 48, heads: 4, encoder_layers: 2, decoder_layers: 2, d_ff: 96, ffn: conv1d, mask: -1e9}
train: {max_steps: 400, eval_every: 50, checkpoint_every: 25}
"""


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bench")
    (folder / "bench-spec.yaml").write_text(SPEC)
    return folder


@pytest.fixture(scope="module")
def doc(bench_dir: Path) -> dict:
    """One `python -m ablate bench SPEC --json --quick` run, shared by the schema tests."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run([sys.executable, "-m", "ablate", "bench", "bench-spec.yaml", "--json", "--quick"],
                          capture_output=True, text=True, timeout=900, env=env, cwd=bench_dir)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)  # stdout is exactly one JSON document; progress goes to stderr


def positive_finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        and value > 0


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_bench_json_has_the_documented_schema(doc: dict) -> None:
    assert {"machine", "config", "train", "torch_nn_transformer", "decode", "framework_overhead"} <= set(doc)
    assert doc["machine"]["device"] in ("cpu", "cuda") or doc["machine"]["device"].startswith("cuda")
    precisions = [p for p in ("fp32", "bf16") if p in doc["machine"]["matmul_peak_flops"]]
    assert precisions[0] == "fp32"
    assert [r["precision"] for r in doc["torch_nn_transformer"]] == precisions
    for row in doc["train"]:
        assert {"variant", "precision", "tokens_per_s", "ratio_vs_torch", "ratio_vs_default",
                "peak_memory_mb", "mfu"} <= set(row)
        assert isinstance(row["variant"], str) and row["precision"] in precisions
        for key in ("tokens_per_s", "ratio_vs_torch", "ratio_vs_default", "mfu"):
            assert positive_finite(row[key]), (key, row)
        assert math.isfinite(row["peak_memory_mb"]) and row["peak_memory_mb"] >= 0
        assert row["mfu"] < 1.5  # a fraction of the measured peak (a little over 1 only by timer noise)
    for row in doc["torch_nn_transformer"]:
        assert positive_finite(row["tokens_per_s"])
    default = [r for r in doc["train"] if r["variant"] == "default"]
    assert [r["ratio_vs_default"] for r in default] == [1.0] * len(precisions)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_bench_covers_every_registered_variant_in_every_precision(doc: dict) -> None:
    spec = ModelSpec(ffn="conv1d", mask="-1e9")  # SPEC's components: its variant is the "default" row
    expected = {"default"} | {f"{axis.kind}={name}" for axis in registry.model_axes()
                              for name in registry.names(axis.kind) if name != getattr(spec, axis.kind)}
    assert "ffn=linear" in expected and "ffn=conv1d" not in expected
    rows = {(r["variant"], r["precision"]) for r in doc["train"]}
    precisions = {r["precision"] for r in doc["torch_nn_transformer"]}
    assert rows == {(v, p) for v in expected for p in precisions}


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_bench_decode_and_overhead_sections(doc: dict) -> None:
    decode = doc["decode"]
    for key in ("greedy_sent_per_s", "beam4_sent_per_s", "reference_beam4_sent_per_s", "beam_speedup"):
        assert positive_finite(decode[key]), key
    assert decode["beam_speedup"] == pytest.approx(decode["beam4_subset_sent_per_s"] /
                                                   decode["reference_beam4_sent_per_s"])
    # KV-cache beam == re-decoding beam on the tiny model the bench trains (which learned the copy task)
    assert decode["identical"] is True and decode["mismatches"] == 0 and decode["agreement_sentences"] > 0
    assert decode["agreement_exact_match"] > 0  # trained: eos and real tokens, not a flat distribution
    assert all(isinstance(t["met"], bool) and math.isfinite(t["value"]) for t in doc["targets"])
    assert "6 *" in doc["config"]["flops_formula"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_bench_of_a_spec_file_measures_its_variant(doc: dict) -> None:
    """`ablate bench SPEC --quick`: the spec's components at the quick dims, its name in the config."""
    config = doc["config"]
    assert config["spec"] == "bench-spec"
    assert config["model"]["ffn"] == "conv1d" and config["model"]["mask"] == "-1e9"
    assert {k: config["model"][k] for k in QUICK_MODEL} == QUICK_MODEL  # --quick: tiny dims, same components
    assert config["vocab"] == QUICK.vocab and config["bench"]["quick"] is True


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_bench_framework_overhead_section(doc: dict, bench_dir: Path) -> None:
    """ablate run's training with MLflow on and the spec's checkpointing, against the bare step: every
    figure finite, the parts adding up, the spec's cadence, MLflow really written (in a temporary store)."""
    o = doc["framework_overhead"]
    assert o["method"] and o["steps"] > 0
    for key in ("raw_seconds", "trainer_seconds", "untracked_seconds", "raw_step_s", "checkpoint_seconds",
                "best_checkpoint_seconds", "evaluation_seconds"):
        assert positive_finite(o[key]), key
    for key in ("overhead_fraction", "step_overhead", "loop_overhead", "measured_overhead_at_bench_cadence"):
        assert math.isfinite(o[key]) and o[key] > -1, key
    assert o["overhead_fraction"] == pytest.approx(sum(o["components"].values()))
    assert o["components"]["step"] == pytest.approx((1 + o["step_overhead"]) * (1 + o["loop_overhead"]) - 1)
    assert o["components"]["checkpoints"] > 0 and o["components"]["tracking"] > 0
    assert o["cadence"] == {"eval_every": 50, "checkpoint_every": 25, "run_steps": 400,
                            "saves_per_step": pytest.approx(1 / 25), "bench_steps_per_save": o["steps"] // 4}
    assert o["evaluations"] == 8  # a chunk ends with one evaluation, in each of the two trainer arms
    t = o["tracking"]
    for key in ("flush_seconds_per_save", "start_seconds", "end_seconds", "store_creation_seconds"):
        assert positive_finite(t[key]), key
    c = o["components"]  # tracking's share of the untracked time (step and checkpoints, no MLflow)
    assert t["overhead_fraction"] == pytest.approx(c["tracking"] / (1 + c["step"] + c["checkpoints"]))
    assert math.isfinite(t["measured_on_vs_off_at_bench_cadence"])
    assert t["logged_values"] >= 8  # the evaluations' val/loss and val/ppl at least reached MLflow
    names = {x["name"]: x for x in doc["targets"]}
    assert names["framework overhead in ablate run (fraction, at most)"]["value"] == o["overhead_fraction"]
    assert names["MLflow tracking on vs off (fraction, at most)"]["value"] == t["overhead_fraction"]
    assert sorted(os.listdir(bench_dir)) == ["bench-spec.yaml"]  # store, runs and data in a temporary folder


def test_saves_per_step_counts_coinciding_saves_once() -> None:
    assert saves_per_step(200, 200) == pytest.approx(1 / 200)
    assert saves_per_step(50, 25) == pytest.approx(1 / 25)
    assert saves_per_step(1000, 300) == pytest.approx(1 / 1000 + 1 / 300 - 1 / 3000)


@pytest.mark.parametrize("before", [None, "sqlite:///elsewhere.db"])
def test_temporary_tracking_store_puts_the_environment_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            before: str | None) -> None:
    if before is None:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    else:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", before)
    with pytest.raises(RuntimeError), temporary_tracking_store(tmp_path) as uri:
        assert uri == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
        assert os.environ["MLFLOW_TRACKING_URI"] == uri
        raise RuntimeError("the store is put back on errors too")
    assert os.environ.get("MLFLOW_TRACKING_URI") == before


def test_resolve_config_reads_the_spec_file(tmp_path: Path) -> None:
    """A spec file gives its model (dims too), batch size and vocabulary; --quick keeps its components at
    tiny dims; without a file, the built-in bench model."""
    path = tmp_path / "bench-spec.yaml"
    path.write_text(SPEC + "data: {batch_tokens: 1024, synthetic: {vocab_size: 300}}\n")
    spec, cfg = resolve_config(str(path), [], quick=False)
    assert (spec.model.d_model, spec.model.heads, spec.model.ffn) == (48, 4, "conv1d")
    assert (cfg.batch_tokens, cfg.vocab, cfg.quick) == (1024, 300, False)
    quick, qcfg = resolve_config(str(path), ["model.positions=learned"], quick=True)
    assert quick.model.d_model == QUICK_MODEL["d_model"] and quick.model.positions == "learned"
    assert quick.model.ffn == "conv1d" and qcfg.quick and quick.train.eval_every == 50
    builtin, _ = resolve_config(None, [], quick=True)
    assert builtin.model.d_model == QUICK_MODEL["d_model"] and builtin.model.ffn == "linear"


def test_train_flops_is_six_times_the_multiply_accumulates() -> None:
    spec = ModelSpec(d_model=8, heads=2, encoder_layers=1, decoder_layers=2, d_ff=16)
    src = torch.tensor([[5, 6, 7], [5, 6, 0]])  # real lengths 3, 2
    tgt_in = torch.tensor([[1, 5, 0, 0], [1, 5, 6, 7]])  # real lengths 2, 4
    d, ff, v = 8, 16, 11
    # the decoder's cross-attention K/V (2d^2 per layer) runs on the 5 source tokens, not the 6 target ones
    dense = 5 * (1 * (4 * d * d + 2 * d * ff) + 2 * 2 * d * d) + 6 * 2 * (6 * d * d + 2 * d * ff) + 6 * d * v
    attention = 2 * d * (1 * (9 + 4) + 2 * ((4 + 16) + (2 * 3 + 4 * 2)))
    assert train_flops(src, tgt_in, build_model(spec, v, v)) == 6 * (dense + attention)


def test_train_flops_count_the_model_as_built() -> None:
    """A gated FFN has three matrices of 2/3 d_ff (rounded): the count follows the built model."""
    spec = ModelSpec(d_model=8, heads=2, encoder_layers=1, decoder_layers=2, d_ff=24, ffn="swiglu",
                     glu_multiple_of=1)
    src, tgt_in = torch.tensor([[5, 6, 7]]), torch.tensor([[1, 5]])
    d, hidden, v = 8, 16, 11  # 2/3 * 24
    dense = 3 * (1 * (4 * d * d + 3 * d * hidden) + 2 * 2 * d * d) \
        + 2 * 2 * (6 * d * d + 3 * d * hidden) + 2 * d * v
    attention = 2 * d * (1 * 9 + 2 * (4 + 2 * 3))
    assert train_flops(src, tgt_in, build_model(spec, v, v)) == 6 * (dense + attention)


def test_synthetic_batches_fill_the_token_budget_with_multi30k_like_lengths() -> None:
    batches, padding = synthetic_batches(QUICK)
    assert len(batches) == QUICK.batches
    for b in batches:
        lengths = b.tgt_out.ne(0).sum(1) - 1  # minus eos
        assert lengths.min() >= QUICK.min_len and lengths.max() <= QUICK.max_len
        assert b.src.numel() <= QUICK.batch_tokens and b.tgt_out.numel() <= QUICK.batch_tokens
    assert 0.0 <= padding < 0.5


def test_torch_baseline_matches_torch_transformer_semantics() -> None:
    """The baseline masks padding and the future: changing a pad token or a later target token changes
    nothing before it, and its norm placement follows the residual variant."""
    spec = ModelSpec(d_model=16, heads=2, encoder_layers=1, decoder_layers=1, d_ff=32, dropout=0.0)
    torch.manual_seed(0)
    model = TorchTransformer(spec, 20, 20).eval()
    assert model.core.encoder.layers[0].norm_first is True
    assert TorchTransformer(spec.model_copy(update={"residual": "post_norm"}), 20, 20) \
        .core.encoder.layers[0].norm_first is False
    src = torch.tensor([[5, 6, 7, 0, 0]])
    tgt = torch.tensor([[1, 8, 9, 10]])
    with torch.no_grad():
        base = model(src, tgt)
        other_pad = model(torch.tensor([[5, 6, 7, 0, 0]]).index_fill(1, torch.tensor([4]), 0), tgt)
        later = model(src, torch.tensor([[1, 8, 9, 11]]))
        no_pad = model(src[:, :3], tgt)
    assert base.shape == (1, 4, 20)
    torch.testing.assert_close(base[:, :3], later[:, :3])  # causal: position 3 does not leak backwards
    torch.testing.assert_close(base, no_pad, rtol=1e-5, atol=1e-5)  # padded source keys are ignored
    torch.testing.assert_close(base, other_pad)


def test_axis_variants_change_one_component_each() -> None:
    base = ModelSpec(residual="post_norm", shared_layer_norm=True)
    variants = dict(axis_variants(base))
    assert variants["default"] == base
    every = {f"{a.kind}={n}" for a in registry.model_axes() for n in registry.names(a.kind)}
    chosen = {f"{a.kind}={getattr(base, a.kind)}" for a in registry.model_axes()}
    assert set(variants) - {"default"} == every - chosen
    for label, spec in variants.items():
        if label == "default":
            continue
        kind, name = label.split("=")
        assert getattr(spec, kind) == name
        changed = {k for k in ModelSpec.model_fields if getattr(spec, k) != getattr(base, k)}
        options = {o.name for o in options_of(registry.axis(kind))}
        # shared_layer_norm only exists for post_norm: another residual drops it too; a variant with
        # options of its own brings them (rope_base, glu_hidden, ...)
        assert kind in changed and changed - {kind} <= options, label
        assert ("shared_layer_norm" in changed) == (kind == "residual")


def test_targets_flag_the_issue_thresholds() -> None:
    def row(variant: str, precision: str, tokens: float, vs_torch: float, vs_default: float) -> dict:
        return {"variant": variant, "precision": precision, "tokens_per_s": tokens,
                "ratio_vs_torch": vs_torch, "ratio_vs_default": vs_default}

    rows = [row("default", "fp32", 100.0, 1.2, 1.0), row("default", "bf16", 120.0, 1.0, 1.0),
            row("ffn=conv1d", "fp32", 80.0, 1.0, 0.8), row("attention=explicit", "fp32", 10.0, 0.1, 0.1)]
    overhead = {"overhead_fraction": 0.02, "tracking": {"overhead_fraction": 0.04}}
    checks = {t["name"].split(" (")[0] if "slowest" in t["name"] else t["name"]: t
              for t in targets({"train": rows, "framework_overhead": overhead})}
    assert checks["default vs torch.nn.Transformer, fp32"]["met"] is True
    slowest = checks["slowest variant vs default, fp32"]
    assert slowest["value"] == 0.8 and slowest["met"] is False  # explicit attention is exempt, conv1d not
    assert checks["bf16 vs fp32, default"]["value"] == pytest.approx(1.2)
    assert checks["bf16 vs fp32, default"]["met"] is False
    assert checks["framework overhead in ablate run (fraction, at most)"]["met"] is True
    tracking = checks["MLflow tracking on vs off (fraction, at most)"]
    assert tracking["value"] == 0.04 and tracking["target"] == 0.03 and tracking["met"] is False


def test_busy_flags_the_load_the_bench_found_not_its_own() -> None:
    """The flag reads the load average given (run_bench reads it before any work): after the bench, its own
    threads hold a 2-core machine's load near 2, which flagged every full run here as unreliable."""
    cores = os.cpu_count() or 1
    cpu = torch.device("cpu")
    quiet, loaded = machine_info(cpu, {}, 0.4 * cores), machine_info(cpu, {}, 0.6 * cores)
    assert (quiet["busy"], loaded["busy"]) == (False, True)
    assert quiet["load_average_1m"] == 0.4 * cores


def test_lm_flops_count_the_decoder_only_model_as_built() -> None:
    """Decoder-only: per token, the layers' matmuls (4d^2 attention + 2 d d_ff FFN) and the output
    projection; attention 2d per layer per (query, key) pair of each block."""
    from ablate.bench.lm_speed import lm_flops, lm_spec
    from ablate.engine.builders import build_lm

    base = ModelSpec(d_model=8, heads=2, decoder_layers=2, d_ff=16)
    d, ff, v, batch, block = 8, 16, 11, 3, 5
    model = build_lm(lm_spec(base), v)
    dense = batch * block * (2 * (4 * d * d + 2 * d * ff) + d * v)
    attention = 2 * d * 2 * batch * block * block
    assert lm_flops(model, batch, block) == 6 * (dense + attention)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_bench_covers_the_decoder_only_stack_for_every_position_scheme(doc: dict) -> None:
    rows = doc["lm_train"]
    precisions = {r["precision"] for r in doc["torch_nn_transformer"]}
    expected = {"default"} | {f"positions={n}" for n in registry.names("positions") if n != "sinusoidal"}
    assert {(r["variant"], r["precision"]) for r in rows} == {(v, p) for v in expected for p in precisions}
    for r in rows:
        assert positive_finite(r["tokens_per_s"]) and positive_finite(r["mfu"]) and r["mfu"] < 1.5


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_bench_measures_the_kv_cache_of_every_kv_heads(doc: dict) -> None:
    """One row per kv_heads dividing the heads, MHA first: the cache measured after decoding holds
    kv_heads / heads of MHA's bytes, as the per-token formula says."""
    rows = doc["kv_cache"]
    heads = rows[0]["heads"]
    assert [r["kv_heads"] for r in rows] == [n for n in range(heads, 0, -1) if heads % n == 0]
    for r in rows:
        assert r["fraction_of_mha"] == pytest.approx(r["kv_heads"] / heads)
        assert r["bytes_per_token"] == r["per_token_formula"]
        assert positive_finite(r["decode_tokens_per_s"])
    assert rows[-1]["params"] < rows[0]["params"]  # one K and one V head: smaller projections


def test_the_kv_cache_rows_of_a_tiny_model() -> None:
    """Without the whole bench: MQA's cache is 1/heads of MHA's, GQA's in between."""
    tiny = ModelSpec(d_model=16, heads=4, d_ff=32, decoder_layers=2, dropout=0.0, max_positions=16)
    rows = bench_kv_cache(tiny, QUICK, torch.device("cpu"))  # 16 tokens decoded: max_positions
    assert [(r["kv_heads"], r["fraction_of_mha"]) for r in rows] == [(4, 1.0), (2, 0.5), (1, 0.25)]
    assert rows[0]["bytes_per_token"] == 2 * 2 * 16 * 4  # layers x (K, V) x d_model x fp32 bytes
    assert len(kv_lines(rows)) == 2 + len(rows)
