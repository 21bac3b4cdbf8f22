"""`ablate translate RUN_ID TEXT | --input FILE` and `ablate evaluate RUN_ID --src FILE --ref FILE`: decode
with the model of a tracked run, from the run's record alone.

The run's artifacts hold all it takes: ``spec.yaml`` (model shape, decoding settings),
``tokenizer/tokenizers.json`` (both tokenizers and the normalisation: lowercasing, source order, markers) and
``checkpoints/best.pt``; neither the training data nor its local cache is read. Runs recorded before the
tokenizers were logged fall back to rebuilding them from the data (the cache, or the dataset itself).
A run id may be given as a unique prefix (``ablate runs`` prints 8 characters).
"""

from __future__ import annotations

import gzip
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ablate.data.prepare import prepare_data
from ablate.data.tokenize import Tokenizers
from ablate.engine import metrics
from ablate.engine.decode import decode_batch, length_sorted_batches
from ablate.engine.dispatch import build_any
from ablate.engine.trainer import load_checkpoint
from ablate.errors import AblateError
from ablate.run.best_cell import chosen_run
from ablate.run.heldout import evaluate_text
from ablate.spec.load import load_spec
from ablate.tracking import download_artifacts, record, resolve_run_id

SPEC_ARTIFACT = record.SPEC_ARTIFACT
TOKENIZERS_ARTIFACT = record.TOKENIZERS_ARTIFACT
CHECKPOINT_ARTIFACT = record.CHECKPOINT_ARTIFACT
BATCH_SIZE = 64  # sentences decoded together (length-sorted, so batches carry little padding)


def _fetch(run_id: str, path: str) -> Path:
    return Path(download_artifacts(run_id, path))


def run_tokenizers(run_id: str, spec: object) -> Tokenizers:
    """The run's logged tokenizers; for older runs without them, the ones its data preparation gives."""
    try:
        path = _fetch(run_id, TOKENIZERS_ARTIFACT)
    except Exception:  # noqa: BLE001 - MLflow raises several types for a missing artifact
        return prepare_data(spec).tokenizers  # type: ignore[arg-type]
    return Tokenizers.load(path)


@dataclass
class RunModel:
    """A tracked run's model, ready to decode."""

    run_id: str
    spec: Any  # ExperimentSpec
    tok: Tokenizers
    model: torch.nn.Module


def load_run_model(run_id: str) -> RunModel:
    """The run's resolved spec, tokenizers and best checkpoint from MLflow, as an eval-mode model."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # keep stdout to translations
    run_id = resolve_run_id(run_id)
    try:
        spec_file = _fetch(run_id, SPEC_ARTIFACT)
        ckpt_file = _fetch(run_id, CHECKPOINT_ARTIFACT)
    except Exception as exc:  # MLflow raises several types for a missing run or artifact
        raise AblateError(
            f"run {run_id}: cannot fetch its {SPEC_ARTIFACT} and {CHECKPOINT_ARTIFACT} ({exc})") from None
    spec = load_spec(spec_file, check_hardware=False)  # a finished run: read, not trained here
    tok = run_tokenizers(run_id, spec)
    model = build_any(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=spec.seed)
    model.load_state_dict(load_checkpoint(ckpt_file)["model"])
    model.eval()
    return RunModel(run_id, spec, tok, model)


def unknown_words(tok: Tokenizers, text: str) -> list[str]:
    """The words of ``text`` the source tokenizer maps (in part) to <unk>: the model never sees them."""
    return [w for w in text.split() if tok.unk_id is not None and tok.unk_id in tok.encode_src(w)]


def translate(run: RunModel, texts: Sequence[str], beam: int | None = None,
              warn: Callable[[str], None] | None = None) -> list[str]:
    """Decode ``texts`` in length-sorted batches; ``warn`` receives one line per sentence with words the
    source vocabulary does not know (a silent <unk> would read as a bad translation)."""
    spec, tok = run.spec, run.tok
    decode_spec = spec.eval.decode
    if beam is not None:
        strategy = "beam" if beam > 1 else "greedy"
        decode_spec = decode_spec.model_copy(update={"strategy": strategy, "beam": beam})
    if warn is not None:
        for i, text in enumerate(texts):
            unknown = unknown_words(tok, text)
            if unknown:
                where = f"line {i + 1}: " if len(texts) > 1 else ""
                warn(f"{where}{len(unknown)} word(s) unknown to the run's source vocabulary, read as <unk>: "
                     + ", ".join(unknown[:10]) + (" ..." if len(unknown) > 10 else ""))
    # lowercasing, source reversal and bos/eos as in training; cut like val/test (positions in range)
    ids = [tok.model_src(t, spec.data.max_len - 2) or [tok.eos_id] for t in texts]
    out = [""] * len(texts)
    with torch.no_grad():
        for chunk, src in length_sorted_batches(ids, range(len(ids)), BATCH_SIZE, tok.pad_id):
            hyps = decode_batch(run.model, src, decode_spec, tok.bos_id, tok.eos_id)  # type: ignore[arg-type]
            for i, hyp in zip(chunk, hyps, strict=True):
                out[i] = tok.decode_tgt(hyp)
    return out


def translate_with_run(run_id: str, texts: list[str], beam: int | None = None) -> list[str]:
    """Load the run's model from MLflow and decode `texts` (see `translate`)."""
    return translate(load_run_model(run_id), texts, beam=beam)


