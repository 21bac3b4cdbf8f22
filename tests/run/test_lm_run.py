"""A decoder-only run end to end: `run_experiment` trains it on packed blocks, records its perplexities by
evaluation length and bits per byte under the record's names, and `ablate generate` continues a prompt
from the run's record alone, exactly as the cached decoder does on the checkpoint."""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from ablate.data.lm_corpus import prepare_lm
from ablate.engine.builders import build_lm
from ablate.engine.lm_eval import generate
from ablate.engine.trainer import load_checkpoint
from ablate.errors import AblateError
from ablate.run.generate import main_generate
from ablate.run.runner import run_experiment
from ablate.run.translate import main_translate
from ablate.spec import metricnames
from ablate.spec.experiment import ExperimentSpec
from ablate.tracking import record
from tests.stores import mlflow_store

pytestmark = pytest.mark.usefixtures("single_thread")


def test_an_lm_run_records_its_metrics_and_generates_from_its_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    uri = mlflow_store(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    spec = ExperimentSpec.model_validate({
        "name": "lm-run", "tracking": {"experiment": "lm-run"},
        "data": {"source": "synthetic", "document_lines": 10, "max_len": 16, "batch_tokens": 128,
                 "synthetic": {"task": "recall", "vocab_size": 12, "min_len": 2, "max_len": 4,
                               "train_size": 300, "val_size": 40, "test_size": 20}},
        "model": {"arch": "decoder_only", "d_model": 16, "heads": 2, "d_ff": 32, "decoder_layers": 1,
                  "dropout": 0.0, "positions": "alibi", "max_positions": 64},
        "train": {"max_steps": 12, "eval_every": 6, "schedule": {"warmup_steps": 2}},
        "eval": {"lengths": [16, 32], "sliding_stride": 8, "samples": 2},
    })
    result = run_experiment(spec, quiet=True)
    assert result.status == "finished" and result.run_id is not None
    for name in ("val/loss", "val/ppl", "val/bpb", "val/ppl_at_16", "val/ppl_at_32_sliding", "test/bpb"):
        assert name in result.metrics, name
    assert result.metrics[record.PADDING] == 0.0  # packed blocks
    assert result.metrics["val/ppl_at_16"] == result.metrics["val/ppl"]  # 16 is the training length
    # the growth past the training length is the log of the perplexity ratio (loss at 32 minus at 16)
    growth = math.log(result.metrics["val/ppl_at_32"] / result.metrics["val/ppl"])
    assert result.metrics["val/loss_growth_at_32"] == pytest.approx(growth, abs=1e-9)
    assert result.metrics["val/loss_growth_at_32_sliding"] == pytest.approx(
        math.log(result.metrics["val/ppl_at_32_sliding"] / result.metrics["val/ppl"]), abs=1e-9)
    assert "val/loss_growth_at_16" not in result.metrics  # at the training length it is 0 by definition
    logged = MlflowClient(tracking_uri=uri).get_run(result.run_id).data.metrics
    assert record.final("val/ppl_at_32") in logged and "val/ppl_at_16" in logged  # the curve and the result
    assert set(spec.evaluation_metrics()) <= {k for k in logged if not k.startswith(record.FINAL)}

    data = prepare_lm(spec, spec.seed)
    model = build_lm(spec.model, data.tokenizers.tgt_vocab_size, seed=spec.seed)
    model.load_state_dict(load_checkpoint(Path(result.run_dir) / "best.pt")["model"])
    tok = data.tokenizers
    prompt = "t1 t2 t3 t4 ? t3"
    new = generate(model, [tok.bos_id, *tok.encode_tgt(prompt)], 6, greedy=True, eos_id=tok.eos_id)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main_generate(result.run_id[:8], prompt, 6, greedy=True) == 0
    # the prompt, then its continuation: one text
    assert out.getvalue() == tok.decode_tgt([*tok.encode_tgt(prompt), *new]) + "\n"
    assert out.getvalue().startswith(prompt + " ") and len(out.getvalue()) > len(prompt) + 2
    with pytest.raises(AblateError, match="use `ablate generate`"):
        main_translate(result.run_id, "t1 t2")
    with pytest.raises(AblateError, match="--temperature must be positive"):
        main_generate(result.run_id, prompt, 6, temperature=0.0)
    torch.manual_seed(0)  # sampling is seeded by --seed alone: two calls agree
    runs = []
    for _ in range(2):
        out = io.StringIO()
        with redirect_stdout(out):
            main_generate(result.run_id, prompt, 6, temperature=0.8, top_k=3, seed=5)
        runs.append(out.getvalue())
    assert runs[0] == runs[1]


@pytest.mark.slow  # a whole tracked run
def test_a_run_records_its_recipe_its_parameter_groups_and_its_steps_to_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole recipe in one run: Muon (with AdamW for the rest) under muP, a WSD schedule, the z-loss,
    grouped attention, a target loss. The run records its parameter groups (tag ablate.param_groups), the
    KV cache per token once at step 0, the schedule's learning rate (not a group's muP-scaled one) and the
    steps to the target loss."""
    from ablate.engine.trainer import lr_factor

    monkeypatch.chdir(tmp_path)
    uri = mlflow_store(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    spec = ExperimentSpec.model_validate({
        "name": "lm-recipe", "tracking": {"experiment": "lm-recipe"},
        "data": {"source": "synthetic", "document_lines": 10, "max_len": 16, "batch_tokens": 128,
                 "synthetic": {"task": "recall", "vocab_size": 12, "min_len": 2, "max_len": 4,
                               "train_size": 300, "val_size": 40, "test_size": 20}},
        "model": {"arch": "decoder_only", "d_model": 32, "heads": 4, "kv_heads": 1, "d_ff": 64,
                  "decoder_layers": 1, "dropout": 0.0, "max_positions": 64, "parametrisation": "mup",
                  "mup_base_width": 16},
        "train": {"max_steps": 12, "eval_every": 3,
                  "optimizer": {"name": "adamw", "lr": 0.01, "weight_decay": 0.1,
                                "no_decay": "norms_biases_embeddings"},
                  "schedule": {"name": "wsd", "warmup_steps": 2, "wsd_decay_fraction": 0.5},
                  "loss": {"name": "z_loss"}},
        "eval": {"target_loss": 50.0, "samples": 0},
    })
    result = run_experiment(spec, quiet=True)
    assert result.status == "finished" and result.run_id is not None
    run = MlflowClient(tracking_uri=uri).get_run(result.run_id)
    groups = json.loads(run.data.tags[record.PARAM_GROUPS])
    assert {g["lr_scale"] for g in groups} == {1.0, 0.5}  # muP: hidden matrices at 1/m, m = 2
    assert all(g["weight_decay"] == 0.0 for g in groups if set(g["roles"]) <= {"norm", "bias", "embedding"})
    # muP's hidden matrices: weight decay over the group's lr multiplier (mup.MuAdamW), so lr x decay holds
    assert any(g["weight_decay"] == pytest.approx(0.1 / g["lr_scale"]) and g["lr_scale"] == 0.5
               and "hidden" in g["roles"] for g in groups)
    assert result.metrics[record.KV_CACHE] == 2 * 1 * 8 * 4  # K and V, 1 layer, one 8-wide head, fp32
    assert result.metrics[record.VAL_STEPS_TO_TARGET] == 3.0  # the first evaluation is below 50 nats
    assert run.data.params["train.loss.name"] == "z_loss" and run.data.params["train.schedule.name"] == "wsd"
    history = MlflowClient(tracking_uri=uri).get_metric_history(result.run_id, metricnames.TRAIN_LR)
    for point in history:  # the schedule's rate, whatever the first group's muP multiplier
        assert point.value == pytest.approx(0.01 * lr_factor(point.step, spec.train, 12))
