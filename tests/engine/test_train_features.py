"""Trainer features one at a time, on a Trainer built directly: GradScaler and clipping, AdamW's decay,
label smoothing, the budget and cosine schedule with epochs only, early stopping, stops that survive a
restart, evaluation caps, progress output and per-run peak memory."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ablate.data.prepare import prepare_data
from ablate.engine import evaluate as evaluate_module
from ablate.engine import progress as progress_module
from ablate.engine.builders import build_model
from ablate.engine.checkpoint import save_checkpoint, state_from_dict
from ablate.engine.progress import PeakMemory, Progress
from ablate.engine.trainer import (
    Trainer,
    build_optimizer,
    load_checkpoint,
    lr_factor,
    planned_steps,
)
from ablate.errors import AblateError
from ablate.hardware import keep_freed_memory_in_process
from ablate.run.runner import run_experiment
from ablate.spec.experiment import EarlyStopping, TrainSpec
from ablate.spec.load import load_spec
from tests.factories import tiny_yaml

# Twenty steps at a constant learning rate, no dropout, no samples: the trainer's features in isolation.
TINY = tiny_yaml({"data.synthetic.train_size": 200, "data.batch_tokens": 128, "model.dropout": 0.0,
                  "train.max_steps": 20, "train.eval_every": 10, "train.checkpoint_every": 10,
                  "train.schedule": {"name": "constant", "warmup_steps": 0}, "eval.samples": 0})


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Trainers built here run on one thread (as the spec's train.threads does for a run); restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class ListSink:
    def __init__(self) -> None:
        self.logged: list[tuple[int, dict[str, float]]] = []
        self.stamps: list[tuple[int, int | None, float]] = []  # (step, timestamp given, when it arrived)

    def log_metrics(self, metrics: dict[str, float], step: int, timestamp_ms: int | None = None) -> None:
        self.logged.append((step, dict(metrics)))
        self.stamps.append((step, timestamp_ms, time.time() * 1000))

    def series(self, key: str) -> dict[int, float]:
        return {step: m[key] for step, m in self.logged if key in m}


def tiny_spec(folder: Path, overrides: list[str] | None = None) -> Any:
    path = folder / "tiny.yaml"
    path.write_text(TINY)
    return load_spec(path, overrides or [])


def make_trainer(folder: Path, overrides: list[str] | None = None, sink: ListSink | None = None) -> Trainer:
    spec = tiny_spec(folder, overrides)
    data = prepare_data(spec)
    tok = data.tokenizers
    model = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=spec.seed)
    return Trainer(spec, data, model, folder / "run", torch.device("cpu"), sink=sink, show_progress=False)


def grad_norm(model: nn.Module) -> float:
    return math.sqrt(sum(float(p.grad.float().norm()) ** 2 for p in model.parameters() if p.grad is not None))


# ---------------------------------------------------------------- precision, clipping, optimizer, loss
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_grad_scaler_is_enabled_only_for_fp16(tmp_path: Path, precision: str) -> None:
    trainer = make_trainer(tmp_path, [f"train.precision={precision}"])
    assert trainer.scaler.is_enabled() == (precision == "fp16")


def test_fp16_gradients_are_unscaled_before_clipping(tmp_path: Path) -> None:
    """Clipping scaled gradients (x65536) to clip_norm and unscaling after would leave a norm of
    clip_norm / scale; unscale_ first leaves exactly clip_norm."""
    clip = 1e-3
    trainer = make_trainer(tmp_path, ["train.precision=fp16", f"train.clip_norm={clip}"])
    for _ in range(5):
        scale = trainer.scaler.get_scale()
        trainer.train_step()
        if trainer.scaler.get_scale() >= scale:  # not a skipped (inf/nan) step
            break
    else:
        pytest.fail("every fp16 step overflowed")
    assert scale > 1.0  # the loss really was scaled
    assert grad_norm(trainer.model) == pytest.approx(clip, rel=1e-3)


def test_adamw_weight_decay_shrinks_weights_where_adam_does_not() -> None:
    """With zero gradients Adam's update is zero; AdamW still decays every weight by lr x weight_decay."""
    def one_step(name: str, weight_decay: float) -> torch.Tensor:
        layer = nn.Linear(3, 2, bias=False)
        nn.init.constant_(layer.weight, 4.0)
        spec = TrainSpec.model_validate({"optimizer": {"name": name, "lr": 0.1,
                                                       "weight_decay": weight_decay}})
        optimizer = build_optimizer(layer, spec)
        layer.weight.grad = torch.zeros_like(layer.weight)
        optimizer.step()
        return layer.weight.detach()

    assert torch.allclose(one_step("adamw", 0.5), torch.full((2, 3), 4.0 * (1 - 0.1 * 0.5)))  # 3.8
    assert torch.equal(one_step("adamw", 0.0), torch.full((2, 3), 4.0))
    assert torch.equal(one_step("adam", 0.0), torch.full((2, 3), 4.0))
    # Adam's L2 term goes through the adaptive scaling: a first step of lr whatever the weight (3.9)
    assert torch.allclose(one_step("adam", 0.5), torch.full((2, 3), 4.0 - 0.1))


