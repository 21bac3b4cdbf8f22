"""The weights and ``config.json`` fields of each standard ``transformers`` class a decoder-only model maps
to (ablate/engine/hf_mapping.py decides which one, or refuses): every tensor under the class's names, each
layout change an exact renumbering or folding, listed in :attr:`HFModel.notes` for the model card.

* GPT-2: the fused QKV as ``c_attn`` (its Conv1D holds (in, out)); absolute positions written into ``wpe``.
* Llama and Gemma 2: separate q/k/v/o; each head's query and key rows reordered from RoPE's interleaved
  pairs (2i, 2i+1) to ``rotate_half``'s (i, i + d_head/2) (:func:`rope_order`), which leaves every score
  unchanged; Gemma's RMSNorm gains stored as ``w - 1`` and its table divided by sqrt(d_model).
* CTRL: the residual stream's features renumbered to its ``[sin ..., cos ...]`` sinusoids
  (:func:`ctrl_order`).

Folded: the token-embedding multiplier into the table, muP's logit multiplier into the output projection,
muP's attention score scale into the query rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import Tensor, nn

from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.spec.experiment import ModelSpec
from registry.attention import MultiHeadAttention

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "silu": "silu", "relu2": "relu2"}
GATES = {"swiglu": "silu", "geglu": "gelu"}  # the gated FFN's activation, Llama's hidden_act
@dataclass
class HFModel:
    """What ``transformers`` needs to load a model: its class, its config fields, its weights."""

    architecture: str  # "GPT2LMHeadModel"
    model_type: str  # "gpt2": transformers' AutoConfig key
    config: dict[str, Any]
    weights: dict[str, Tensor] = field(repr=False)
    notes: list[str] = field(default_factory=list)  # what was folded, for the model card


def _layers(model: DecoderOnlyLM) -> list[Any]:
    return list(model.decoder.layers)


def _linear(module: nn.Module) -> tuple[Tensor, Tensor | None]:
    """(weight (out, in), bias) of a Linear or a kernel-1 Conv1d (conv1d FFN: the same function)."""
    weight = cast(Tensor, module.weight).detach()
    if weight.dim() == 3:
        weight = weight[:, :, 0]
    bias = cast(Tensor | None, getattr(module, "bias", None))
    return weight.clone(), None if bias is None else bias.detach().clone()


def _query_scale(attn: MultiHeadAttention) -> float:
    """What the query rows are multiplied by so that the class's 1/sqrt(d_head) gives ablate's scale
    (muP's sqrt(base d_head)/d_head; 1 in the standard parametrisation)."""
    return attn.scale * math.sqrt(attn.d_head)


def _embedding_and_head(model: DecoderOnlyLM, notes: list[str]) -> tuple[Tensor, Tensor, Tensor | None, bool]:
    """(input embedding, output projection, its bias, tied): the embedding multiplier and the logit
    multiplier folded in; tied only where both are 1 and ablate tied them."""
    embed = model.embed.weight.detach().clone()
    head = model.generator.weight.detach().clone()
    bias = None if model.generator.bias is None else model.generator.bias.detach().clone()
    tied = model.generator.weight is model.embed.weight
    if model.embed_scale != 1.0:
        embed = embed * model.embed_scale
        notes.append(f"token embeddings multiplied by {model.embed_scale:.6g} (model.embed_scale) in the "
                     "table")
        tied = False
    if model.logit_multiplier != 1.0:
        head = head * model.logit_multiplier
        bias = None if bias is None else bias * model.logit_multiplier
        notes.append(f"muP's logit multiplier {model.logit_multiplier:.6g} folded into the output projection")
        tied = False
    return embed, head, bias, tied


def gpt2_export(model: DecoderOnlyLM, spec: ModelSpec) -> HFModel:
    notes: list[str] = []
    embed, head, _, tied = _embedding_and_head(model, notes)
    w: dict[str, Tensor] = {"transformer.wte.weight": embed,
                            "transformer.wpe.weight": _position_table(model, spec, notes)}
    for i, layer in enumerate(_layers(model)):
        p = f"transformer.h.{i}."
        attn = layer.self_attn
        qkv, qkv_b = _linear(attn.qkv)
        scale = _query_scale(attn)
        if scale != 1.0:
            qkv[: spec.d_model] *= scale
            if qkv_b is not None:
                qkv_b[: spec.d_model] *= scale
        _put_norm(w, p + "ln_1", layer.attn_res.norm)
        _put_norm(w, p + "ln_2", layer.ffn_res.norm)
        _put_conv1d(w, p + "attn.c_attn", qkv, qkv_b)  # GPT-2's Conv1D holds (in, out)
        _put_conv1d(w, p + "attn.c_proj", *_linear(attn.out))
        _put_conv1d(w, p + "mlp.c_fc", *_linear(layer.ffn.w1))
        _put_conv1d(w, p + "mlp.c_proj", *_linear(layer.ffn.w2))
    _put_norm(w, "transformer.ln_f", model.decoder.norm)
    w["lm_head.weight"] = head
    config = {
        "vocab_size": embed.size(0), "n_positions": spec.max_positions, "n_embd": spec.d_model,
        "n_layer": spec.decoder_layers, "n_head": spec.heads, "n_inner": spec.d_ff,
        "activation_function": ACTIVATIONS[spec.activation], "layer_norm_epsilon": spec.norm_eps,
        "resid_pdrop": spec.dropout, "embd_pdrop": spec.dropout, "attn_pdrop": spec.attention_dropout,
        "scale_attn_weights": True, "tie_word_embeddings": tied,
    }
    return HFModel("GPT2LMHeadModel", "gpt2", config, w, notes)


def _position_table(model: DecoderOnlyLM, spec: ModelSpec, notes: list[str]) -> Tensor:
    positions = model.positions
    if spec.positions == "learned":
        return cast(nn.Embedding, positions.table).weight.detach().clone()
    if spec.positions == "sinusoidal":
        notes.append("the fixed sinusoids written into the position table (wpe)")
        return cast(Tensor, positions.table).detach().clone()
    notes.append("no positions: a position table of zeros")
    return torch.zeros(spec.max_positions, spec.d_model)


def _put_norm(w: dict[str, Tensor], name: str, norm: nn.Module, order: Tensor | None = None) -> None:
    for part in ("weight", "bias"):
        value = getattr(norm, part, None)
        if isinstance(value, Tensor):
            value = value.detach().clone()
            w[f"{name}.{part}"] = value if order is None else value[order]


def _put_conv1d(w: dict[str, Tensor], name: str, weight: Tensor, bias: Tensor | None) -> None:
    w[f"{name}.weight"] = weight.t().contiguous()
    if bias is not None:
        w[f"{name}.bias"] = bias


def rope_order(d_head: int) -> Tensor:
    """The head's features in Llama's order: ablate's pair (2i, 2i+1) becomes Llama's (i, i + d_head/2)."""
    return torch.cat([torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)])


