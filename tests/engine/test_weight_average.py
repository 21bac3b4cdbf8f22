"""Weight averaging (train.weight_average): the last-k mean and the EMA against hand computations, their
identities, a resumed run averaging exactly what an uninterrupted one does, both readings in MLflow, and
the spec field (identity only when set, located errors, the metric a study decides on)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from torch import nn

from ablate.data.prepare import prepare_data
from ablate.engine.averaging import Ema, LastK, fp32_parameters, load_weights, make_averager
from ablate.engine.builders import build_model
from ablate.engine.checkpoint import load_checkpoint, save_checkpoint
from ablate.engine.trainer import Trainer
from ablate.report.compute import loaded_study as data_module
from ablate.report.compute.loaded_study import Run, Study
from ablate.run.runner import run_experiment
from ablate.spec.experiment import ExperimentSpec
from ablate.spec.load import SpecError, load_spec
from ablate.study.designs import study_metric
from ablate.study.recorded_study import StudyRecord
from ablate.tracking import record
from tests.factories import tiny_yaml
from tests.stores import mlflow_store

# Twenty steps at a constant learning rate without dropout: checkpoints every 5 steps, evaluations every 10.
TINY = tiny_yaml({"data.synthetic.train_size": 200, "data.batch_tokens": 128, "model.dropout": 0.0,
                  "train.max_steps": 20, "train.eval_every": 10, "train.checkpoint_every": 5,
                  "train.schedule": {"name": "constant", "warmup_steps": 0}, "eval.samples": 0})
LAST_K = "train.weight_average={kind: last_k, k: 5, every: 4}"  # steps 4, 8, ..., 20
EMA = "train.weight_average={kind: ema, decay: 0.8}"


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def spec_at(folder: Path, *overrides: str) -> ExperimentSpec:
    path = folder / "tiny.yaml"
    path.write_text(TINY)
    return load_spec(path, list(overrides))


def scalar_model(value: float) -> nn.Linear:
    model = nn.Linear(1, 1, bias=False)
    set_weight(model, value)
    return model


def set_weight(model: nn.Linear, value: float) -> None:
    with torch.no_grad():
        model.weight.fill_(value)


# ---------------------------------------------------------------- the formulas
def test_ema_follows_the_formula_by_hand() -> None:
    """theta_ema <- decay * theta_ema + (1 - decay) * theta, started at the first step's weights."""
    ema, model = Ema(0.9), scalar_model(1.0)
    ema.update(1, model)  # the first update copies: 1
    for value in (3.0, -2.0):
        set_weight(model, value)
        ema.update(2, model)
    averaged = ema.averaged()
    assert averaged is not None
    # 0.9 * 1 + 0.1 * 3 = 1.2; 0.9 * 1.2 + 0.1 * (-2) = 0.88
    assert averaged["weight"].item() == pytest.approx(0.88, abs=1e-6)


def test_last_k_is_the_mean_of_the_last_k_snapshots() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    avg = LastK(k=3, every=2)
    taken: list[dict[str, torch.Tensor]] = []
    for step in range(1, 10):
        with torch.no_grad():
            for p in model.parameters():
                p.normal_()
        avg.update(step, model)
        if step % 2 == 0:
            taken.append({n: p.detach().clone() for n, p in model.named_parameters()})
    assert avg.steps() == [4, 6, 8]  # every 2 steps, the last 3 kept (step 9 is no multiple of 2)
    averaged = avg.averaged()
    assert averaged is not None
    for name in ("weight", "bias"):
        expected = torch.stack([t[name] for t in taken[-3:]]).mean(0)
        torch.testing.assert_close(averaged[name], expected, rtol=0, atol=1e-6)


def test_k_1_and_decay_0_are_the_current_weights() -> None:
    torch.manual_seed(1)
    model = nn.Linear(5, 5)
    last, ema = LastK(k=1, every=1), Ema(0.0)
    for step in range(1, 4):
        with torch.no_grad():
            for p in model.parameters():
                p.normal_()
        last.update(step, model)
        ema.update(step, model)
    for averaged in (last.averaged(), ema.averaged()):
        assert averaged is not None
        for name, p in model.named_parameters():
            assert torch.equal(averaged[name], p.detach()), name


def test_averages_are_fp32_whatever_the_model_holds() -> None:
    """Under autocast the weights stay fp32 master weights; a half-precision model is averaged in fp32 too,
    so small updates are not rounded away."""
    model = nn.Linear(3, 3).to(torch.bfloat16)
    ema = Ema(0.5)
    ema.update(1, model)
    averaged = ema.averaged()
    assert averaged is not None and all(t.dtype == torch.float32 for t in averaged.values())
    load_weights(model, averaged)  # cast back to the parameter's own dtype
    assert model.weight.dtype == torch.bfloat16


