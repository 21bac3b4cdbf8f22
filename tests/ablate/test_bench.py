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

import pytest
import torch

import registry
from ablate.bench import targets
from ablate.bench_train import QUICK, TorchTransformer, axis_variants, synthetic_batches, train_flops
from ablate.spec import ModelSpec


@pytest.fixture(scope="module")
def doc() -> dict:
    """One `python -m ablate bench --json --quick` run, shared by the schema tests."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "ablate", "bench", "--json", "--quick"], capture_output=True,
                          text=True, timeout=900, env=env)
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
    expected = {"default"} | {f"{kind}={name}" for kind in registry.KINDS for name in registry.names(kind)
                              if name != getattr(ModelSpec(), kind)}
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
    overhead = doc["framework_overhead"]
    assert overhead["method"] and overhead["steps"] > 0
    assert positive_finite(overhead["raw_seconds"]) and positive_finite(overhead["trainer_seconds"])
    ratio = overhead["trainer_seconds"] / overhead["raw_seconds"]
    assert overhead["total_time_overhead"] == pytest.approx(ratio - 1)
    combined = (1 + overhead["step_overhead"]) * (1 + overhead["loop_overhead"]) - 1
    assert overhead["overhead_fraction"] == pytest.approx(combined)
    assert all(math.isfinite(overhead[k]) and overhead[k] > -1 for k in ("step_overhead", "loop_overhead"))
    assert all(isinstance(t["met"], bool) and math.isfinite(t["value"]) for t in doc["targets"])
    assert "6 *" in doc["config"]["flops_formula"]


def test_train_flops_is_six_times_the_multiply_accumulates() -> None:
    spec = ModelSpec(d_model=8, heads=2, encoder_layers=1, decoder_layers=2, d_ff=16)
    src = torch.tensor([[5, 6, 7], [5, 6, 0]])  # real lengths 3, 2
    tgt_in = torch.tensor([[1, 5, 0, 0], [1, 5, 6, 7]])  # real lengths 2, 4
    d, ff, v = 8, 16, 11
    dense = 5 * 1 * (4 * d * d + 2 * d * ff) + 6 * 2 * (8 * d * d + 2 * d * ff) + 6 * d * v
    attention = 2 * d * (1 * (9 + 4) + 2 * ((4 + 16) + (2 * 3 + 4 * 2)))
    assert train_flops(src, tgt_in, spec, v) == 6 * (dense + attention)


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
    for label, spec in variants.items():
        if label == "default":
            continue
        kind, name = label.split("=")
        assert getattr(spec, kind) == name
        changed = {k for k in ModelSpec.model_fields if getattr(spec, k) != getattr(base, k)}
        # shared_layer_norm only exists for post_norm: switching to pre_norm must drop it too
        assert changed == ({kind, "shared_layer_norm"} if label == "residual=pre_norm" else {kind})


def test_targets_flag_the_issue_thresholds() -> None:
    def row(variant: str, precision: str, tokens: float, vs_torch: float, vs_default: float) -> dict:
        return {"variant": variant, "precision": precision, "tokens_per_s": tokens,
                "ratio_vs_torch": vs_torch, "ratio_vs_default": vs_default}

    rows = [row("default", "fp32", 100.0, 1.2, 1.0), row("default", "bf16", 120.0, 1.0, 1.0),
            row("ffn=conv1d", "fp32", 80.0, 1.0, 0.8), row("attention=explicit", "fp32", 10.0, 0.1, 0.1)]
    checks = {t["name"].split(" (")[0] if "slowest" in t["name"] else t["name"]: t
              for t in targets({"train": rows, "framework_overhead": {"overhead_fraction": 0.02}})}
    assert checks["default vs torch.nn.Transformer, fp32"]["met"] is True
    slowest = checks["slowest variant vs default, fp32"]
    assert slowest["value"] == 0.8 and slowest["met"] is False  # explicit attention is exempt, conv1d not
    assert checks["bf16 vs fp32, default"]["value"] == pytest.approx(1.2)
    assert checks["bf16 vs fp32, default"]["met"] is False
    assert checks["framework overhead (fraction, at most)"]["met"] is True
