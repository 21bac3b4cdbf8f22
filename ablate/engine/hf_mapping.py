"""A trained decoder-only model as the standard Hugging Face ``transformers`` class that computes the same
function: its ``config.json`` fields and its weights under that class's names, or a refusal naming the
component no standard class computes. ``ablate export-model`` (ablate/run/export_model.py) writes what
this returns; nothing here imports ``transformers``.

Four families, tried in this order (the first whose every component maps is taken):

* ``GPT2LMHeadModel`` (Radford et al. 2019): pre-norm LayerNorm (eps as given), absolute positions in a
  learned table ``wpe`` (a sinusoidal table is written into it: the same numbers; no positions: zeros),
  a fused-QKV multi-head attention with biases, Linear -> activation -> Linear with biases (relu, gelu,
  silu, relu2), no bias on the output projection.
* ``LlamaForCausalLM`` (Touvron et al. 2023): pre-norm RMSNorm, RoPE, a gated FFN (SwiGLU: ``silu``;
  GEGLU: ``gelu``), grouped keys and values, attention biases (``attention_bias: true``: ablate's four
  projections all have one), no bias on the output projection. ablate rotates the feature pairs
  ``(2i, 2i+1)`` of a head (Su et al., eq. 34), Llama's ``rotate_half`` the pairs ``(i, i + d_head/2)``:
  the query and key rows of each head are reordered (even features first, then odd ones), as Meta's
  checkpoints are converted, which leaves every score ``q . k`` unchanged.
* ``Gemma2ForCausalLM`` (Gemma Team 2024): ablate's ``sandwich`` residual (a norm before and after each
  sub-layer), RMSNorm (Gemma multiplies by ``1 + w``: each gain is stored minus one), RoPE, a gated FFN,
  grouped keys and values, and what only Gemma 2 has: soft-capped attention scores and final logits, and
  sliding-window attention (every layer a sliding layer when ``model.window`` is set); no output bias.
* ``CTRLLMHeadModel`` (Keskar et al. 2019): ablate's default language model, the tutorials' design as a
  decoder: pre-norm LayerNorm (eps 1e-6 inside the layers), sinusoidal positions added to token
  embeddings scaled by sqrt(d_model), ReLU FFN, biases everywhere, the output projection's bias included.
  CTRL's sinusoids are laid out ``[sin ..., cos ...]`` where ablate interleaves ``sin, cos``: the residual
  stream's features are permuted (every weight that reads or writes it, the norms' gains and biases),
  which is the same function with its hidden units renumbered.

What is folded, exactly: the token-embedding multiplier (sqrt(d_model), muP's) into the embedding table
(the output projection then gets its own copy), muP's output logit multiplier into the output projection,
muP's attention score scale into the query projection. What is refused: post-norm, DeepNorm, ReZero; the
hand-written LayerNorm and ScaleNorm; ALiBi and T5's bias (no class among these has them); QK-norm; soft
caps and windows outside Gemma 2's stack (Mistral's and Qwen2's windowed attention lacks the output
projection's bias); a non-zero output-projection bias where the class has none (``model.output_bias:
false`` trains without one). The checks read the spec's component names and the weights, never
approximate: a refusal says which field and why. The weights' layouts are ablate/engine/hf_weights.py's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.hf_weights import (
    ACTIVATIONS,
    GATES,
    HFModel,
    ctrl_export,
    gemma2_export,
    gpt2_export,
    llama_export,
)
from ablate.errors import AblateError
from ablate.spec.experiment import ModelSpec

CTRL_BLOCK_EPS = 1e-6  # CTRL's layer norms inside its blocks are built with eps 1e-6, not from its config
PLAIN_ATTENTION = ("sdpa", "explicit")  # the same function (explicit also keeps heat maps)


class ExportRefused(AblateError):
    """A model no standard class computes: one line naming the component (exit code 2)."""


Refusal = tuple[str, str]  # (the spec field and its value, why no class of the family computes it)


GEMMA2 = "Gemma2ForCausalLM (sandwich norms, RMSNorm, RoPE, a gated FFN)"


def _common(spec: ModelSpec) -> list[Refusal]:
    """What none of the pre-norm families (GPT-2, Llama, CTRL) computes."""
    out: list[Refusal] = []
    if spec.residual != "pre_norm":
        out.append((f"model.residual: {spec.residual}", "the standard causal LM classes are pre-norm "
                    "(x + f(norm(x)) and a final norm) or sandwich-norm (Gemma 2); none normalises after the "
                    "residual sum or scales it"))
    if spec.logits != "plain":
        out.append((f"model.logits: {spec.logits}", f"final-logit soft-capping maps only to {GEMMA2}"))
    if spec.attention not in PLAIN_ATTENTION:
        out.append((f"model.attention: {spec.attention}", "no standard class has this attention core "
                    f"(QK-norm with Henry et al.'s learned gain; soft-capped scores map only to {GEMMA2})"))
    if spec.window is not None:
        out.append((f"model.window: {spec.window}", f"sliding windows map to {GEMMA2}; Mistral's and Qwen2's "
                    "attention lack the output projection's bias that ablate's attention always has"))
    return out


def _bias_is_zero(model: DecoderOnlyLM) -> bool:
    bias = model.generator.bias
    return bias is None or not bool(bias.detach().any())


def _output_bias(model: DecoderOnlyLM, cls: str) -> list[Refusal]:
    if _bias_is_zero(model):
        return []
    return [("model.output_bias: true", f"the output projection's bias is trained (non-zero) and {cls}'s "
             "lm_head has none; train with model.output_bias: false")]


def _affine_norm(spec: ModelSpec, cls: str) -> list[Refusal]:
    if spec.norm != "builtin":
        return [(f"model.norm: {spec.norm}", f"{cls} uses torch's LayerNorm ((x - mean) / sqrt(var + eps), "
                 "biased variance, a gain and bias per feature)")]
    if spec.norm_affine != "per_feature":
        return [(f"model.norm_affine: {spec.norm_affine}", f"{cls}'s LayerNorm has a gain and bias per "
                 "feature, not one scalar each")]
    return []


def _mha(spec: ModelSpec, cls: str) -> list[Refusal]:
    if spec.kv_heads is not None and spec.kv_heads != spec.heads:
        return [(f"model.kv_heads: {spec.kv_heads}", f"{cls} has multi-head attention only (grouped keys and "
                 "values map to LlamaForCausalLM)")]
    return []


def _plain_ffn(spec: ModelSpec, cls: str, activations: tuple[str, ...]) -> list[Refusal]:
    if spec.ffn not in ("linear", "conv1d"):
        return [(f"model.ffn: {spec.ffn}", f"{cls}'s MLP is Linear -> activation -> Linear, not gated")]
    if spec.activation not in activations:
        return [(f"model.activation: {spec.activation}", f"{cls}'s MLP takes {', '.join(activations)}")]
    return []


def gpt2_refusals(model: DecoderOnlyLM, spec: ModelSpec) -> list[Refusal]:
    cls = "GPT2LMHeadModel"
    out = _common(spec) + _affine_norm(spec, cls) + _mha(spec, cls)
    if spec.positions not in ("learned", "sinusoidal", "none"):
        out.append((f"model.positions: {spec.positions}", f"{cls} adds a table of absolute positions "
                    "(learned, sinusoidal or none); rotary and relative biases are not tables"))
    out += _plain_ffn(spec, cls, tuple(ACTIVATIONS))
    return out + _output_bias(model, cls)


def llama_refusals(model: DecoderOnlyLM, spec: ModelSpec) -> list[Refusal]:
    cls = "LlamaForCausalLM"
    out = _common(spec)
    if spec.norm != "rms":
        out.append((f"model.norm: {spec.norm}", f"{cls} uses RMSNorm"))
    if spec.positions != "rope":
        out.append((f"model.positions: {spec.positions}", f"{cls} rotates queries and keys (RoPE) and adds "
                    "nothing else"))
    if spec.ffn not in GATES:
        out.append((f"model.ffn: {spec.ffn}", f"{cls}'s MLP is gated (SwiGLU or GEGLU, no biases)"))
    return out + _output_bias(model, cls)


def ctrl_refusals(model: DecoderOnlyLM, spec: ModelSpec) -> list[Refusal]:
    cls = "CTRLLMHeadModel"
    out = _common(spec) + _affine_norm(spec, cls) + _mha(spec, cls)
    if spec.norm == "builtin" and spec.norm_eps != CTRL_BLOCK_EPS:
        out.append((f"model.norm_eps: {spec.norm_eps:g}", f"{cls}'s layer norms inside its blocks have eps "
                    f"{CTRL_BLOCK_EPS:g}, whatever its config says"))
    if spec.positions != "sinusoidal":
        out.append((f"model.positions: {spec.positions}", f"{cls} adds fixed sinusoids"))
    return out + _plain_ffn(spec, cls, ("relu",))


def gemma2_refusals(model: DecoderOnlyLM, spec: ModelSpec) -> list[Refusal]:
    cls = "Gemma2ForCausalLM"
    out: list[Refusal] = []
    if spec.residual != "sandwich":
        out.append((f"model.residual: {spec.residual}", f"{cls} normalises each sub-layer's input and output "
                    "(sandwich)"))
    if spec.norm != "rms":
        out.append((f"model.norm: {spec.norm}", f"{cls} uses RMSNorm"))
    if spec.positions != "rope":
        out.append((f"model.positions: {spec.positions}", f"{cls} rotates queries and keys (RoPE)"))
    if spec.ffn not in GATES:
        out.append((f"model.ffn: {spec.ffn}", f"{cls}'s MLP is gated (GEGLU or SwiGLU, no biases)"))
    if spec.attention not in (*PLAIN_ATTENTION, "softcap"):
        out.append((f"model.attention: {spec.attention}", f"{cls}'s attention has no such core"))
    return out + _output_bias(model, cls)


FAMILIES: dict[str, tuple[Callable[[DecoderOnlyLM, ModelSpec], list[Refusal]],
                          Callable[[DecoderOnlyLM, ModelSpec], HFModel]]] = {
    "GPT2LMHeadModel": (gpt2_refusals, gpt2_export),
    "LlamaForCausalLM": (llama_refusals, llama_export),
    "Gemma2ForCausalLM": (gemma2_refusals, gemma2_export),
    "CTRLLMHeadModel": (ctrl_refusals, ctrl_export),
}


@torch.no_grad()
def to_transformers(model: nn.Module, spec: ModelSpec) -> HFModel:
    """The standard class computing ``model``'s function, its config and weights; :class:`ExportRefused`
    (one line: the component, why, and the closest class) where none does."""
    if not isinstance(model, DecoderOnlyLM):
        raise ExportRefused("model.arch: encoder_decoder: not exported; the standard encoder-decoder classes "
                            "(Marian, BART, Pegasus) use separate Q, K, V projections, sinusoids laid out "
                            "[sin, cos], LayerNorm eps 1e-5 fixed and their own embedding layouts, and no "
                            "mapping to them is checked yet")
    tried = {name: refusals(model, spec) for name, (refusals, _) in FAMILIES.items()}
    for name, reasons in tried.items():
        if not reasons:
            return FAMILIES[name][1](model, spec)
    closest = min(tried, key=lambda name: len(tried[name]))
    component, why = tried[closest][0]
    more = len(tried[closest]) - 1
    return_line = f"{component}: no standard transformers class computes it ({why}; closest class " \
                  f"{closest}" + (f", {more} more component(s) differ" if more else "") + ")"
    raise ExportRefused(return_line)
