"""The model a spec's ``model`` section names, either architecture: the one choice between the two
builders of ``ablate/engine/builders.py``, made by ``model.arch``. ``ablate.build_model``, the runner, the
logged model's reload, the bench and the attention maps all build through it; ``train.compile_scope: layer``
compiles either one layer by layer (:func:`compile_layers`).
"""

from __future__ import annotations

from typing import Any

import torch

from ablate.engine.builders import build_lm, build_model
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.encoder_decoder import Seq2SeqTransformer
from ablate.spec.experiment import ModelSpec


def build_any(model_spec: ModelSpec, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0,
              seed: int = 0) -> Seq2SeqTransformer | DecoderOnlyLM:
    """The model ``model.arch`` names: :func:`~ablate.engine.builders.build_model`'s encoder-decoder, or a
    :class:`DecoderOnlyLM` over the (one) target vocabulary."""
    if model_spec.arch == "decoder_only":
        return build_lm(model_spec, tgt_vocab_size, pad_id=pad_id, seed=seed)
    return build_model(model_spec, src_vocab_size, tgt_vocab_size, pad_id=pad_id, seed=seed)


def compile_layers(model: Seq2SeqTransformer | DecoderOnlyLM, mode: str | None) -> None:
    """``train.compile_scope: layer``: each layer compiled in place (``nn.Module.compile``, state dict as is),
    as torchtitan compiles per block; evaluation runs them eager (:func:`eager`)."""
    stacks = [model.decoder] if isinstance(model, DecoderOnlyLM) else [model.encoder, model.decoder]
    for stack in stacks:
        for layer in stack.layers:
            layer.compile(mode=mode)


def eager() -> Any:
    """Compiled layers run eager outside the step: each shape an evaluation meets would be a recompile."""
    return torch.compiler.set_stance("force_eager")
