"""`ablate run` with tracking on, read back from a real MLflow sqlite store: what a run leaves in MLflow
(params, metric history, tags, artifacts, dataset input), the summary it prints, a diverged run's record,
and `ablate translate` decoding from the run's record alone."""

from __future__ import annotations

import io
import json
import math
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from ablate import cli
from ablate.data.prepare import PreparedData, prepare_data
from ablate.engine.builders import build_model
from ablate.engine.decode import decode_batch
from ablate.engine.trainer import load_checkpoint
from ablate.hardware import cpu_has_fast_bf16
from ablate.run.runner import RunResult, run_experiment
from ablate.spec.experiment import ExperimentSpec, flatten
from ablate.spec.load import load_spec
from tests.stores import mlflow_store

DE = ["ein hund läuft", "zwei kinder spielen", "eine frau liest", "der mann kocht", "ein vogel singt",
      "die katze schläft", "ein kind lacht", "der hund schläft"]
EN = ["a dog runs", "two children play", "a woman reads", "the man cooks", "a bird sings",
      "the cat sleeps", "a child laughs", "the dog sleeps"]


def text_corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, lines in {"train.de": DE * 5, "train.en": EN * 5, "val.de": DE[:4], "val.en": EN[:4],
                        "test.de": DE[4:], "test.en": EN[4:]}.items():
        (root / name).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return root


def text_spec(folder: Path, **changes: str) -> Path:
    """A tiny files-source run (wordlevel tokenizer, BLEU/chrF) with tracking on."""
    corpus = text_corpus(folder / "corpus")
    text = f"""
name: tracked
seed: 5
data:
  source: files
  files:
    root: {corpus}
    train: {{src: train.de, tgt: train.en}}
    val: {{src: val.de, tgt: val.en}}
    test: {{src: test.de, tgt: test.en}}
  src_lang: de
  tgt_lang: en
  cache_dir: {folder / "cache"}
  tokenizer: {{kind: wordlevel, vocab_size: 100}}
  max_len: 12
  batch_tokens: 96
model: {{d_model: 32, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 64, dropout: 0.0}}
train:
  max_steps: 12
  eval_every: 6
  checkpoint_every: 6
  schedule: {{name: constant, warmup_steps: 0}}
  optimizer: {{lr: 0.003}}
  threads: 1
eval: {{samples: 2, decode: {{strategy: greedy}}}}
tracking: {{enabled: true}}
"""
    for old, new in changes.items():
        text = text.replace(old, new)
    path = folder / "tracked.yaml"
    path.write_text(text)
    return path


