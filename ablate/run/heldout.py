"""`ablate evaluate RUN --text FILE`: a finished language-model run scored on one's own held-out text.

The file is cut into documents as the run's spec cut its own text (``data.text.documents``, or
``document_lines`` lines at a time), tokenized with the run's tokenizer, and scored by the same code as the
run's validation split (``engine.lm_eval.evaluate_lm``): perplexity and bits per byte at the training length,
and the perplexity at each of the spec's ``eval.lengths``.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import torch

from ablate.data.corpus import DataError, check_text_file
from ablate.data.lm_corpus import LMData, LMSplit, cut_documents
from ablate.data.tokenize import Tokenizers
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.lm_eval import evaluate_lm
from ablate.errors import AblateError
from ablate.spec.experiment import ExperimentSpec

SPLIT = "text"  # the metric names' prefix: text/ppl, text/bpb


def text_split(spec: ExperimentSpec, tok: Tokenizers, path: Path) -> LMSplit:
    """The file's documents, tokenized as the run's own text was."""
    try:
        check_text_file(path, blank_lines=True)  # UTF-8, no stray carriage return: the bad line named
    except DataError as exc:
        raise AblateError(str(exc)) from None
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8-sig") as handle:
        lines = [line.rstrip("\n") for line in handle]
    docs = cut_documents(lines, spec.data)
    if not docs:
        raise AblateError(f"{path}: no text to score (the file holds only blank lines)")
    return LMSplit.from_lists(tok.encode_tgt_batch(docs), docs, bos_id=tok.bos_id, eos_id=tok.eos_id)


def evaluate_text(run_id: str, model: torch.nn.Module, spec: ExperimentSpec, tok: Tokenizers,
                  text_path: str) -> int:
    """Print the run's perplexity and bits per byte on ``text_path`` (the run's model, spec, tokenizer)."""
    if not isinstance(model, DecoderOnlyLM):
        raise AblateError(f"run {run_id} is an encoder-decoder translation model: score it with "
                          f"`ablate evaluate {run_id} --src FILE --ref FILE` (BLEU, chrF)")
    path = Path(text_path)
    if not path.is_file():
        raise AblateError(f"--text: file not found: {path.resolve()}")
    part = text_split(spec, tok, path)
    data = LMData(tok, {}, "", path.name, True, str(path), {}, documents={SPLIT: part},
                  block_len=spec.data.max_len)
    with torch.no_grad():
        scores = evaluate_lm(model, data, SPLIT, spec, torch.device("cpu"), "fp32")
    mode = (spec.data.text.documents if spec.data.text is not None else None) or "lines"
    print(f"run {run_id} on {path} ({len(part.docs)} documents, cut as {mode}; {part.n_targets} tokens)")
    print(f"  perplexity     {scores[f'{SPLIT}/ppl']:.2f}  (windows of {data.block_len} tokens, the training "
          "length)")
    print(f"  bits per byte  {scores[f'{SPLIT}/bpb']:.4f}")
    for name, value in sorted(scores.items()):
        if name.startswith(f"{SPLIT}/ppl_at_"):
            print(f"  {name[len(SPLIT) + 1:]:<14} {value:.2f}")
    return 0
