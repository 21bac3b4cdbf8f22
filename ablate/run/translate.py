"""`ablate translate RUN_ID TEXT`: decode with the model of a tracked run, from the run's record alone.

The run's artifacts hold all it takes: ``spec.yaml`` (model shape, decoding settings),
``tokenizer/tokenizers.json`` (both tokenizers and the normalisation: lowercasing, source reversal) and
``checkpoints/best.pt``; neither the training data nor its local cache is read. Runs recorded before the
tokenizers were logged fall back to rebuilding them from the data (the cache, or the dataset itself).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ablate.data.tokenize import Tokenizers
from ablate.errors import AblateError

SPEC_ARTIFACT = "spec.yaml"
TOKENIZERS_ARTIFACT = "tokenizer/tokenizers.json"
CHECKPOINT_ARTIFACT = "checkpoints/best.pt"


def _fetch(run_id: str, path: str) -> Path:
    from ablate.tracking import download_artifacts

    return Path(download_artifacts(run_id, path))


def run_tokenizers(run_id: str, spec: object) -> Tokenizers:
    """The run's logged tokenizers; for older runs without them, the ones its data preparation gives."""
    try:
        path = _fetch(run_id, TOKENIZERS_ARTIFACT)
    except Exception:  # noqa: BLE001 - MLflow raises several types for a missing artifact
        from ablate.data.prepare import prepare_data

        return prepare_data(spec).tokenizers  # type: ignore[arg-type]
    return Tokenizers.load(path)


def translate_with_run(run_id: str, texts: list[str], beam: int | None = None) -> list[str]:
    """Load the run's resolved spec, tokenizers and best checkpoint from MLflow and decode `texts`."""
    from ablate.engine.decode import decode_batch
    from ablate.engine.model import build_model
    from ablate.engine.train import load_checkpoint
    from ablate.spec.load import load_spec

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # keep stdout to translations
    try:
        spec_file = _fetch(run_id, SPEC_ARTIFACT)
        ckpt_file = _fetch(run_id, CHECKPOINT_ARTIFACT)
    except Exception as exc:  # MLflow raises several types for a missing run or artifact
        raise AblateError(
            f"run {run_id}: cannot fetch its {SPEC_ARTIFACT} and {CHECKPOINT_ARTIFACT} ({exc})") from None
    spec = load_spec(spec_file, check_hardware=False)  # a finished run: read, not trained here
    tok = run_tokenizers(run_id, spec)
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
            # lowercasing and source reversal as in training; truncated like val/test (positions in range)
            ids = tok.model_src(text)[: spec.data.max_len - 2]
            src = torch.tensor([ids], dtype=torch.long)  # (1, S)
            hyp = decode_batch(model, src, decode_spec, tok.bos_id, tok.eos_id)[0]
            out.append(tok.decode_tgt(hyp))
    return out
