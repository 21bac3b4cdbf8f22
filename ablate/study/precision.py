"""One precision for every cell of a study whose spec says ``train.precision: auto``.

``auto`` resolves per machine: bf16 where the CPU or GPU has bf16 units, fp32 (CPU) or fp16 (older GPU)
elsewhere. A study continued on another machine would then pair a variant's bf16 cells with the
baseline's fp32 ones, and its paired differences would measure the precision as well as the variant (the
modern-axes Multi30k study did, over two kinds of CPU). So a study resolves ``auto`` once: the precision
its first finished cell ran at, else what this machine resolves it to. It keeps that in its store (the
cell queue's ``precision`` attr, which every worker reads) and on its parent run
(``ablate.study_precision``), and every cell trains at it wherever it runs, as do the trials of its tuning
searches from then on. A finished cell that ran at another precision (before the study pinned one) is
tagged superseded with the reason and queued again, like a cell of an older variant version; the report
leaves it out.

A stand-alone search (``ablate tune``) resolves ``auto`` once the same way: its Optuna study keeps the
answer (its ``precision`` attr) when it is created, and every trial, on any worker or machine that shares
the storage, trains at it; its trials are compared with each other as an ablation's cells are. A search
begun before the pin takes the precision of the machine that next continues it.

A spec that names its precision (``fp32``, ``bf16``, ``fp16``) is already one setting for every cell:
nothing is pinned. A finished search trial is never superseded: a search selects settings, and the
report's own-best section says where they were chosen at another precision than the cells measure them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
import pandas as pd
import torch

from ablate.hardware import default_device_type, resolve_precision
from ablate.spec.experiment import ExperimentSpec
from ablate.study.cell_queue import CellQueue
from ablate.study.optuna_store import Store
from ablate.tracking import record
from ablate.tracking.read import tags_and_params

QUEUE_ATTR = "precision"


def first_cell_precision(children: pd.DataFrame) -> str | None:
    """The precision the study's earliest finished, current cell ran at (None: no such cell)."""
    ran: list[tuple[Any, str]] = []
    for rec in children.to_dict("records"):
        tags, _ = tags_and_params(rec)
        finished = tags.get(record.KIND) == "cell" and rec.get("status") == "FINISHED"
        if finished and tags.get(record.PRECISION) and not tags.get(record.SUPERSEDED):
            ran.append((rec.get("start_time"), tags[record.PRECISION]))
    return min(ran, key=lambda x: x[0])[1] if ran else None


def other_precision(tags: Mapping[str, str], params: Mapping[str, str], pinned: str) -> str | None:
    """Why a finished cell no longer counts ('ran in bf16; the study's cells train in fp32'), or None: it
    ran at the study's precision, or named its own, or predates the precision tag."""
    ran = tags.get(record.PRECISION)
    if params.get("train.precision", "auto") != "auto" or not ran or ran == pinned:
        return None
    return (f"{record.SUPERSEDED_PRECISION}{ran}; the study's cells train in {pinned} "
            "(train.precision: auto, pinned per study)")


def pinned_precision(spec_precision: str, stored: str | None, children: pd.DataFrame | None) -> str | None:
    """The study's precision: None for a spec that names one; else the one its store keeps, else its first
    finished cell's, else what this machine resolves ``auto`` to."""
    if spec_precision != "auto":
        return None
    if stored:
        return stored
    first = first_cell_precision(children) if children is not None and not children.empty else None
    return first or resolve_here()


def at_study_precision(spec: ExperimentSpec, pinned: str | None) -> ExperimentSpec:
    """The cell's spec to train: ``auto`` replaced by the study's precision (a new run folder, so a cell
    queued again after another precision never picks up that run's result), else the spec itself."""
    if pinned is None or spec.train.precision != "auto":
        return spec
    return spec.model_copy(update={"train": spec.train.model_copy(update={"precision": pinned})})


def study_pin(store: Store, cells_study: str, direction: str) -> str | None:
    """The precision an ablation's store keeps for its cells (None: none pinned yet, or no such study)."""
    pinned = CellQueue(store, cells_study, direction, create=False).get(QUEUE_ATTR)
    return str(pinned) if pinned else None


def search_pin(study: optuna.Study, spec_precision: str) -> str | None:
    """A stand-alone search's precision: None for a spec that names one; else the one its Optuna study
    keeps, else this machine's, which it then keeps. Call it under the search's store lock, so that two
    machines starting one search agree."""
    if spec_precision != "auto":
        return None
    stored = study.user_attrs.get(QUEUE_ATTR)
    if stored:
        return str(stored)
    here = resolve_here()
    study.set_user_attr(QUEUE_ATTR, here)
    return here


def resolve_here() -> str:
    return resolve_precision("auto", torch.device(default_device_type()))