def _rope_rows(weight: Tensor, bias: Tensor | None, heads: int, d_head: int) -> tuple[Tensor, Tensor | None]:
    """Query or key projection rows (heads * d_head, d) reordered head by head (:func:`rope_order`)."""
    order = torch.cat([h * d_head + rope_order(d_head) for h in range(heads)])
    return weight[order].contiguous(), None if bias is None else bias[order].contiguous()


def _attention_and_gated_mlp(layer: Any, spec: ModelSpec, p: str) -> dict[str, Tensor]:
    """A layer's attention rows (RoPE-reordered, ``_attention_rows``) and gated MLP under Llama's names,
    which Gemma 2 shares, keyed under the layer's prefix ``p``."""
    w: dict[str, Tensor] = {}
    for name, (weight, bias) in _attention_rows(layer.self_attn, spec).items():
        w[f"{p}self_attn.{name}.weight"] = weight.contiguous()
        if bias is not None:
            w[f"{p}self_attn.{name}.bias"] = bias.contiguous()
    ffn = layer.ffn
    w[p + "mlp.gate_proj.weight"] = _linear(ffn.w1)[0]
    w[p + "mlp.up_proj.weight"] = _linear(ffn.w3)[0]
    w[p + "mlp.down_proj.weight"] = _linear(ffn.w2)[0]
    return w


