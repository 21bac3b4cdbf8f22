"""The spec's ``eval.downstream``: lm-evaluation-harness tasks a language model is scored on (its names
and few-shot counts, a folder of local task files), checked here; ablate/run/downstream.py runs them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from ablate.spec.base import BIG, Int, Strict

TASK_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"  # an lm-evaluation-harness task name, a metric name's part


class DownstreamTask(Strict):
    """One lm-evaluation-harness task a language model is scored on (a plain string is its name)."""

    task: Annotated[str, Field(pattern=TASK_PATTERN)]
    """the harness's task name (hellaswag, arc_easy, or a task of include_path)"""
    fewshot: Annotated[Int, Field(ge=0, le=128)] = 0
    """few-shot examples in each prompt (the harness draws them from the task's own few-shot split)"""


class DownstreamSpec(Strict):
    """Downstream tasks through EleutherAI's lm-evaluation-harness (the ``interop`` extra), scored on the best
    checkpoint after the val and test splits: ``downstream/<task>/acc``, ``acc_norm`` and ``bpb`` (bits per
    byte of the correct continuation), a study's metric like any other."""

    tasks: Annotated[list[DownstreamTask], Field(min_length=1)]
    """the tasks, each a name or {task, fewshot}"""
    include_path: str | None = None
    """a folder of the harness's YAML task files (tasks on local files, no hub needed); relative to the
    working directory; ${VAR} expanded"""
    limit: Annotated[Int, Field(ge=1, le=BIG)] | None = None
    """score at most this many documents of each task (the first ones)"""
    batch_size: Annotated[Int, Field(ge=1, le=4096)] = 16
    """sequences scored in one forward"""

    @model_validator(mode="before")
    @classmethod
    def _names_as_tasks(cls, data: Any) -> Any:
        """``tasks: [hellaswag, {task: arc_easy, fewshot: 5}]``: a plain name is a task at zero shots."""
        if isinstance(data, dict) and isinstance(data.get("tasks"), list):
            data = {**data, "tasks": [{"task": t} if isinstance(t, str) else t for t in data["tasks"]]}
        return data

    @model_validator(mode="after")
    def _each_task_once(self) -> DownstreamSpec:
        names = [t.task for t in self.tasks]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"task {twice[0]!r} is named twice: its metrics would collide")
        return self

    def names(self) -> tuple[str, ...]:
        return tuple(t.task for t in self.tasks)
