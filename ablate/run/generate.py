"""`ablate generate RUN_ID --prompt TEXT [--greedy | --temperature T] [--top-k K]` (or ``--study STUDY
--best`` for a study's best cell): continue a prompt with the best checkpoint of a tracked decoder-only
run, through the KV-cached decoder (:func:`ablate.engine.lm_eval.generate`); the run's record alone
suffices (ablate/run/translate.py's ``load_run_model``: spec, tokenizer and checkpoint artifacts)."""

from __future__ import annotations

import torch

from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.lm_eval import generate
from ablate.errors import AblateError
from ablate.run.best_cell import chosen_run
from ablate.run.translate import load_run_model


def main_generate(run_id: str | None, prompt: str, max_new: int = 64, greedy: bool = False,
                  temperature: float = 1.0, top_k: int | None = None, seed: int = 0, study: str | None = None,
                  best: bool = False) -> int:
    """Print the prompt and its continuation, one text as the run's tokenizer reads the prompt (a user
    sees what the model continued, not a fragment that starts mid-sentence); ``study`` with ``best``: the
    study's best cell (ablate/run/best_cell.py) instead of a RUN_ID."""
    if max_new < 1:
        raise AblateError(f"--max-new must be at least 1, found {max_new}")
    if temperature <= 0 and not greedy:
        raise AblateError(f"--temperature must be positive, found {temperature} (use --greedy for argmax)")
    if top_k is not None and top_k < 1:
        raise AblateError(f"--top-k must be at least 1, found {top_k}")
    run = load_run_model(chosen_run(run_id, study, best))
    if not isinstance(run.model, DecoderOnlyLM):
        raise AblateError(f"run {run.run_id} is an encoder-decoder translation model: use `ablate translate`")
    tok = run.tok
    ids = [tok.bos_id, *tok.encode_tgt(prompt)] if prompt.strip() else [tok.bos_id]
    run.model.check_length(len(ids))
    out = generate(run.model, ids, max_new, temperature=temperature, top_k=top_k, greedy=greedy,
                   eos_id=tok.eos_id, generator=torch.Generator().manual_seed(seed))
    print(tok.decode_tgt([*ids[1:], *out]))  # the prompt's tokens (without bos), then the new ones
    return 0
