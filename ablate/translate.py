"""`ablate translate RUN_ID TEXT`: decode with the model of a tracked run."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ablate.errors import AblateError


def translate_with_run(run_id: str, texts: list[str], beam: int | None = None) -> list[str]:
    """Load the run's resolved spec and best checkpoint from MLflow, rebuild the tokenizers and decode."""
    from ablate.data import prepare_data
    from ablate.decode import decode_batch
    from ablate.model import build_model
    from ablate.specload import load_spec
    from ablate.tracking import download_artifacts
    from ablate.train import load_checkpoint

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # keep stdout to translations
    try:
        spec_file = Path(download_artifacts(run_id, "spec.yaml"))
        ckpt_file = Path(download_artifacts(run_id, "checkpoints/best.pt"))
    except Exception as exc:  # MLflow raises several types for a missing run or artifact
        raise AblateError(
            f"run {run_id}: cannot fetch its spec.yaml and checkpoints/best.pt ({exc})") from None
    spec = load_spec(spec_file)
    data = prepare_data(spec)  # tokenizers come from the on-disk cache when the data is unchanged
    tok = data.tokenizers
    model = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=spec.seed)
    model.load_state_dict(load_checkpoint(ckpt_file)["model"])
    model.eval()
    decode_spec = spec.eval.decode
    if beam is not None:
        strategy = "beam" if beam > 1 else "greedy"
        decode_spec = decode_spec.model_copy(update={"strategy": strategy, "beam": beam})
    out = []
    with torch.no_grad():
        for text in texts:
            ids = tok.model_src(text)  # lowercasing and source reversal as in training
            src = torch.tensor([ids], dtype=torch.long)
            hyp = decode_batch(model, src, decode_spec, tok.bos_id, tok.eos_id)[0]
            out.append(tok.decode_tgt(hyp))
    return out