def test_state_round_trips_through_a_weights_only_checkpoint(tmp_path: Path) -> None:
    model = nn.Linear(3, 2)
    for averager in (LastK(k=2, every=1), Ema(0.7)):
        for step in (1, 2, 3):
            with torch.no_grad():
                model.weight.add_(1.0)
            averager.update(step, model)
        save_checkpoint(tmp_path / "c.pt", {"weight_average": averager.state_dict()})
        again = LastK(k=2, every=1) if isinstance(averager, LastK) else Ema(0.7)
        again.load_state_dict(load_checkpoint(tmp_path / "c.pt")["weight_average"], torch.device("cpu"))
        a, b = averager.averaged(), again.averaged()
        assert a is not None and b is not None
        assert all(torch.equal(a[n], b[n]) for n in a)


# ---------------------------------------------------------------- in the trainer
def make_trainer(folder: Path, spec: ExperimentSpec) -> Trainer:
    data = prepare_data(spec)
    tok = data.tokenizers
    torch.manual_seed(spec.seed)
    model = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=spec.seed)
    return Trainer(spec, data, model, folder, torch.device("cpu"), show_progress=False)


@pytest.mark.parametrize("option", [LAST_K, EMA], ids=["last_k", "ema"])
def test_a_run_killed_mid_way_averages_what_an_uninterrupted_run_averages(tmp_path: Path,
                                                                          option: str) -> None:
    """Killed at step 10 (last checkpoint at step 5, the snapshot of step 4 in it, the one of step 8 lost
    with the process): the resumed run ends with the uninterrupted run's averaged weights, bit for bit."""
    spec = spec_at(tmp_path, option)
    whole = make_trainer(tmp_path / "whole", spec)
    assert whole.fit().status == "finished"

    def kill_at_ten(step: int, metrics: dict[str, float]) -> bool:
        if step == 10:
            raise KeyboardInterrupt  # as a second signal would, mid-step: the last checkpoint resumes
        return False

    killed = make_trainer(tmp_path / "killed", spec)
    killed.hook = kill_at_ten
    assert killed.fit().status == "killed"
    payload = load_checkpoint(killed.last_path)
    assert payload["state"]["step"] == 5 and "weight_average" in payload
    resumed = make_trainer(tmp_path / "killed", spec)
    resumed.restore(payload)
    assert resumed.fit().status == "finished"
    expected, got = whole.averager.averaged(), resumed.averager.averaged()  # type: ignore[union-attr]
    assert expected is not None and got is not None
    for name, tensor in expected.items():
        assert torch.equal(tensor, got[name]), name
    # and the average is not simply the final weights
    assert any(not torch.equal(expected[n], p.detach()) for n, p in whole.model.named_parameters())


def test_without_the_option_the_checkpoint_is_as_before(tmp_path: Path) -> None:
    spec = spec_at(tmp_path)
    trainer = make_trainer(tmp_path / "run", spec)
    assert trainer.averager is None and make_averager(spec.train) is None
    assert "weight_average" not in trainer.checkpoint_payload()


# ---------------------------------------------------------------- both readings, in MLflow
def _tracked(folder: Path, monkeypatch: pytest.MonkeyPatch, *overrides: str) -> tuple[dict[str, float], str]:
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(folder)
    uri = mlflow_store(folder)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    spec = spec_at(folder, "tracking.enabled=true", "train.eval_every=20", *overrides)
    result = run_experiment(spec, quiet=True)
    assert result.status == "finished" and result.run_id is not None
    run = MlflowClient(uri).get_run(result.run_id)  # this store, whatever an earlier test made current
    return dict(run.data.metrics), result.run_id


