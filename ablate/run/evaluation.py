"""The end of a run's training: its best checkpoint evaluated on the whole val and test splits, with
samples, the checkpoint and the model logged as the spec asks; with train.weight_average, the averaged
weights on the same splits too (ablate/engine/averaging.py), a second reading of the same run."""

from __future__ import annotations

import platform
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ablate.data.prepare import PreparedData
from ablate.engine.averaging import load_weights
from ablate.engine.checkpoint import load_verified
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.encoder_decoder import Seq2SeqTransformer
from ablate.engine.evaluate import Translations, evaluate, has_split, samples_text
from ablate.engine.metrics import steps_to_target
from ablate.engine.trainer import Trainer
from ablate.hardware import resolve_precision
from ablate.spec.experiment import ExperimentSpec
from ablate.tracking import record, translations

if TYPE_CHECKING:
    from ablate.tracking import NullTracker

Model = Seq2SeqTransformer | DecoderOnlyLM


def final_evaluation(spec: ExperimentSpec, data: PreparedData, model: Model, trainer: Trainer,
                     tracker: NullTracker, device: torch.device) -> dict[str, float]:
    """Evaluate the best checkpoint (by the validation metric) on the whole val and test splits (no
    ``eval.max_sentences`` cap); log samples and artifacts."""
    best = load_verified(trainer.best_path)  # a torn best.pt is one line, not a zip-reader traceback
    if best is not None:
        model.load_state_dict(best[0]["model"])
    precision = resolve_precision(spec.train.precision, device)
    out: dict[str, float] = {}
    decoded: dict[str, Translations] = {}
    for split in ("val", "test"):
        if has_split(data, split):
            out.update(evaluate(model, data, split, spec, device, precision, decode=True, limit=None,
                                keep=decoded))
    if data.is_text:
        log_translations(tracker, decoded)
    if spec.eval.samples:
        tracker.log_text(samples_text(model, data, spec, device), record.SAMPLES_ARTIFACT)
    if spec.tracking.log_checkpoint and trainer.best_path.exists():
        tracker.log_artifact(trainer.best_path, record.CHECKPOINT_DIR)
    if spec.tracking.log_model:
        tracker.log_model(model)
    if spec.eval.downstream is not None and isinstance(model, DecoderOnlyLM):
        out.update(downstream_evaluation(spec, data, model, device))
    out.update(averaged_evaluation(spec, data, model, trainer, device, precision))
    if spec.eval.target_loss is not None:  # from the evaluations during training, not the best checkpoint
        out[record.VAL_STEPS_TO_TARGET] = steps_to_target(trainer.state.history, spec.eval.target_loss,
                                                     trainer.total_steps)
    return out


def downstream_evaluation(spec: ExperimentSpec, data: PreparedData, model: DecoderOnlyLM,
                          device: torch.device) -> dict[str, float]:
    """eval.downstream's lm-evaluation-harness tasks on the best checkpoint (downstream/<task>/acc, ...)."""
    from ablate.run import downstream  # lazy: lm-eval is the optional interop extra, asked for by the spec

    assert spec.eval.downstream is not None
    out: dict[str, float] = {}
    for scores in downstream.downstream_scores(model, data.tokenizers, spec.eval.downstream, device):
        out.update(scores.metrics())
    return out


def averaged_evaluation(spec: ExperimentSpec, data: PreparedData, model: Model, trainer: Trainer,
                        device: torch.device, precision: str) -> dict[str, float]:
    """With train.weight_average: the averaged weights on the whole val and test splits, under the
    averaged names ('val/averaged/bleu'), after everything the best checkpoint's reading logs (the model is
    left holding the averaged weights). Nothing without the option, or before any snapshot was taken."""
    weights = trainer.averager.averaged() if trainer.averager is not None else None
    if weights is None:
        return {}
    load_weights(model, weights)
    out: dict[str, float] = {}
    for split in ("val", "test"):
        if has_split(data, split):
            measured = evaluate(model, data, split, spec, device, precision, decode=True, limit=None)
            out.update({record.averaged(name): value for name, value in measured.items()})
    return out


def log_translations(tracker: NullTracker, decoded: dict[str, Translations]) -> None:
    """Each split's final hypotheses with their references (``record.translations_artifact``): what the
    report's paired bootstrap resamples (`ablate.report.sections.sampling`)."""
    with tempfile.TemporaryDirectory() as tmp:
        for split, tr in decoded.items():
            tracker.log_artifact(translations.write(Path(tmp), split, tr.hypotheses, tr.references),
                                 record.TRANSLATIONS_DIR)


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)

    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