def test_label_smoothing_reaches_the_training_loss(tmp_path: Path) -> None:
    eps = 0.1
    trainer = make_trainer(tmp_path, [f"train.label_smoothing={eps}"])
    batch = trainer.batcher.collate(trainer.batcher.all_batches(0)[0].tolist())
    with torch.no_grad():
        logp = F.log_softmax(trainer.model(batch.src, batch.tgt_in).float(), dim=-1)  # (B, T, V)
    real = batch.tgt_out != trainer.pad_id
    nll = -logp.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)  # (B, T)
    uniform = -logp.mean(-1)  # cross-entropy against the uniform distribution, (B, T)
    smoothed = ((1 - eps) * nll + eps * uniform)[real].mean()
    loss, _ = trainer.train_step()
    assert loss == pytest.approx(float(smoothed), rel=1e-5)
    assert abs(loss - float(nll[real].mean())) > 1e-3


@pytest.mark.parametrize(("overrides", "chunked"), [
    ([], True), (["model.logits=softcap"], False), (["train.loss.name=z_loss"], False)])
def test_the_chunked_loss_serves_the_plain_cross_entropy_and_gives_its_value(
        tmp_path: Path, overrides: list[str], chunked: bool) -> None:
    """The trainer computes the plain cross-entropy of the generator's logits a chunk of rows at a time
    (engine/token_loss.py); a logits axis or a loss term beyond it takes the whole logits. Either way the
    first step's loss is the loss axis's on the whole logits."""
    trainer = make_trainer(tmp_path, overrides)
    assert trainer.chunked_loss() is chunked
    batch = trainer.batcher.collate(trainer.batcher.all_batches(0)[0].tolist())
    with torch.no_grad():
        logits = trainer.model(batch.src, batch.tgt_in).float()  # (B, T, V), through the logits axis
        whole = trainer.loss_fn(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=trainer.pad_id)
    loss, _ = trainer.train_step()
    assert loss == pytest.approx(float(whole), rel=1e-5)


# ---------------------------------------------------------------- budget and schedule
def test_planned_steps_from_epochs_max_steps_or_both() -> None:
    def spec(**fields: Any) -> TrainSpec:
        return TrainSpec.model_validate(fields)

    assert planned_steps(spec(max_steps=None, epochs=3), batches_per_epoch=10) == 30
    assert planned_steps(spec(max_steps=None, epochs=3, accumulation=4), batches_per_epoch=10) == 8
    assert planned_steps(spec(max_steps=12, epochs=3), batches_per_epoch=10) == 12
    assert planned_steps(spec(max_steps=500, epochs=3), batches_per_epoch=10) == 30


def test_cosine_with_epochs_only_decays_over_the_whole_run(tmp_path: Path) -> None:
    sink = ListSink()
    trainer = make_trainer(tmp_path, ["train.max_steps=null", "train.epochs=3", "train.eval_every=8",
                                      "eval.bleu_during_training=false",
                                      "train.schedule.name=cosine", "train.schedule.warmup_steps=2",
                                      "train.schedule.min_lr_ratio=0.1", "train.optimizer.lr=0.01"], sink)
    batches = [trainer.batcher.num_batches(e) for e in range(3)]
    outcome = trainer.fit()
    assert outcome.status == "finished"
    assert outcome.state.step == sum(batches)  # exactly three epochs, not a step into the fourth
    assert trainer.total_steps == 3 * batches[0]
    lrs = sink.series("train/lr")
    middle = min(lrs, key=lambda s: abs(s - trainer.total_steps / 2))
    assert 0.3 * 0.01 < lrs[middle] < 0.8 * 0.01  # half-way down the cosine, not at the floor
    assert lrs[max(lrs)] == pytest.approx(0.01 * lr_factor(outcome.state.step - 1, trainer.spec.train,
                                                           trainer.total_steps))
    assert lrs[max(lrs)] < 0.15 * 0.01  # near the floor at the end