def test_the_averaged_reading_is_logged_beside_the_plain_one(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """One evaluation, at the last step, so the best checkpoint is the final weights: with k = 1 snapshot
    at that step the averaged reading equals the plain one; with the last 3 it reads other weights."""
    same, _ = _tracked(tmp_path / "k1", monkeypatch, "train.weight_average={kind: last_k, k: 1, every: 20}")
    for split in ("val", "test"):
        for name in ("loss", "exact_match"):
            plain = record.final(f"{split}/{name}")
            averaged = record.final(record.averaged(f"{split}/{name}"))
            assert plain in same and averaged in same
            assert same[averaged] == pytest.approx(same[plain], abs=1e-6), name
    other, _ = _tracked(tmp_path / "k3", monkeypatch, LAST_K)
    assert other[record.final("val/loss")] == pytest.approx(same[record.final("val/loss")],
                                                            abs=1e-6)  # same training
    assert other[record.final(record.averaged("val/loss"))] != pytest.approx(other[record.final("val/loss")],
                                                                             abs=1e-6)


def test_a_run_without_the_option_logs_no_averaged_reading(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    metrics, _ = _tracked(tmp_path, monkeypatch)
    assert record.final("val/loss") in metrics
    assert not any(record.is_averaged(record.unfinal(k)) for k in metrics)


# ---------------------------------------------------------------- the spec field
def test_the_option_enters_the_identity_only_when_set(tmp_path: Path) -> None:
    plain = spec_at(tmp_path)
    assert "weight_average" not in plain.identity()["train"]
    last_k = spec_at(tmp_path, LAST_K)
    assert last_k.identity()["train"]["weight_average"] == {"kind": "last_k", "k": 5, "every": 4}
    hashes = {plain.spec_hash, last_k.spec_hash, spec_at(tmp_path, EMA).spec_hash,
              spec_at(tmp_path, "train.weight_average={kind: ema, decay: 0.9}").spec_hash}
    assert len(hashes) == 4


@pytest.mark.parametrize(("option", "message"), [
    ("{kind: lastk, k: 5, every: 2}", r"train\.weight_average\.kind: found 'lastk'.*did you mean 'last_k'"),
    ("{kind: last_k, k: 5}", r"train\.weight_average\.every: kind last_k needs every"),
    ("{kind: ema, decay: 0.9, k: 3}", r"train\.weight_average\.k: k is an option of another kind"),
    ("{kind: ema, decay: 1.0}", r"train\.weight_average\.decay: found 1\.0; expected a value < 1\.0"),
    ("{kind: last_k, k: 5, every: 5}", r"train\.weight_average\.k: 5 snapshots every 5 steps need 25 steps; "
                                       r"train\.max_steps is 20"),
])
def test_a_bad_option_is_one_located_line(tmp_path: Path, option: str, message: str) -> None:
    with pytest.raises(SpecError, match=message) as caught:
        spec_at(tmp_path, f"train.weight_average={option}")
    assert len(caught.value.problems) == 1


STUDY = "\nablation: {axes: {model.positions: [sinusoidal, rope]}, seeds: [0, 1]%s}\n"


def study_spec(folder: Path, *overrides: str, metric: str = "") -> ExperimentSpec:
    path = folder / "study.yaml"
    path.write_text(TINY + STUDY % (f", metric: {metric}" if metric else ""))
    return load_spec(path, list(overrides))


def test_a_study_with_averaging_decides_on_the_averaged_reading_unless_told_otherwise(tmp_path: Path) -> None:
    assert study_metric(study_spec(tmp_path)) == "val/exact_match"
    assert study_metric(study_spec(tmp_path, LAST_K)) == "val/averaged/exact_match"
    assert study_metric(study_spec(tmp_path, LAST_K, metric="val/exact_match")) == "val/exact_match"
    with pytest.raises(SpecError, match=r"ablation\.metric: val/averaged/exact_match is the averaged "
                                        r"weights' reading: set train\.weight_average"):
        study_spec(tmp_path, metric="val/averaged/exact_match")


def test_averaged_names_keep_their_split_and_direction() -> None:
    from ablate.spec import metricnames

    assert record.averaged("val/bleu") == "val/averaged/bleu" == record.averaged("val/averaged/bleu")
    assert record.plain("test/averaged/chrf") == "test/chrf" and record.plain("val/loss") == "val/loss"
    assert metricnames.higher_is_better("val/averaged/bleu") and not metricnames.higher_is_better(
        "val/averaged/loss")
    assert "test/averaged/bleu" in metricnames.all_metrics()
    assert fp32_parameters(nn.Linear(1, 1)).keys() == {"weight", "bias"}


# ---------------------------------------------------------------- the report
def _report_study(averaged: bool) -> Study:
    def run(variant: str, seed: int, bleu: float) -> Run:
        metrics = {"val/bleu": bleu, "test/bleu": bleu - 1, "val/loss": 2.0}
        if averaged:
            metrics |= {record.averaged("val/bleu"): bleu + 0.5, record.averaged("test/bleu"): bleu - 0.5}
        return Run(f"{variant}-{seed}", variant, seed, "finished", "h", 0.0, {}, metrics, {})

    parent = {"tags": {}, "params": {}, "run_name": "s", "run_id": "p"}
    return data_module._study(parent, [run(v, s, 30.0 + s) for v in ("baseline", "positions=rope")
                                       for s in (0, 1)], StudyRecord())


def test_the_report_reads_the_averaged_reading_when_the_runs_have_it() -> None:
    """ablation.metric auto: the report's effects are on the averaged test reading, and the main table shows
    both readings; a study without averaging reads and shows as before."""
    with_avg, without = _report_study(True), _report_study(False)
    assert with_avg.primary == "test/averaged/bleu" and without.primary == "test/bleu"
    columns = [key for key, _, _ in data_module.main_table_columns(with_avg)]
    assert columns[:4] == ["val/bleu", "test/bleu", "val/averaged/bleu", "test/averaged/bleu"]
    assert not any(record.is_averaged(key) for key, _, _ in data_module.main_table_columns(without))
