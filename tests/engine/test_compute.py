"""A run's training compute (ablate/engine/compute.py): N counts the layer stacks only, and FLOPs follow
Kaplan et al.'s 6ND plus attention, checked by hand on built models of both architectures."""

from __future__ import annotations

import pytest
from torch import nn

from ablate.engine.compute import planned_compute, shape_of, training_compute
from ablate.engine.dispatch import build_any
from ablate.spec.experiment import ExperimentSpec


def model(**fields: object) -> nn.Module:
    lm = fields.get("arch") == "decoder_only"
    data = {"source": "synthetic", "synthetic": {"task": "recall"}} if lm else {}
    spec = ExperimentSpec.model_validate({"name": "m", "model": fields, **({"data": data} if data else {})})
    return build_any(spec.model, 50, 60, pad_id=0, seed=0)


def stack_params(m: nn.Module, name: str) -> int:
    return sum(p.numel() for n, p in m.named_parameters() if n.startswith(name + "."))


def test_n_counts_the_stacks_and_leaves_out_embeddings_positions_and_the_output() -> None:
    m = model(d_model=16, heads=2, encoder_layers=1, decoder_layers=2, d_ff=32, positions="learned")
    shape = shape_of(m)
    assert shape.encoder_params == stack_params(m, "encoder") > 0
    assert shape.decoder_params == stack_params(m, "decoder") > 0
    everything = sum(p.numel() for p in m.parameters())
    embeddings = sum(p.numel() for n, p in m.named_parameters()
                     if n.startswith(("src_embed", "tgt_embed", "generator", "src_pos", "tgt_pos")))
    assert shape.non_embedding == everything - embeddings
    # a d_model-16 layer: attention 4 (16x16 + 16), feed-forward 16x32 + 32 + 32x16 + 16, two norms 2 x 32
    encoder_layer = 4 * (16 * 16 + 16) + (16 * 32 + 32 + 32 * 16 + 16) + 2 * 32
    assert shape.encoder_params == encoder_layer + 32  # and the pre-norm stack's final norm
    assert (shape.encoder_layers, shape.decoder_layers, shape.d_model) == (1, 2, 16)


def test_decoder_only_flops_are_6nd_plus_the_attention_term() -> None:
    m = model(arch="decoder_only", d_model=32, heads=2, decoder_layers=3, d_ff=64, embeddings="tied")
    n = stack_params(m, "decoder")
    c = training_compute(m, 10_000, context=64)
    assert c.params == n and c.tokens == 10_000
    assert c.flops == pytest.approx(6 * n * 10_000 + 6 * 3 * 64 * 32 * 10_000)
    planned = planned_compute(shape_of(m), steps=10, batch_tokens=1000, max_len=64)
    assert planned.tokens == 10_000 and planned.flops == pytest.approx(c.flops)


def test_encoder_decoder_flops_count_source_tokens_through_the_encoder() -> None:
    m = model(d_model=16, heads=2, encoder_layers=2, decoder_layers=1, d_ff=32)
    shape = shape_of(m)
    c = training_compute(m, 1_000, source_len=10.0, target_len=8.0)
    source = 1_000 * 10.0 / 8.0
    matmuls = 6 * (shape.encoder_params * source + shape.decoder_params * 1_000)
    attention = 6 * 16 * (2 * 10.0 * source + 1 * (8.0 + 10.0) * 1_000)
    assert c.flops == pytest.approx(matmuls + attention)