def llama_export(model: DecoderOnlyLM, spec: ModelSpec) -> HFModel:
    notes = ["query and key rows of each head reordered from interleaved pairs to rotate_half's halves"]
    embed, head, _, tied = _embedding_and_head(model, notes)
    w: dict[str, Tensor] = {"model.embed_tokens.weight": embed}
    heads = spec.heads
    kv_heads = spec.kv_heads or heads
    d_head = spec.d_model // heads
    for i, layer in enumerate(_layers(model)):
        p = f"model.layers.{i}."
        w.update(_attention_and_gated_mlp(layer, spec, p))
        w[p + "input_layernorm.weight"] = layer.attn_res.norm.weight.detach().clone()
        w[p + "post_attention_layernorm.weight"] = layer.ffn_res.norm.weight.detach().clone()
    w["model.norm.weight"] = cast(Tensor, model.decoder.norm.weight).detach().clone()
    w["lm_head.weight"] = head
    config = {
        "vocab_size": embed.size(0), "hidden_size": spec.d_model,
        "intermediate_size": w["model.layers.0.mlp.gate_proj.weight"].size(0),  # glu_hidden's size
        "num_hidden_layers": spec.decoder_layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": d_head, "hidden_act": GATES[spec.ffn],
        "max_position_embeddings": spec.max_positions, "rms_norm_eps": spec.norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(cast(Any, model.positions).base)},
        "attention_bias": _layers(model)[0].self_attn.qkv.bias is not None, "mlp_bias": False,
        "attention_dropout": spec.attention_dropout, "tie_word_embeddings": tied,
    }
    return HFModel("LlamaForCausalLM", "llama", config, w, notes)