def test_metrics_carry_the_time_they_were_measured_not_the_time_of_the_flush(tmp_path: Path) -> None:
    """Metrics reach MLflow at checkpoints and evaluations, a window's worth in one batch; each keeps the
    wall-clock time of its step, so MLflow's time axis shows training as it went."""
    sink = ListSink()
    # eval_every 20: train/loss logged every 5 steps, flushed at the evaluation
    trainer = make_trainer(tmp_path, ["train.eval_every=20", "train.checkpoint_every=20"], sink)
    step_once = trainer.loss_on

    def slow_step(*args: Any, **kwargs: Any) -> torch.Tensor:
        time.sleep(0.01)  # at least 10 ms a step: 50 ms between two logged windows
        return step_once(*args, **kwargs)

    trainer.loss_on = slow_step  # type: ignore[method-assign]
    # When each record arrives, by the trainer's own step (no wall-clock bound on how fast a flush is).
    sink_log = sink.log_metrics
    arrived_at: list[int] = []

    def log_and_note(metrics: dict[str, float], step: int, timestamp_ms: int | None = None) -> None:
        arrived_at.append(trainer.state.step)
        sink_log(metrics, step, timestamp_ms)

    sink.log_metrics = log_and_note  # type: ignore[method-assign]
    started = time.time() * 1000
    assert trainer.fit().status == "finished"
    logged = [(step, stamp, arrived, at) for (step, metrics), (_, stamp, arrived), at
              in zip(sink.logged, sink.stamps, arrived_at, strict=True) if "train/loss" in metrics]
    assert [step for step, _, _, _ in logged] == [5, 10, 15, 20]
    stamps = [int(stamp) for _, stamp, _, _ in logged if stamp is not None]
    assert len(stamps) == 4 and started <= stamps[0]
    # A lower bound only: each step sleeps at least 10 ms, however slow the machine.
    assert all(b - a >= 49 for a, b in zip(stamps, stamps[1:], strict=False))  # 5 steps of >= 10 ms, in ms
    assert [at for *_, at in logged] == [20, 20, 20, 20]  # yet all four came in one flush, at step 20
    assert all(stamp <= a for stamp, (_, _, a, _) in zip(stamps, logged, strict=True))


def test_a_checkpoint_from_before_the_timestamps_still_resumes() -> None:
    state = state_from_dict({"step": 10, "pending": [(10, {"train/loss": 2.0})]})
    assert state.pending == [(10, {"train/loss": 2.0}, None)]  # logged at flush time, as it used to be


