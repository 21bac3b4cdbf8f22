"""The model a spec's ``model`` section names, either architecture: the one choice between the two
builders of ``ablate/engine/builders.py``, made by ``model.arch``. ``ablate.build_model``, the runner, the
logged model's reload, the bench and the attention maps all build through it.
"""

from __future__ import annotations

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
