"""Downstream tasks through lm-evaluation-harness: a multiple-choice task on local files (written here),
scored through the harness's own model interface on ablate's model, gives the accuracy, normalised accuracy
and bits per byte that a count by hand gives; unknown tasks and missing files are one line naming the
task; the scores are run metrics a study may decide on."""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from ablate.cli import main
from ablate.data.tokenize import Tokenizers, fixed_wordlevel
from ablate.engine.builders import build_lm
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.errors import AblateError
from ablate.run.downstream import check_tasks, downstream_scores
from ablate.run.runner import run_experiment
from ablate.spec import metricnames
from ablate.spec.experiment import ExperimentSpec, ModelSpec
from ablate.spec.harness_tasks import DownstreamSpec
from ablate.tracking import record
from ablate.tracking.read import run_tags

pytestmark = pytest.mark.usefixtures("single_thread")

WORDS = "the cat dog sat on mat a red blue sky is what colour big small".split()
DOCS = [
    {"question": "the cat sat on the", "choices": ["mat", "sky", "big dog"], "answer": 0},
    {"question": "the sky is", "choices": ["blue", "red cat", "a"], "answer": 0},
    {"question": "what colour is the dog", "choices": ["red", "blue", "a small mat"], "answer": 2},
    {"question": "a big", "choices": ["dog", "cat"], "answer": 1},
    {"question": "the small red", "choices": ["cat sat", "sky", "mat"], "answer": 1},
]


def write_task(folder: Path, name: str = "tiny_mc", data: str = "data.jsonl") -> Path:
    """A multiple-choice task in the harness's YAML format over a local JSON-lines file."""
    (folder / "data.jsonl").write_text("\n".join(json.dumps(d) for d in DOCS) + "\n")
    tasks = folder / "tasks"
    tasks.mkdir(exist_ok=True)
    (tasks / f"{name}.yaml").write_text(f"""task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {folder / data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_target: answer
doc_to_choice: choices
metric_list:
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
  - {{metric: acc_norm, aggregation: mean, higher_is_better: true}}
""")
    return tasks


def tiny_model(tok: Tokenizers) -> DecoderOnlyLM:
    spec = ModelSpec.model_validate({"arch": "decoder_only", "d_model": 16, "heads": 2, "decoder_layers": 1,
                                     "d_ff": 32, "dropout": 0.0, "max_positions": 64})
    model = build_lm(spec, tok.tgt_vocab_size, seed=3).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.5)
    return model


@torch.no_grad()
def by_hand(model: DecoderOnlyLM, tok: Tokenizers) -> dict[str, float]:
    """Each choice's log-likelihood after bos and the question, from ablate's own forward; the counts."""
    right = right_norm = 0
    nats, size = 0.0, 0
    for doc in DOCS:
        lls = []
        for choice in doc["choices"]:
            ctx, cont = [tok.bos_id, *tok.encode_tgt(doc["question"])], tok.encode_tgt(choice)
            logp = F.log_softmax(model(torch.tensor([ctx + cont]))[0, :-1], dim=-1)
            lls.append(sum(float(logp[len(ctx) - 1 + i, t]) for i, t in enumerate(cont)))
        continuations = [" " + c for c in doc["choices"]]  # the harness's target delimiter, a space
        right += max(range(len(lls)), key=lambda i: lls[i]) == doc["answer"]
        right_norm += max(range(len(lls)), key=lambda i: lls[i] / len(continuations[i])) == doc["answer"]
        nats -= lls[doc["answer"]]
        size += len(continuations[doc["answer"]].encode())
    n = len(DOCS)
    return {"acc": right / n, "acc_norm": right_norm / n, "bpb": nats / (math.log(2) * size)}


def test_a_local_multiple_choice_task_scores_as_counted_by_hand(tmp_path: Path) -> None:
    tok = Tokenizers(fixed_wordlevel(WORDS))
    model = tiny_model(tok)
    section = DownstreamSpec.model_validate({"tasks": ["tiny_mc"], "include_path": str(write_task(tmp_path))})
    (scores,) = downstream_scores(model, tok, section)
    expected = by_hand(model, tok)
    assert scores.documents == len(DOCS)
    assert scores.acc == pytest.approx(expected["acc"])
    assert scores.acc_norm == pytest.approx(expected["acc_norm"])
    assert scores.bpb == pytest.approx(expected["bpb"], rel=1e-5)
    assert 0 < expected["acc"] < 1  # the count is not trivially all or nothing
    assert scores.metrics() == {"downstream/tiny_mc/acc": scores.acc, "downstream/tiny_mc/acc_norm":
                                scores.acc_norm, "downstream/tiny_mc/bpb": scores.bpb}


def test_an_unknown_task_or_a_missing_file_is_one_line_naming_it(tmp_path: Path) -> None:
    tasks = write_task(tmp_path)
    with pytest.raises(AblateError, match=r"eval.downstream.tasks.0: unknown lm-evaluation-harness task "
                                          r"'tiny_mq'.*did you mean 'tiny_mc'\?"):
        check_tasks(DownstreamSpec.model_validate({"tasks": ["tiny_mq"], "include_path": str(tasks)}))
    write_task(tmp_path, name="gone_mc", data="nowhere.jsonl")
    both = DownstreamSpec.model_validate({"tasks": ["tiny_mc", "gone_mc"], "include_path": str(tasks)})
    with pytest.raises(AblateError, match=r"tasks.1: task 'gone_mc': its data cannot be read"):
        check_tasks(both)
    with pytest.raises(AblateError, match="include_path: folder not found"):
        check_tasks(DownstreamSpec.model_validate({"tasks": ["x"], "include_path": str(tmp_path / "no")}))