def test_a_resumed_run_counts_the_wall_and_cpu_time_before_its_kill(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """train/wall_time_s and train/cpu_time_s are the whole run's: the segments before a kill (up to the
    checkpoint resumed from) plus the resumed one, not the last segment alone (a study's cost table, its
    compute total and the CPU hours of each of its parts read them)."""
    monkeypatch.chdir(tmp_path)
    spec = tiny_spec(tmp_path, ["train.max_steps=20", "train.checkpoint_every=10"])
    first = run_experiment(spec, quiet=True)
    last = Path(first.run_dir) / "last.pt"
    payload = load_checkpoint(last)
    assert 0 < payload["state"]["wall_seconds"] <= first.metrics["train/wall_time_s"]
    assert 0 < payload["state"]["cpu_seconds"] <= first.metrics["train/cpu_time_s"]
    payload["state"]["wall_seconds"] = 1000.0  # as if the run had trained 1000 s before its last checkpoint
    payload["state"]["cpu_seconds"] = 2000.0  # on two busy threads
    save_checkpoint(last, payload)
    (Path(first.run_dir) / "summary.json").unlink()  # killed before its summary: the next call resumes
    resumed = run_experiment(spec, quiet=True)
    assert resumed.status == "finished"
    assert 1000.0 < resumed.metrics["train/wall_time_s"] < 1000.0 + first.metrics["train/wall_time_s"] + 60
    assert 2000.0 < resumed.metrics["train/cpu_time_s"] < 2000.0 + first.metrics["train/cpu_time_s"] + 60
    assert state_from_dict({"step": 10}).cpu_seconds == 0.0  # a checkpoint from before it counts from 0


# ---------------------------------------------------------------- early stopping and stops that survive
@pytest.mark.parametrize(("metric", "mode", "patience", "data"), [
    ("val/loss", "min", 2, []),
    # sequences of 1-3 tokens: exact match climbs within a few dozen steps, then wobbles
    ("val/exact_match", "max", 3, ["data.synthetic.min_len=1", "data.synthetic.max_len=3"])])
def test_early_stopping_stops_and_keeps_the_best_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            metric: str, mode: str, patience: int,
                                                            data: list[str]) -> None:
    """Stops `patience` evaluations after the last improvement, before max_steps; best.pt is the best
    evaluation by that metric in that direction."""
    monkeypatch.chdir(tmp_path)
    stopping = f"{{metric: {metric}, mode: {mode}, patience: {patience}}}"
    spec = tiny_spec(tmp_path, ["train.max_steps=400", "train.eval_every=4", "train.optimizer.lr=0.02",
                                f"train.early_stopping={stopping}", *data])
    result = run_experiment(spec, quiet=True)
    assert result.status == "finished" and result.reason.startswith("early stop")
    steps = [s for s, _ in result.history]
    values = [m[metric] for _, m in result.history]
    assert steps[-1] < 400
    better = (lambda a, b: a < b) if mode == "min" else (lambda a, b: a > b)
    best_i = 0
    misses = 0
    for i in range(1, len(values)):
        if better(values[i], values[best_i]):
            best_i, misses = i, 0
        else:
            misses += 1
        assert misses < patience or i == len(values) - 1  # it stops at the first run of `patience` misses
    assert misses == patience
    assert best_i > 0  # it did improve after the first evaluation: the choice of best.pt is not trivial
    best = load_checkpoint(Path(result.run_dir) / "best.pt")
    assert best["step"] == steps[best_i] and best[metric] == values[best_i]

    # Killed after its last checkpoint but before summary.json: the restart ends there, it does not train on.
    last = Path(result.run_dir) / "last.pt"
    mtime = last.stat().st_mtime_ns
    (Path(result.run_dir) / "summary.json").unlink()
    again = run_experiment(spec, quiet=True)
    assert (again.status, again.reason, again.history) == (result.status, result.reason, result.history)
    assert last.stat().st_mtime_ns == mtime


def test_a_tuner_prune_survives_a_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = tiny_spec(tmp_path, ["train.max_steps=40", "train.eval_every=5"])
    seen: list[int] = []
    first = run_experiment(spec, quiet=True, hook=lambda step, _m: seen.append(step) or step >= 10)
    assert first.status == "pruned" and seen == [5, 10]
    (Path(first.run_dir) / "summary.json").unlink()

    def must_not_train(step: int, metrics: dict[str, float]) -> bool:
        raise AssertionError(f"trained on to an evaluation at step {step}")

    again = run_experiment(spec, quiet=True, hook=must_not_train)
    assert again.status == "pruned" and again.history == first.history


