"""Token embeddings and the output projection, separate or tied (axis ``embeddings``).

Component contract: a factory ``fn(src_vocab: int, tgt_vocab: int, d_model: int, *, output_bias: bool) ->
(src_embed: nn.Embedding, tgt_embed: nn.Embedding, generator: nn.Linear)`` whose result may share tensors
(``output_bias``: whether the output projection has a bias, the axis's one option); attribute
``needs_joint_vocabulary: bool`` (the spec refuses it unless ``data.tokenizer.joint: true``); optional
attribute ``decoder_only: bool`` (default true), false for a variant that only means something with a
source side (a decoder-only model uses ``tgt_embed`` and ``generator``; the spec refuses the others).
The builder keeps the model's attribute names (``src_embed``, ``tgt_embed``, ``generator``) whatever
the variant, and controlled init draws a shared tensor once, under the first name it is registered with.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from registry import Axis, Option, declare_axis, register

AXIS = declare_axis(Axis(
    kind="embeddings",
    default="separate",
    doc="which of the source embedding, target embedding and output projection share one matrix",
    contract="fn(src_vocab, tgt_vocab, d_model) -> (src_embed, tgt_embed, generator); needs_joint_vocabulary",
    hooks=("model build: the two embedding tables and the output projection",),
    options=(Option(
        "output_bias", bool, True,
        "a bias on the output projection, logits = h W^T + b (the tutorials'); false: logits = h W^T, as "
        "GPT-2, LLaMA and nanoGPT, which `ablate export-model` can then map to GPT2LMHeadModel or Llama",
        added_later=True),),
))

Embeddings = tuple[nn.Embedding, nn.Embedding, nn.Linear]


def _needs_joint(flag: bool) -> Callable[[Callable[..., Embeddings]], Callable[..., Embeddings]]:
    def mark(fn: Callable[..., Embeddings]) -> Callable[..., Embeddings]:
        fn.needs_joint_vocabulary = flag  # type: ignore[attr-defined]
        return fn

    return mark


def _check_joint(name: str, src_vocab: int, tgt_vocab: int) -> None:
    if src_vocab != tgt_vocab:
        raise ValueError(
            f"embeddings {name!r} need one vocabulary; found {src_vocab} source and {tgt_vocab} target "
            "tokens (use a joint tokenizer: data.tokenizer.joint: true)"
        )


@register("embeddings", "separate")
@_needs_joint(False)
def separate(src_vocab: int, tgt_vocab: int, d_model: int, output_bias: bool = True) -> Embeddings:
    """Three separate matrices: source embedding, target embedding, output projection (with a bias unless
    ``output_bias`` is off), as in all five tutorials."""
    return (nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model),
            nn.Linear(d_model, tgt_vocab, bias=output_bias))


@register("embeddings", "tied_decoder")
@_needs_joint(False)
def tied_decoder(src_vocab: int, tgt_vocab: int, d_model: int, output_bias: bool = True) -> Embeddings:
    """Decoder input embedding and output projection tied (Press & Wolf 2017, "Using the Output Embedding
    to Improve Language Models", section 3): ``logits = h E_tgt^T + b``; the source keeps its own matrix,
    so the vocabularies may differ."""
    tgt = nn.Embedding(tgt_vocab, d_model)
    generator = nn.Linear(d_model, tgt_vocab, bias=output_bias)
    generator.weight = tgt.weight  # (V_tgt, d)
    return nn.Embedding(src_vocab, d_model), tgt, generator


@register("embeddings", "tied")
@_needs_joint(True)
def tied(src_vocab: int, tgt_vocab: int, d_model: int, output_bias: bool = True) -> Embeddings:
    """All three share one matrix: source embedding, target embedding and output projection (Vaswani et
    al. 2017, section 3.4, with a joint BPE vocabulary; Press & Wolf 2017): ``logits = h E^T + b``."""
    _check_joint("tied", src_vocab, tgt_vocab)
    src = nn.Embedding(src_vocab, d_model)
    generator = nn.Linear(d_model, tgt_vocab, bias=output_bias)
    generator.weight = src.weight  # (V, d)
    return src, src, generator


@register("embeddings", "shared")
@_needs_joint(True)
def shared(src_vocab: int, tgt_vocab: int, d_model: int, output_bias: bool = True) -> Embeddings:
    """Source and target embeddings share one matrix over a joint vocabulary; the output projection keeps
    its own (all three shared is ``tied``)."""
    _check_joint("shared", src_vocab, tgt_vocab)
    src = nn.Embedding(src_vocab, d_model)
    return src, src, nn.Linear(d_model, tgt_vocab, bias=output_bias)


shared.decoder_only = False  # type: ignore[attr-defined]  # ties source to target: no source in an LM