LM_SPEC: dict[str, Any] = {
    "name": "lm-downstream", "tracking": {"experiment": "lm-downstream"},
    "data": {"source": "synthetic", "document_lines": 4, "max_len": 32, "batch_tokens": 256,
             "synthetic": {"task": "captions", "train_size": 200, "val_size": 20, "test_size": 20}},
    "model": {"arch": "decoder_only", "d_model": 16, "heads": 2, "d_ff": 32, "decoder_layers": 1,
              "dropout": 0.0, "max_positions": 64},
    "train": {"max_steps": 4, "eval_every": 4, "schedule": {"warmup_steps": 1}},
    "eval": {"samples": 0},
}


def test_downstream_metrics_are_a_study_metric_only_where_the_spec_scores_them() -> None:
    study = {"ablation": {"axes": {"model.norm": ["builtin", "rms"]}, "metric": "downstream/tiny_mc/acc"}}
    with pytest.raises(ValueError, match="needs eval.downstream naming the lm-evaluation-harness task"):
        ExperimentSpec.model_validate({**LM_SPEC, **study})
    eval_ = {"samples": 0, "downstream": {"tasks": ["tiny_mc", {"task": "other", "fewshot": 2}]}}
    spec = ExperimentSpec.model_validate({**LM_SPEC, **study, "eval": eval_})
    assert spec.ablation is not None and spec.ablation.metric == "downstream/tiny_mc/acc"
    with pytest.raises(ValueError, match="did you mean 'tiny_mc'"):
        ExperimentSpec.model_validate({**LM_SPEC, "eval": eval_,
                                       "ablation": {**study["ablation"], "metric": "downstream/tiny_mq/acc"}})
    assert metricnames.mode("downstream/x/acc") == metricnames.mode("downstream/x/acc_norm") == "max"
    assert metricnames.mode("downstream/x/bpb") == "min"
    assert "downstream" not in ExperimentSpec.model_validate(LM_SPEC).resolved()["eval"]  # hashes unchanged
    with pytest.raises(ValueError, match="need model.arch: decoder_only"):
        ExperimentSpec.model_validate({"name": "mt", "eval": {"downstream": {"tasks": ["x"]}}})


@pytest.mark.soak  # trains a run, then the harness scores it twice (the default suite's 10 minutes)
def test_a_run_records_its_downstream_scores_and_evaluate_prints_them(workdir: Path) -> None:
    tasks = write_task(workdir)
    eval_ = {"samples": 0, "downstream": {"tasks": ["tiny_mc"], "include_path": str(tasks)}}
    spec = ExperimentSpec.model_validate({**LM_SPEC, "eval": eval_})
    result = run_experiment(spec, quiet=True)
    assert result.status == "finished" and result.run_id is not None
    acc = result.metrics["downstream/tiny_mc/acc"]
    assert {"downstream/tiny_mc/acc_norm", "downstream/tiny_mc/bpb"} <= set(result.metrics)
    assert run_tags(result.run_id)[record.STATUS] == "finished"
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["evaluate", result.run_id, "--tasks", "tiny_mc", "--include", str(tasks)]) == 0
    assert f"acc {acc:.4f}" in out.getvalue()  # the finished run's checkpoint, scored again: the same
    assert main(["evaluate", result.run_id, "--tasks", "no_such_task", "--include", str(tasks)]) == 2
    bad = ExperimentSpec.model_validate({**LM_SPEC, "name": "lm-bad",
                                         "eval": {"samples": 0, "downstream": {"tasks": ["no_such_task"]}}})
    with pytest.raises(AblateError, match="unknown lm-evaluation-harness task 'no_such_task'"):
        run_experiment(bad, quiet=True)  # refused before any MLflow run or training


@torch.no_grad()
def test_the_harness_interface_answers_rolling_and_generation_requests_as_ablate_does() -> None:
    from lm_eval.api.instance import Instance

    from ablate.engine.harness import AblateLM
    from ablate.engine.lm_eval import generate

    tok = Tokenizers(fixed_wordlevel(WORDS))
    model = tiny_model(tok)
    lm = AblateLM(model, tok, batch_size=2)
    text = "the cat sat on the mat"
    ids = [tok.bos_id, *tok.encode_tgt(text)]
    logp = F.log_softmax(model(torch.tensor([ids]))[0, :-1], dim=-1)
    by_hand = sum(float(logp[i, t]) for i, t in enumerate(ids[1:]))  # every token after bos, once
    (rolling,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    assert rolling == pytest.approx(by_hand, rel=1e-5)
    prompt = "the big"
    continuation = tok.decode_tgt(generate(model, [tok.bos_id, *tok.encode_tgt(prompt)], 6, greedy=True,
                                           eos_id=tok.eos_id))
    stop = " " + continuation.split()[-1]  # a stop string that occurs in the continuation
    asked = [(prompt, {"until": [], "max_gen_toks": 6}), (prompt, {"until": [stop], "max_gen_toks": 6})]
    whole, cut = lm.generate_until([Instance("generate_until", {}, a, i) for i, a in enumerate(asked)])
    assert whole == continuation
    assert cut == continuation[: continuation.index(stop)] and len(cut) < len(whole)  # cut before the stop


def test_the_documented_local_task_is_a_task_the_harness_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # its data file is named from the repository's root, as docs/interop.md runs it
    check_tasks(DownstreamSpec.model_validate({"tasks": ["pydoc_mc"], "include_path": "docs/interop-tasks"}))
