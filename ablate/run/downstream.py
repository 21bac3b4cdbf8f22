"""Downstream tasks through EleutherAI's lm-evaluation-harness: a language model's scores as run metrics.

``eval.downstream`` (a run's end, ablate/run/evaluation.py) and ``ablate evaluate RUN --tasks a,b`` (a
finished run) both call :func:`downstream_scores`: the harness builds each task (its prompts, few-shot
examples, scoring) from its own registry or from the YAML task files of ``include_path`` (a task on local
files: ``dataset_path: json`` with ``dataset_kwargs.data_files``), asks ablate's model through
:class:`~ablate.engine.harness.AblateLM`, and scores. Per task, under ablate/spec/metricnames.py's names:

* ``downstream/<task>/acc``: the harness's accuracy (the choice of highest log-likelihood is the gold one);
* ``downstream/<task>/acc_norm``: the same with each choice's log-likelihood divided by its length in
  characters (the harness's normalised accuracy, as HellaSwag and ARC report it);
* ``downstream/<task>/bpb``: the correct continuation's negative log-likelihood in bits over its UTF-8
  bytes, summed over the task's documents and divided once (DataDecide's (Magnusson et al. 2025) and
  OLMES's measure, smoother than accuracy at small scale), read from the harness's own logged requests
  (the continuation as the harness sent it, its leading space included).

A task that the harness does not know, or whose data files cannot be read, is one line naming the task and
``eval.downstream`` (exit 2), checked before a run starts training (:func:`check_tasks`). The harness is
the ``interop`` extra: imported here, and this module only where tasks are asked for.
"""

from __future__ import annotations

import difflib
import functools
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lm_eval import evaluator
from lm_eval.tasks import TaskManager

from ablate.data.paths import expand_env
from ablate.data.tokenize import Tokenizers
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.harness import harness_model
from ablate.errors import AblateError
from ablate.spec import metricnames
from ablate.spec.experiment import ExperimentSpec
from ablate.spec.harness_tasks import DownstreamSpec, DownstreamTask

FIELD = "eval.downstream"
HARNESS_SEED = 1234  # the harness's default seeds (few-shot sampling): every run draws the same examples


@dataclass(frozen=True)
class TaskScores:
    """One task's scores and how many documents they rest on."""

    task: str
    acc: float
    acc_norm: float | None  # None for a task whose metrics have no normalised accuracy
    bpb: float | None  # None where no correct continuation was scored (a generation task)
    documents: int

    def metrics(self) -> dict[str, float]:
        values = {"acc": self.acc, "acc_norm": self.acc_norm, "bpb": self.bpb}
        return {metricnames.downstream_metric(self.task, k): v for k, v in values.items() if v is not None}


def task_manager(include_path: str | None, tasks: Sequence[str] = ()) -> TaskManager:
    """The harness's task registry, with the YAML task files of ``include_path`` added; where every one of
    ``tasks`` is among that folder's, the folder's alone (indexing the harness's own 14,000 task files
    takes about 10 s, and a task on local files does not need them)."""
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    if include_path is None:
        return _indexed(None)
    folder = Path(expand_env(include_path, f"{FIELD}.include_path"))
    if not folder.is_dir():
        raise AblateError(f"{FIELD}.include_path: folder not found: {folder.resolve()}")
    # the folder's task files and their times are part of the key: a file added or edited is indexed again
    files = tuple(sorted((str(p), p.stat().st_mtime_ns) for p in folder.rglob("*.y*ml")))
    local = _indexed(str(folder.resolve()), files, defaults=False)
    if tasks and set(tasks) <= set(local.all_tasks):
        return local
    return _indexed(str(folder.resolve()), files)


@functools.cache
def _indexed(folder: str | None, files: tuple[tuple[str, int], ...] = (), defaults: bool = True
             ) -> TaskManager:
    """One registry a folder (and its task files) and process: a run checks its tasks before training and
    scores them after (the manager only reads; each evaluation builds its tasks afresh from it)."""
    del files  # the cache's key only
    return TaskManager(include_path=folder, include_defaults=defaults)