def ctrl_order(d_model: int) -> Tensor:
    """CTRL's hidden feature j is ablate's feature ``order[j]``: CTRL's sinusoid table is
    ``[sin(w_0 p) .. sin(w_{d/2-1} p), cos(w_0 p) .. ]``, ablate's ``sin(w_0 p), cos(w_0 p), ...``."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def ctrl_export(model: DecoderOnlyLM, spec: ModelSpec) -> HFModel:
    notes = ["hidden features renumbered to CTRL's sinusoid layout (sines, then cosines)"]
    embed, head, bias, _ = _embedding_and_head(model, notes)
    order = ctrl_order(spec.d_model)
    d = spec.d_model
    # CTRL multiplies the token embeddings by sqrt(d_model): its table holds ablate's scaled one / sqrt(d)
    w: dict[str, Tensor] = {"transformer.w.weight": (embed / math.sqrt(d))[:, order].contiguous()}
    for i, layer in enumerate(_layers(model)):
        p = f"transformer.h.{i}."
        attn = layer.self_attn
        fused, fused_b = _linear(attn.qkv)
        scale = _query_scale(attn)
        for j, name in enumerate(("Wq", "Wk", "Wv")):
            weight = fused[j * d:(j + 1) * d][:, order] * (scale if j == 0 else 1.0)
            w[f"{p}multi_head_attention.{name}.weight"] = weight.contiguous()
            if fused_b is not None:
                w[f"{p}multi_head_attention.{name}.bias"] = fused_b[j * d:(j + 1) * d] * (scale if j == 0
                                                                                             else 1.0)
        out, out_b = _linear(attn.out)
        w[p + "multi_head_attention.dense.weight"] = out[order].contiguous()
        if out_b is not None:
            w[p + "multi_head_attention.dense.bias"] = out_b[order].contiguous()
        w1, b1 = _linear(layer.ffn.w1)
        w2, b2 = _linear(layer.ffn.w2)
        w[p + "ffn.0.weight"] = w1[:, order].contiguous()
        w[p + "ffn.2.weight"] = w2[order].contiguous()
        if b1 is not None and b2 is not None:
            w[p + "ffn.0.bias"], w[p + "ffn.2.bias"] = b1, b2[order].contiguous()
        _put_norm(w, p + "layernorm1", layer.attn_res.norm, order)
        _put_norm(w, p + "layernorm2", layer.ffn_res.norm, order)
    _put_norm(w, "transformer.layernorm", model.decoder.norm, order)
    w["lm_head.weight"] = head[:, order].contiguous()
    if bias is not None:
        w["lm_head.bias"] = bias
    config = {
        "vocab_size": embed.size(0), "n_positions": spec.max_positions, "n_embd": d, "dff": spec.d_ff,
        "n_layer": spec.decoder_layers, "n_head": spec.heads, "layer_norm_epsilon": spec.norm_eps,
        "resid_pdrop": spec.dropout, "embd_pdrop": spec.dropout, "tie_word_embeddings": False,
    }
    return HFModel("CTRLLMHeadModel", "ctrl", config, w, notes)


def _attention_rows(attn: MultiHeadAttention, spec: ModelSpec) -> dict[str, tuple[Tensor, Tensor | None]]:
    """q/k/v/o projections as separate (weight, bias), muP's score scale folded into q and the query and key
    rows reordered for rotate_half (:func:`rope_order`)."""
    heads, kv_heads, d_head = spec.heads, spec.kv_heads or spec.heads, spec.d_model // spec.heads
    fused, fused_b = _linear(attn.qkv)  # rows: q (d), k (kv d_head), v (kv d_head)
    cuts = [spec.d_model, kv_heads * d_head, kv_heads * d_head]
    q, k, v = torch.split(fused, cuts)
    qb, kb, vb = torch.split(fused_b, cuts) if fused_b is not None else (None, None, None)
    scale = _query_scale(attn)
    return {"q_proj": _rope_rows(q * scale, None if qb is None else qb * scale, heads, d_head),
            "k_proj": _rope_rows(k, kb, kv_heads, d_head), "v_proj": (v, vb), "o_proj": _linear(attn.out)}


def gemma2_export(model: DecoderOnlyLM, spec: ModelSpec) -> HFModel:
    """Gemma 2's layers are ablate's sandwich residual; its RMSNorm multiplies by (1 + w), so each gain is
    stored minus one; it multiplies the token embeddings by sqrt(d_model), so the table holds ablate's
    scaled embeddings divided by it; every layer is a sliding-window layer when the model has a window."""
    notes = ["query and key rows of each head reordered from interleaved pairs to rotate_half's halves",
             "RMSNorm gains stored as w - 1 (Gemma's norm multiplies by 1 + w)"]
    embed, head, _, _ = _embedding_and_head(model, notes)
    d = spec.d_model
    w: dict[str, Tensor] = {"model.embed_tokens.weight": embed / math.sqrt(d)}
    for i, layer in enumerate(_layers(model)):
        p = f"model.layers.{i}."
        w.update(_attention_and_gated_mlp(layer, spec, p))
        for name, norm in (("input_layernorm", layer.attn_res.norm),
                           ("post_attention_layernorm", layer.attn_res.out_norm),
                           ("pre_feedforward_layernorm", layer.ffn_res.norm),
                           ("post_feedforward_layernorm", layer.ffn_res.out_norm)):
            w[f"{p}{name}.weight"] = cast(Tensor, norm.weight).detach() - 1.0
    w["model.norm.weight"] = cast(Tensor, model.decoder.norm.weight).detach() - 1.0
    w["lm_head.weight"] = head
    attn = _layers(model)[0].self_attn
    window = spec.window
    layer_type = "sliding_attention" if window is not None else "full_attention"
    config = {
        "vocab_size": embed.size(0), "hidden_size": d,
        "intermediate_size": w["model.layers.0.mlp.gate_proj.weight"].size(0),
        "num_hidden_layers": spec.decoder_layers, "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads or spec.heads, "head_dim": d // spec.heads,
        "hidden_activation": GATES[spec.ffn], "max_position_embeddings": spec.max_positions,
        "rms_norm_eps": spec.norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(cast(Any, model.positions).base)},
        "attention_bias": attn.qkv.bias is not None, "query_pre_attn_scalar": d // spec.heads,
        # without a window every layer is full attention; Gemma 2 still wants a window size in its config
        "sliding_window": window or spec.max_positions, "layer_types": [layer_type] * spec.decoder_layers,
        "attn_logit_softcapping": getattr(attn, "cap", None),
        "final_logit_softcapping": getattr(model.logit_head, "cap", None),
        "attention_dropout": spec.attention_dropout, "tie_word_embeddings": False,
    }
    return HFModel("Gemma2ForCausalLM", "gemma2", config, w, notes)