def test_a_prune_at_the_last_evaluation_lets_the_run_finish(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Training is over at the last evaluation: a tuner that says "prune" there saves nothing, so the run
    finishes with its final evaluation (and its trial keeps its place in a search report's ranking)."""
    monkeypatch.chdir(tmp_path)
    spec = tiny_spec(tmp_path, ["train.max_steps=10", "train.eval_every=5"])
    seen: list[int] = []
    result = run_experiment(spec, quiet=True, hook=lambda step, _m: seen.append(step) or step >= 10)
    assert seen == [5, 10]  # the tuner still heard the last evaluation
    assert result.status == "finished" and "val/loss" in result.metrics


def test_an_unmeasured_early_stopping_metric_is_an_error_not_a_switch(tmp_path: Path) -> None:
    valid = tiny_spec(tmp_path, ["eval.bleu_during_training=false"])
    # past spec validation (model_copy does not validate), as a spec from an older version could be
    stopping = EarlyStopping.model_construct(metric="val/exact_match", mode="max", patience=2)
    spec = valid.model_copy(update={"train": valid.train.model_copy(update={"early_stopping": stopping})})
    with pytest.raises(AblateError, match=r"early_stopping\.metric: 'val/exact_match' is not measured"):
        spec.selection_metric()
    data = prepare_data(spec)
    model = build_model(spec.model, data.tokenizers.src_vocab_size, data.tokenizers.tgt_vocab_size, 0, 3)
    with pytest.raises(AblateError, match="val/exact_match"):
        Trainer(spec, data, model, tmp_path / "run", torch.device("cpu"))


# ---------------------------------------------------------------- evaluation cap
def test_max_sentences_caps_evaluations_during_training_but_not_the_final_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    decoded: list[int] = []
    real = evaluate_module.translate_split

    def counting(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        decoded.append(len(out.hypotheses))
        return out

    monkeypatch.setattr(evaluate_module, "translate_split", counting)
    spec = tiny_spec(tmp_path, ["eval.max_sentences=5"])
    result = run_experiment(spec, quiet=True)
    assert decoded == [5, 5, 24, 24]  # val at steps 10 and 20 (capped), then the whole val and test splits
    hits = result.metrics["test/exact_match"] * 24  # a share of all 24 test sentences
    assert hits == pytest.approx(round(hits))


# ---------------------------------------------------------------- progress and memory
def test_progress_without_a_terminal_prints_plain_lines_with_an_eta(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    spec = tiny_spec(tmp_path, ["train.max_steps=null", "train.epochs=2"])
    result = run_experiment(spec)
    out = capsys.readouterr()
    assert result.status == "finished"
    assert "\r" not in out.err and "\r" not in out.out  # no progress bar redrawing a line
    lines = [line for line in out.err.splitlines() if re.match(r"step \d+/\d+: loss ", line)]
    assert lines, out.err
    assert all(re.search(r" tok/s eta \d+s$", line) for line in lines), lines


def test_eta_counts_only_the_steps_of_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    resumed = Progress(total=100, start_step=50, enabled=False)
    clock[0] += 10.0  # 10 steps (50 -> 60) in 10 s: 1 step/s, 40 steps left
    assert resumed.eta_s(60) == pytest.approx(40.0)
    assert resumed.eta_s(50) is None
    assert Progress(total=None, enabled=False).eta_s(60) is None


def test_peak_memory_is_measured_per_run_not_per_process() -> None:
    # As `ablate run` does on a CPU: the heap then keeps what a run freed, and the next run's meter must
    # not count it (a study worker trains several cells in one process).
    keep_freed_memory_in_process()
    meter = PeakMemory(torch.device("cpu"))
    meter.reset()
    if not meter.per_run:
        pytest.skip("no /proc/self/clear_refs here: peak memory falls back to the process's ru_maxrss")
    before = meter.peak_mb()
    block = torch.ones(50_000_000)  # 200 MB, touched
    during = meter.peak_mb()
    del block
    meter.reset()  # the next run
    after = meter.peak_mb()
    assert before is not None and during is not None and after is not None
    assert during > before + 150
    assert after < during - 150


def test_a_runs_own_footprint_does_not_count_what_the_process_held_before_it() -> None:
    # A worker's earlier cells leave memory in the process (here: a 200 MB block still alive): the run's
    # peak_memory_mb counts it, its run_memory_mb (what reports show) does not.
    keep_freed_memory_in_process()
    held = torch.ones(50_000_000)  # 200 MB, touched: left by "an earlier cell"
    meter = PeakMemory(torch.device("cpu"))
    meter.reset()
    if not meter.per_run:
        pytest.skip("no /proc/self/clear_refs here: no per-run reading to subtract from")
    block = torch.ones(25_000_000)  # this run's 100 MB
    found = meter.metrics()
    del block, held
    assert found["peak_memory_mb"] > 300  # the process: the held block and the run's own
    assert 90 < found["run_memory_mb"] < 150  # the run alone