def client_for(folder: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")


def artifact_files(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    found: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        found |= artifact_files(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def history(client: MlflowClient, run_id: str, key: str) -> dict[int, float]:
    points = client.get_metric_history(run_id, key)
    steps = [m.step for m in points]
    assert len(steps) == len(set(steps)), f"{key}: a step logged twice"
    return {m.step: m.value for m in points}


@dataclass
class Tracked:
    folder: Path
    spec: ExperimentSpec
    data: PreparedData
    result: RunResult
    stdout: str

    @property
    def run_dir(self) -> Path:
        return self.folder / self.result.run_dir  # relative to the folder the run started in


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tracked]:
    """One tiny text run through `ablate run` (the CLI) in its own folder and sqlite store."""
    folder = tmp_path_factory.mktemp("tracked")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setenv("MLFLOW_TRACKING_URI", mlflow_store(folder))
        spec_path = text_spec(folder)
        out = io.StringIO()
        with redirect_stdout(out):
            assert cli.main(["run", str(spec_path)]) == 0
        spec = load_spec(spec_path)
        data = prepare_data(spec)
    (summary,) = (folder / "runs" / "tracked").glob("*/summary.json")
    yield Tracked(folder, spec, data, RunResult(**json.loads(summary.read_text())), out.getvalue())


@pytest.mark.slow
def test_the_run_summary_names_metrics_cost_and_where_the_run_is(tracked: Tracked) -> None:
    text, result = tracked.stdout, tracked.result
    assert f"tracked [{tracked.spec.spec_hash}, seed 5]: finished" in text
    # the names MLflow holds: final/ for the run's result, plain for the constants logged once
    for key in ("final/val/loss", "final/val/bleu", "final/val/chrf", "final/test/loss", "final/test/bleu",
                "final/test/chrf", "final/train/wall_time_s", "final/peak_memory_mb"):
        assert f"  {key} " in text, key
    assert "  wall_time_s" not in text and "  val/loss" not in text
    lines = {line.split()[0]: line.split()[1] for line in text.splitlines() if line.startswith("  ")}
    assert lines["model/params"] == f"{result.metrics['model/params']:,.0f}"  # the parameter count
    assert float(lines["final/train/tokens_per_s"].replace(",", "")) > 0
    assert float(lines["data/padding_fraction"]) == pytest.approx(result.metrics["data/padding_fraction"],
                                                                  abs=1e-3)
    assert re.search(rf"run dir +{re.escape(result.run_dir)}", text)
    assert re.search(rf"MLflow run +{result.run_id}", text)


def test_a_tracked_run_is_complete_in_mlflow(tracked: Tracked) -> None:
    spec, result, workdir = tracked.spec, tracked.result, tracked.folder
    assert result.status == "finished" and result.run_id
    client = client_for(workdir)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"

    # params: the resolved spec, flattened to dotted keys (strings as they are, the rest as JSON)
    expected = flatten(spec.resolved())
    assert set(run.data.params) == set(expected)
    for key, value in expected.items():
        logged = run.data.params[key]
        assert (logged if isinstance(value, str) else json.loads(logged)) == value, key

    # metrics: every evaluation of RunResult.history at its step and nothing after it; the run's result
    # under final/ names, once, at the last training step
    last_step = max(step for step, _ in result.history)
    for key in ("val/loss", "val/ppl", "val/bleu", "val/chrf"):
        logged = history(client, result.run_id, key)
        assert logged == {s: m[key] for s, m in result.history}
        final = history(client, result.run_id, f"final/{key}")
        assert list(final) == [tracked.spec.train.max_steps] and last_step <= tracked.spec.train.max_steps
        assert final[tracked.spec.train.max_steps] == pytest.approx(result.metrics[key])
    for key in ("test/loss", "test/bleu", "test/chrf", "peak_memory_mb", "train/tokens_per_s",
                "train/wall_time_s"):
        assert run.data.metrics[f"final/{key}"] == pytest.approx(result.metrics[key]), key
    assert "test/loss" not in run.data.metrics  # test is evaluated once, at the end: a final/ name only
    for key in ("model/params", "data/padding_fraction"):  # constants: logged once, at the start
        assert history(client, result.run_id, key) == {0: pytest.approx(result.metrics[key])}, key
    assert 0.0 <= run.data.metrics["data/padding_fraction"] < 1.0
    # the vocabulary the model predicts, as built (a tokenizer file's own size, which the spec does not say)
    assert history(client, result.run_id, "data/vocab_size") == {0: tracked.data.tokenizers.tgt_vocab_size}
    evaluations = {s for s, _ in result.history}
    assert evaluations <= set(history(client, result.run_id, "peak_memory_mb"))  # at each evaluation
    assert history(client, result.run_id, "train/loss")  # the training curve

    tags = run.data.tags
    assert tags["ablate.status"] == "finished"
    assert tags["ablate.spec_hash"] == spec.spec_hash
    assert tags["ablate.seed"] == "5"
    # sdpa's semantics, computed by the backend torch's sdpa chose (its own name for it) or by two matmuls
    kernels = set(tags["ablate.attention_kernel"].split(", "))
    assert kernels and kernels <= {"sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-math", "matmul"}
    # The precision the run trained in, also for precision: auto (bf16 on a CPU with bf16 units, else fp32)
    asked = spec.train.precision
    auto = "bf16" if cpu_has_fast_bf16() else "fp32"
    assert tags["ablate.precision"] == (auto if asked == "auto" else asked)
    assert tags["ablate.fp32_matmul"] == "ieee"  # tf32 on a GPU (hardware.use_tf32), full float32 on a CPU
    assert tags["eval.sacrebleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|")
    assert tags["eval.chrf_signature"].startswith("nrefs:1|")

    files = artifact_files(client, result.run_id)
    assert {"spec.yaml", "environment.json", "samples.txt", "loss_curve.png", "checkpoints/best.pt",
            "summary.json", "tokenizer/tokenizers.json", "tokenizer/src.json", "tokenizer/tgt.json"} <= files
    local = Path(client.download_artifacts(result.run_id, "", str(workdir / "fetched")))
    assert (local / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    best = torch.load(local / "checkpoints" / "best.pt", map_location="cpu", weights_only=True)
    on_disk = load_checkpoint(tracked.run_dir / "best.pt")
    assert best["step"] == on_disk["step"]
    assert all(torch.equal(t, on_disk["model"][k]) for k, t in best["model"].items())
    assert json.loads((local / "summary.json").read_text())["status"] == "finished"
    assert "HYP:" in (local / "samples.txt").read_text()
    tokenizer = json.loads((local / "tokenizer" / "src.json").read_text())
    assert "läuft" in tokenizer["model"]["vocab"]  # a Hugging Face tokenizers file of this corpus

    (dataset_input,) = run.inputs.dataset_inputs
    assert dataset_input.dataset.name == tracked.data.name
    assert dataset_input.dataset.digest == tracked.data.fingerprint[:36]


@pytest.mark.slow
def test_a_diverged_run_ends_terminal_with_its_real_last_metrics(workdir: Path) -> None:
    spec = load_spec(text_spec(workdir), [
        "model.residual=post_norm", "train.optimizer.lr=50.0", "train.clip_norm=null", "train.max_steps=60",
        "train.divergence_factor=1.5"])
    result = run_experiment(spec, quiet=True)
    assert result.status == "diverged"
    client = client_for(workdir)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"  # terminal: a diverged run is a result, not a crash
    assert run.data.tags["ablate.status"] == "diverged"
    assert run.data.tags["ablate.reason"] == result.reason
    state = load_checkpoint(Path(result.run_dir) / "last.pt")["state"]
    assert state["stop_status"] == "diverged"
    losses = history(client, result.run_id, "train/loss")
    assert max(losses) == state["step"]  # the step it diverged at
    real = result.metrics["train/loss"]
    logged = losses[state["step"]]
    if math.isnan(real):
        assert math.isnan(logged)
    elif math.isinf(real):
        assert logged == math.copysign(sys.float_info.max, real)  # how MLflow's store keeps +-inf
    else:
        assert logged == pytest.approx(real) and real > 1.5 * state["first_loss"]
    assert logged != 1e9
    assert run.data.metrics["model/params"] == result.metrics["model/params"]


def test_translate_decodes_from_the_run_record_alone(tracked: Tracked, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`ablate translate RUN_ID TEXT` with the data, its cache and the run directory gone: the run's
    spec.yaml, tokenizers and best checkpoint in MLflow are enough, and give what the model gives."""
    spec, tok = tracked.spec, tracked.data.tokenizers
    model = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=spec.seed)
    model.load_state_dict(load_checkpoint(tracked.run_dir / "best.pt")["model"])
    model.eval()
    sentences = ["ein hund schläft", "die katze läuft"]
    with torch.no_grad():
        expected = [tok.decode_tgt(decode_batch(model, torch.tensor([tok.model_src(s)]), spec.eval.decode,
                                                tok.bos_id, tok.eos_id)[0]) for s in sentences]
    for gone in ("corpus", "cache", "runs"):
        shutil.rmtree(tracked.folder / gone)
    monkeypatch.chdir(tracked.folder)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tracked.folder / 'mlflow.db'}")
    capsys.readouterr()
    for sentence, want in zip(sentences, expected, strict=True):
        assert cli.main(["translate", str(tracked.result.run_id), sentence]) == 0
        assert capsys.readouterr().out == want + "\n"
    assert any(expected)  # the model says something: an empty line would match an empty translation


def test_unreachable_tracking_server_fails_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A dead MLflow server is a one-line user error (exit 2) before data preparation: nothing written."""
    from ablate.tracking.server import free_port

    spec_path = text_spec(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli.main(["run", str(spec_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot reach the MLflow server")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no runs/, no cache/, no mlflow.db