def check_tasks(downstream: DownstreamSpec) -> None:
    """Every task known to the harness and its data readable: one line naming the first that is not."""
    manager = task_manager(downstream.include_path, [t.task for t in downstream.tasks])
    known = set(manager.all_tasks)
    for i, task in enumerate(downstream.tasks):
        where = f"{FIELD}.tasks.{i}"
        if task.task not in known:
            close = difflib.get_close_matches(task.task, sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            local = f" or in {downstream.include_path}" if downstream.include_path else \
                " (tasks on local files: set eval.downstream.include_path)"
            raise AblateError(f"{where}: unknown lm-evaluation-harness task {task.task!r}: not in the "
                              f"harness's registry{local}{hint}")
        try:
            manager.load([task.task])
        except Exception as exc:  # noqa: BLE001 - datasets and the harness raise many types for missing data
            raise AblateError(f"{where}: task {task.task!r}: its data cannot be read "
                              f"({type(exc).__name__}: {_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


def downstream_scores(model: DecoderOnlyLM, tok: Tokenizers, downstream: DownstreamSpec,
                      device: torch.device | None = None) -> list[TaskScores]:
    """Each task of ``downstream`` scored through the harness on ``model`` (fp32, eval mode)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    manager = task_manager(downstream.include_path, [t.task for t in downstream.tasks])
    lm = harness_model(model, tok, batch_size=downstream.batch_size, device=device)
    out = []
    for task in downstream.tasks:
        out.append(_score_task(lm, task, manager, downstream.limit))
    return out


def _score_task(lm: Any, task: DownstreamTask, manager: TaskManager, limit: int | None) -> TaskScores:
    try:
        results = evaluator.simple_evaluate(
            model=lm, tasks=[task.task], num_fewshot=task.fewshot, task_manager=manager, limit=limit,
            log_samples=True, bootstrap_iters=0, random_seed=HARNESS_SEED, numpy_random_seed=HARNESS_SEED,
            torch_random_seed=HARNESS_SEED, fewshot_random_seed=HARNESS_SEED, verbosity="WARNING")
    except (KeyError, FileNotFoundError, ValueError) as exc:
        raise AblateError(f"{FIELD}: task {task.task!r}: {type(exc).__name__}: {_first_line(exc)}") from None
    if results is None:
        raise AblateError(f"{FIELD}: task {task.task!r}: the harness returned no results")
    return task_scores(task.task, results["results"].get(task.task, {}),
                       results["samples"].get(task.task, []))


def task_scores(task: str, result: Mapping[str, Any], samples: Sequence[Mapping[str, Any]]) -> TaskScores:
    """A task's accuracy and normalised accuracy as the harness computed them (``acc,none``), and the
    correct continuations' bits per byte from its logged requests."""
    if "acc,none" not in result:
        found = ", ".join(k.split(",")[0] for k in result if "," in k and not k.endswith("_stderr,none"))
        raise AblateError(f"{FIELD}: task {task!r} reports no accuracy (its metrics: {found or 'none'}); "
                          "downstream metrics are a multiple-choice or loglikelihood task's acc, acc_norm, "
                          "bpb")
    norm = result.get("acc_norm,none")
    return TaskScores(task, float(result["acc,none"]), None if norm is None else float(norm),
                      correct_bpb(samples), len(samples))


def correct_bpb(samples: Sequence[Mapping[str, Any]]) -> float | None:
    """Sum over documents of the gold continuation's -log-likelihood (nats), over ln 2 times the sum of its
    UTF-8 bytes; None where no document has one gold continuation."""
    nats, size = 0.0, 0
    for sample in samples:
        gold, args, resps = sample.get("target"), sample.get("arguments"), sample.get("resps")
        if not isinstance(gold, int) or not args or not resps or gold >= len(resps) or gold >= len(args):
            continue
        continuation = args[gold][1]
        loglik = resps[gold][0][0]
        nats -= float(loglik)
        size += len(str(continuation).encode("utf-8"))
    return nats / (math.log(2) * size) if size else None


def print_scores(run_id: str, scores: Sequence[TaskScores]) -> None:
    print(f"run {run_id} on {len(scores)} lm-evaluation-harness task(s)")
    for s in scores:
        norm = "" if s.acc_norm is None else f"  acc_norm {s.acc_norm:.4f}"
        bpb = "" if s.bpb is None else f"  bpb {s.bpb:.4f}"
        print(f"  {s.task:<24} acc {s.acc:.4f}{norm}{bpb}  ({s.documents} documents)")


def tasks_from_command(tasks: str, include_path: str | None, fewshot: int,
                       limit: int | None) -> DownstreamSpec:
    """``--tasks a,b --fewshot K --include DIR --limit N`` as a spec section (its checks included)."""
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names:
        raise AblateError("--tasks: name at least one lm-evaluation-harness task (e.g. hellaswag,arc_easy)")
    try:
        return DownstreamSpec.model_validate({"tasks": [{"task": n, "fewshot": fewshot} for n in names],
                                              "include_path": include_path, "limit": limit})
    except ValueError as exc:
        raise AblateError(f"--tasks: {_first_line(exc)}") from None


def evaluate_tasks(run_id: str, model: torch.nn.Module, spec: ExperimentSpec, tok: Tokenizers,
                   downstream: DownstreamSpec) -> int:
    """`ablate evaluate RUN --tasks ...`: print each task's scores (a finished run's best checkpoint)."""
    if not isinstance(model, DecoderOnlyLM):
        raise AblateError(f"run {run_id} is an encoder-decoder translation model: lm-evaluation-harness "
                          "tasks score a language model")
    check_tasks(downstream)
    print_scores(run_id, downstream_scores(model, tok, downstream))
    return 0
