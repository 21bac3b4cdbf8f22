"""The two model builders, thin: each asks :class:`~ablate.engine.components.Components` for the registry
components a model section names and arranges them into its skeleton, then draws the parameters
(:func:`~ablate.engine.components.initialise`) and applies the parametrisation (``ablate/engine/
parametrise.py``: muP's multipliers against a base model). :func:`build_model` makes the encoder-decoder
(``ablate/engine/encoder_decoder.py``), :func:`build_lm` the decoder-only language model
(``ablate/engine/decoder_only.py``); ``ablate/engine/dispatch.py`` chooses between them by ``model.arch``.
Both hand their Linear layers' float32 CPU products to oneDNN where that is the faster library
(``ablate/engine/cpu_gemm.py``: the same function, parameters and state dict).
"""

from __future__ import annotations

from typing import cast

from torch import nn

from ablate.engine import parametrise
from ablate.engine.components import Components, Stack, initialise
from ablate.engine.cpu_gemm import route_linears
from ablate.engine.decoder_only import DecoderOnlyLM, LMLayer
from ablate.engine.encoder_decoder import DecoderLayer, EncoderLayer, Seq2SeqTransformer
from ablate.spec.experiment import ModelSpec
from registry.attention import MultiHeadAttention
from registry.residual import Depth


def build_model(
    model_spec: ModelSpec, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0, seed: int = 0
) -> Seq2SeqTransformer:
    """Assemble a :class:`Seq2SeqTransformer` from the registry components the spec names
    (:class:`Components`)."""
    s, make = model_spec, Components(model_spec)

    def depth(stack: str) -> Depth:
        return Depth(stack, s.encoder_layers, s.decoder_layers)

    encoder = Stack([EncoderLayer(make.attention(), make.ffn(), *make.residuals(2, depth("encoder")))
                     for _ in range(s.encoder_layers)], make.stack_norm())
    decoder = Stack([DecoderLayer(make.attention(), make.attention(cross=True), make.ffn(),
                                  *make.residuals(3, depth("decoder")))
                     for _ in range(s.decoder_layers)], make.stack_norm())
    src_embed, tgt_embed, generator = make.embeddings(src_vocab_size, tgt_vocab_size)
    model = Seq2SeqTransformer(
        src_embed, tgt_embed, make.positions(causal=False), make.positions(causal=True),
        encoder, decoder, generator, make.mask(), pad_id=pad_id, embed_scale=make.embed_scale,
        embed_dropout=make.embedding_dropout(), logits=make.logits(),
    )
    initialise(model, [*encoder.layers, *decoder.layers], seed, s.init)
    attention = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    parametrise.apply(model, s, make.parametrisation(),
                      lambda base: build_model(base, src_vocab_size, tgt_vocab_size, pad_id, seed), attention)
    return cast(Seq2SeqTransformer, route_linears(model))


def build_lm(model_spec: ModelSpec, vocab_size: int, pad_id: int = 0, seed: int = 0) -> DecoderOnlyLM:
    """Assemble a :class:`DecoderOnlyLM` of ``model_spec.decoder_layers`` layers from the registry.

    Its components are the ones :class:`~ablate.engine.components.Components` builds for the encoder-decoder
    too; parameters are drawn by :func:`~ablate.engine.components.initialise` (seeded per name and shape, then
    a residual's ``init_sublayer`` hook: DeepNorm's beta with the decoder-only depth).
    """
    s, make = model_spec, Components(model_spec)
    depth = Depth("decoder", 0, s.decoder_layers)  # no encoder: DeepNet's decoder-only constants
    layers = [LMLayer(make.attention(), make.ffn(), *make.residuals(2, depth))
              for _ in range(s.decoder_layers)]
    decoder = Stack(cast(list[nn.Module], layers), make.stack_norm())
    _, embed, generator = make.embeddings(vocab_size, vocab_size)
    model = DecoderOnlyLM(
        embed, make.positions(causal=True), decoder, generator, make.mask(), pad_id=pad_id,
        embed_scale=make.embed_scale, embed_dropout=make.embedding_dropout(), logits=make.logits(),
        window=s.window,
    )
    initialise(model, layers, seed, s.init)
    parametrise.apply(model, s, make.parametrisation(), lambda base: build_lm(base, vocab_size, pad_id, seed),
                      model.attention_modules()["decoder_self"])
    return cast(DecoderOnlyLM, route_linears(model))