def _warn(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr, flush=True)


def _read_lines(path: str) -> list[str]:
    """Sentences, one a line, from a file ('-': standard input); gzip by the .gz suffix."""
    if path == "-":
        return [line.rstrip("\n") for line in sys.stdin]

    try:
        opener: Any = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as handle:
            return [line.rstrip("\n") for line in handle]
    except OSError as exc:
        raise AblateError(f"cannot read {path}: {exc.strerror or exc}") from None


def main_translate(run_id: str | None, text: str | None, beam: int | None = None,
                   input_path: str | None = None, study: str | None = None, best: bool = False) -> int:
    """`ablate translate`: TEXT, or every line of ``--input FILE`` (or standard input), one output line
    each; ``--study STUDY --best``: the study's best cell instead of a RUN_ID."""
    if study is not None and run_id is not None and text is None:  # `--study S --best TEXT`: TEXT comes first
        run_id, text = None, run_id
    if text is not None and input_path is not None:
        raise AblateError("give TEXT or --input FILE, not both")
    if text is None and input_path is None:
        if sys.stdin.isatty():
            raise AblateError("nothing to translate: give TEXT, --input FILE, or sentences on standard input")
        input_path = "-"
    texts = [text] if text is not None else _read_lines(input_path or "-")
    run = load_run_model(chosen_run(run_id, study, best))
    if run.spec.model.arch == "decoder_only":
        raise AblateError(f"run {run.run_id} is a decoder-only language model: use `ablate generate`")
    for line in translate(run, texts, beam=beam, warn=_warn):
        print(line)
    return 0


def main_evaluate(run_id: str | None, src_path: str | None = None, ref_path: str | None = None,
                  text_path: str | None = None, beam: int | None = None, tasks: str | None = None,
                  include_path: str | None = None, fewshot: int = 0, limit: int | None = None,
                  study: str | None = None, best: bool = False) -> int:
    """`ablate evaluate RUN_ID --src FILE --ref FILE`: BLEU and chrF of a translation run's best checkpoint
    on a new test set, with sacreBLEU's signatures (so the numbers can be compared and recomputed);
    `ablate evaluate RUN_ID --text FILE`: a language model's perplexity and bits per byte on held-out text;
    `ablate evaluate RUN_ID --tasks a,b`: a language model on lm-evaluation-harness tasks;
    ``--study STUDY --best`` instead of a RUN_ID: the study's best cell."""
    if tasks is not None:
        if src_path is not None or ref_path is not None or text_path is not None:
            raise AblateError("give --tasks alone: lm-evaluation-harness tasks bring their own data")
        from ablate.run import downstream  # lazy: lm-eval is the optional interop extra

        section = downstream.tasks_from_command(tasks, include_path, fewshot, limit)
        run = load_run_model(chosen_run(run_id, study, best))
        return downstream.evaluate_tasks(run.run_id, run.model, run.spec, run.tok, section)
    if text_path is not None:
        if src_path is not None or ref_path is not None:
            raise AblateError("give --text FILE (a language model) or --src and --ref (a translation model)")

        run = load_run_model(chosen_run(run_id, study, best))
        return evaluate_text(run.run_id, run.model, run.spec, run.tok, text_path)
    if src_path is None or ref_path is None:
        raise AblateError("give --src FILE and --ref FILE (a translation model) or --text FILE (a language "
                          "model)")
    return _evaluate_translation(chosen_run(run_id, study, best), src_path, ref_path, beam)


def _evaluate_translation(run_id: str, src_path: str, ref_path: str, beam: int | None) -> int:
    sources, references = _read_lines(src_path), _read_lines(ref_path)
    if len(sources) != len(references):
        raise AblateError(f"{src_path} has {len(sources)} lines but {ref_path} has {len(references)}: "
                          "one reference per source sentence")
    if not sources:
        raise AblateError(f"{src_path} is empty: nothing to evaluate")
    run = load_run_model(run_id)
    if run.spec.model.arch == "decoder_only":
        raise AblateError(f"run {run.run_id} is a decoder-only language model: score it with "
                          f"`ablate evaluate {run_id} --text FILE` (perplexity, bits per byte)")
    unknown = sum(1 for s in sources if unknown_words(run.tok, s))
    hyps = translate(run, sources, beam=beam)
    sig = metrics.signatures()
    print(f"run {run.run_id} on {src_path} ({len(sources)} sentences)")
    print(f"  BLEU  {metrics.bleu(hyps, references):.2f}  {sig['bleu']}")
    print(f"  chrF  {metrics.chrf(hyps, references):.2f}  {sig['chrf']}")
    if unknown:
        print(f"  note: {unknown} source sentence(s) hold words unknown to the run's vocabulary")
    return 0
