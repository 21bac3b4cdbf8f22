"""Attention maps of a finished run that used ``model.attention: explicit``, for the report's heat maps
(ablate/report/sections/attention_maps.py draws them): the run's logged spec and best checkpoint are
loaded, one example is run through the model (a test, else val, sentence pair of an encoder-decoder; the
opening tokens of a document of a decoder-only language model) and each role's last layer is averaged
over heads.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ablate.data.lm_corpus import LMData
from ablate.data.prepare import prepare_data
from ablate.engine.dispatch import build_any
from ablate.engine.trainer import load_checkpoint
from ablate.spec.load import load_spec
from ablate.tracking.read import download_artifact

LONGEST = 24  # tokens a side that still make a readable map


@dataclass(frozen=True)
class AttentionMaps:
    """Each role's last-layer map, head-averaged (Tq, Tk), its (query, key) token labels and what it shows."""

    maps: dict[str, np.ndarray]
    labels: dict[str, tuple[list[str], list[str]]]
    caption: str


def attention_of_run(run_id: str) -> AttentionMaps:
    """The maps of one example through the run's best checkpoint, either architecture."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = download_artifact(run_id, "spec.yaml", tmp)
        ckpt_file = download_artifact(run_id, "checkpoints/best.pt", tmp)
        if spec_file is None or ckpt_file is None:
            raise FileNotFoundError("the run has no spec.yaml or checkpoints/best.pt artifact")
        spec = load_spec(spec_file, check_hardware=False)  # a finished run: read, not trained here
        state = load_checkpoint(ckpt_file)["model"]
    data = prepare_data(spec)
    tok = data.tokenizers
    model = build_any(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=spec.seed)
    model.load_state_dict(state)
    if isinstance(data, LMData):
        return _document_maps(model, data)
    return _sentence_maps(model, data)


def _sentence_maps(model: Any, data: Any) -> AttentionMaps:
    tok = data.tokenizers
    split_name = "test" if "test" in data.splits and data.splits["test"].src_ids else "val"
    split = data.splits[split_name]
    # The longest of the first 100 sentences that still fits a readable map.
    fits = [i for i in range(min(100, len(split.src_ids)))
            if len(split.src_ids[i]) <= LONGEST and len(split.tgt_ids[i]) <= LONGEST - 1]
    pick = max(fits or [0], key=lambda i: (len(split.src_ids[i]) + len(split.tgt_ids[i]), -i))
    src_ids, tgt_ids = list(split.src_ids[pick]), [tok.bos_id, *split.tgt_ids[pick]]
    maps = model.attention_maps(torch.tensor([src_ids]), torch.tensor([tgt_ids]))
    src_labels = [_token(tok.decode_src, i, tok) for i in src_ids]
    tgt_labels = [_token(tok.decode_tgt, i, tok) for i in tgt_ids]
    labels = {"encoder_self": (src_labels, src_labels), "decoder_self": (tgt_labels, tgt_labels),
              "cross": (tgt_labels, src_labels)}
    return AttentionMaps(_last_layer(maps), labels,
                         f"attention of the last layer (mean over heads) on {split_name} sentence {pick}; "
                         "encoder self, decoder self, cross (queries: target prefix, keys: source)")


def _document_maps(model: Any, data: LMData) -> AttentionMaps:
    tok = data.tokenizers
    split_name = "test" if len(data.documents.get("test", data.documents["val"]).docs) else "val"
    docs = data.documents.get(split_name, data.documents["val"]).docs
    pick = next((i for i in range(len(docs)) if len(docs[i]) >= 2), 0)
    ids = [int(i) for i in docs[pick][:LONGEST]]
    maps = model.attention_maps(torch.tensor([ids]))
    labels = [_token(tok.decode_tgt, i, tok) for i in ids]
    return AttentionMaps(_last_layer(maps), {"decoder_self": (labels, labels)},
                         f"causal self-attention of the last layer (mean over heads) on the first {len(ids)} "
                         f"tokens of {split_name} document {pick}")


def _last_layer(maps: dict[str, list[torch.Tensor]]) -> dict[str, np.ndarray]:
    # The last layer, averaged over heads: (heads, Tq, Tk) -> (Tq, Tk).
    return {k: np.asarray(v[-1].float().mean(0).cpu()) for k, v in maps.items()}


def _token(decode: Any, i: int, tok: Any) -> str:
    special = {tok.pad_id: "<pad>", tok.bos_id: "<s>", tok.eos_id: "</s>", tok.unk_id: "<unk>"}
    if i in special:
        return special[i]
    text = str(decode([i])).strip()
    return text or f"#{i}"
