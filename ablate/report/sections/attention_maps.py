"""Attention heat maps of a finished run that used ``model.attention: explicit``: the logged spec and best
checkpoint are loaded, one test (else val) sentence is run through the model, and the last layer's
head-averaged maps are drawn. Optional: a failure becomes a note, never a failed report.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ablate.report import plots as figs
from ablate.report.render import Figure, Note, Section
from ablate.report.section_api import Inputs, Part


def part(inp: Inputs) -> Part | None:
    """Heat maps for one sample when a finished run used ``model.attention: explicit``. Never fatal, and
    never ``failed``: a figure that cannot be drawn is an optional extra, so a note says why."""
    study = inp.study
    candidates = [r for r in study.runs
                  if r.status == "finished" and r.params.get("model.attention") == "explicit"]
    if not candidates:
        return None
    run = candidates[0]
    try:
        caption = draw_attention(run.run_id, inp.fig_dir / "attention.png")
    except Exception as exc:  # noqa: BLE001 - an optional figure: report why, keep the report
        why = f"{type(exc).__name__}: {exc}"
        return Part("attention", [Section("Attention", [Note(
            f"attention maps of run {run.variant} (seed {run.seed}) could not be drawn: {why}", "info")])])
    return Part("attention", [Section("Attention", [Figure("figures/attention.png",
                                                           f"{run.variant}, seed {run.seed}: {caption}")])])


def draw_attention(run_id: str, path: Path) -> str:
    import torch

    from ablate.data.prepare import prepare_data
    from ablate.engine.builders import build_model
    from ablate.engine.trainer import load_checkpoint
    from ablate.spec.load import load_spec
    from ablate.tracking.read import download_artifact

    with tempfile.TemporaryDirectory() as tmp:
        spec_file = download_artifact(run_id, "spec.yaml", tmp)
        ckpt_file = download_artifact(run_id, "checkpoints/best.pt", tmp)
        if spec_file is None or ckpt_file is None:
            raise FileNotFoundError("the run has no spec.yaml or checkpoints/best.pt artifact")
        spec = load_spec(spec_file, check_hardware=False)  # a finished run: read, not trained here
        state = load_checkpoint(ckpt_file)["model"]
    data = prepare_data(spec)
    tok = data.tokenizers
    model = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=spec.seed)
    model.load_state_dict(state)
    split_name = "test" if "test" in data.splits and data.splits["test"].src_ids else "val"
    split = data.splits[split_name]
    # The longest of the first 100 sentences that still fits a readable map (<= 24 tokens each side).
    fits = [i for i in range(min(100, len(split.src_ids)))
            if len(split.src_ids[i]) <= 24 and len(split.tgt_ids[i]) <= 23]
    pick = max(fits or [0], key=lambda i: (len(split.src_ids[i]) + len(split.tgt_ids[i]), -i))
    src_ids, tgt_ids = list(split.src_ids[pick]), [tok.bos_id, *split.tgt_ids[pick]]
    maps = model.attention_maps(torch.tensor([src_ids]), torch.tensor([tgt_ids]))
    src_labels = [_token(tok.decode_src, i, tok) for i in src_ids]
    tgt_labels = [_token(tok.decode_tgt, i, tok) for i in tgt_ids]
    # The last layer, averaged over heads: (heads, Tq, Tk) -> (Tq, Tk).
    last = {k: np.asarray(v[-1].float().mean(0).cpu()) for k, v in maps.items()}
    labels = {"encoder_self": (src_labels, src_labels), "decoder_self": (tgt_labels, tgt_labels),
              "cross": (tgt_labels, src_labels)}
    figs.attention_heatmaps(last, labels, path)
    return (f"attention of the last layer (mean over heads) on {split_name} sentence {pick}; "
            "encoder self, decoder self, cross (queries: target prefix, keys: source)")


def _token(decode: Any, i: int, tok: Any) -> str:
    special = {tok.pad_id: "<pad>", tok.bos_id: "<s>", tok.eos_id: "</s>", tok.unk_id: "<unk>"}
    if i in special:
        return special[i]
    text = str(decode([i])).strip()
    return text or f"#{i}"
