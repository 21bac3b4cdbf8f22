"""The MLflow record of ablate as one declared schema: every tag, param, metric and artifact name that
writers (`ablate.tracking`, `ablate.run`, `ablate.study`) and readers (`ablate.tracking.read`,
`ablate.report`) use. Change a name here, and keep the old one readable (see `result_metrics`,
`first_artifact`): records already written must keep reading back.

Layout: one MLflow experiment per study (tag `EXPERIMENT_KIND` so MLflow 3's UI opens it in its
model-training view, description in `NOTE`); a study is a parent run, each cell or trial a child run
(`PARENT_RUN`). Metric names come from `ablate.spec.metricnames` (what a spec may name); training-time
evaluations keep them (``val/loss`` at each ``eval_every``), the run's result (the best checkpoint
evaluated on whole val/test, whole-run throughput, time and memory) gets the `FINAL` prefix
(``final/val/loss``), so no curve gets a point past its last training step. Constants of a run
(`MODEL_PARAMS`, `PADDING`) are logged once, at step 0.

This module imports nothing from mlflow: the runner, studies and reports read names from it cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ablate.spec import metricnames as _metric

# re-exported (the `X as X` form): writers and readers of the record need this one module
from ablate.spec.metricnames import AVERAGED as AVERAGED
from ablate.spec.metricnames import averaged as averaged
from ablate.spec.metricnames import is_averaged as is_averaged
from ablate.spec.metricnames import plain as plain

# ---------------------------------------------------------------- MLflow's own tags
PARENT_RUN = "mlflow.parentRunId"
RUN_NAME = "mlflow.runName"
NOTE = "mlflow.note.content"  # the description shown on an experiment's or run's page (markdown)
GIT_COMMIT = "mlflow.source.git.commit"
USER = "mlflow.user"
SOURCE_TYPE = "mlflow.source.type"
SOURCE_NAME = "mlflow.source.name"
LOGGED_ARTIFACTS = "mlflow.loggedArtifacts"  # artifacts the UI shows in a special view (tables)
# Experiment tag that decides what MLflow 3's UI opens an experiment on: without it an experiment with no
# traces opens on the GenAI "Traces" tab. Values are the UI's ExperimentKind enum.
EXPERIMENT_KIND = "mlflow.experimentKind"
MODEL_TRAINING_KIND = "custom_model_development"
# The UI's query parameter for the home page's GenAI / model-training switch.
WORKFLOW_QUERY = "workflowType=machine_learning"
# An experiment tag holding a runs-page state (filter, grouping, charts) that the URL parameter
# viewStateShareKey=<key> opens: MLflow 3's shared views (ablate/tracking/comparison_view.py writes one)
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."
SHARED_VIEW_QUERY = "viewStateShareKey"
CHART_MODE_QUERY = "compareRunsMode=CHART"  # the runs page's chart view, not its table
# The runs page's chart sections for metrics no other section names, which MLflow's UI keeps last.
UI_METRIC_SECTIONS = ("Model metrics", "System metrics")
RUN_ID_ATTRIBUTE = "attributes.run_id"  # a run id in a search filter
SEARCH_FILTER_QUERY = "searchFilter"  # the runs page's URL parameter: its search

# ---------------------------------------------------------------- ablate's run tags
STUDY = "ablate.study"  # the study (= MLflow experiment) a run belongs to
VARIANT = "ablate.variant"  # 'baseline', 'residual=post_norm', 'trial-3'; 'study' / 'search' on a parent
SEED = "ablate.seed"  # cells and single runs only: a study's parent has no seed of its own
SPEC_HASH = "ablate.spec_hash"  # the resolved spec's hash: a run's identity (not on a study's parent)
STATUS = "ablate.status"  # running | finished | diverged | failed | pruned | killed
# JSON {axis: version} of the chosen variants whose implementation version is above 1 (absent: all 1)
COMPONENT_VERSIONS = "ablate.component_versions"
# Set by `ablate study` on a cell whose variant's implementation changed since it ran: why it is stale.
# The run stays in the store; reports leave it out and the study retrains the cell under its new identity.
SUPERSEDED = "ablate.superseded"
# how a superseded tag for another precision than the study's begins (ablate/study/precision.py); a
# version's reads 'attention=qk_norm v1, now v2'
SUPERSEDED_PRECISION = "ran in "
KIND = "ablate.kind"  # ablation | search (parent runs), cell | trial (child runs); absent on single runs
CELL = "ablate.cell"  # a cell's <spec hash>-s<seed>
# A cell trained packed with others of its shape in one stacked model (ablate/engine/packed_model.py): the
# pack's size and the cell's index in it, as text; absent on a cell trained alone
PACK_SIZE = "ablate.pack_size"
PACK_INDEX = "ablate.pack_index"
TRIAL = "ablate.trial"  # a search trial's number
OPTUNA_STUDY = "ablate.optuna_study"  # the Optuna study coordinating the cells or trials
OVERRIDES = "ablate.overrides"  # JSON: the fields a cell changes from the baseline
DESIGN = "ablate.design"  # an ablation study's design (one_at_a_time, full_factorial, variants)
METRIC = "ablate.metric"  # the metric a study ranks its cells or trials by (a final/ name)
REASON = "ablate.reason"  # why a run stopped early (diverged, early stopping, pruned)
# which kernels computed attention: "sdpa-<backend>" as torch's sdpa chose it (flash, efficient, cudnn,
# math), "varlen-<backend>" (one sdpa call a document), "flex", "matmul" (a detail, not a variant)
ATTENTION_KERNEL = "ablate.attention_kernel"
# JSON list of the optimizer's parameter groups: learning-rate multiplier (muP), weight decay (the no-decay
# rule), tensor and parameter counts, the roles each holds and, for muon, which optimizer steps it
PARAM_GROUPS = "ablate.param_groups"
ERROR = "ablate.error"  # the exception a failed run ended with
# JSON list of the errors earlier segments of a run failed with, when it was resumed after them (its status
# and ablate.error then say how its last segment ended; these stay visible in MLflow)
FAILED_SEGMENTS = "ablate.failed_segments"
SEQUENTIAL = "ablate.sequential"  # a study with adaptive seeds: its looks, alpha and min_effect (JSON)
# A study's parent: the variant its author says the shared hyperparameters were tuned on (ablation.tuned_on,
# only where the spec sets it: a report never states who tuned them from a default)
TUNED_ON = "ablate.tuned_on"
# A study's parent (JSON): its design as recorded before the first cell (ablate/study/preregister.py)
PREREGISTERED = "ablate.preregistered"
# A study's parent (JSON): the power plan its design was recorded with (ablate/study/sizing.py plan_record)
POWER_PLAN = "ablate.power_plan"
EXPECT = "ablate.expect"  # the published results a study checks (JSON list of ablation.expect entries)
# A cell's arm (ablation.tune / ablation.confirm): which comparison queued it. A run without the
# tag ran at the baseline's settings. A cell two arms share (a variant whose best settings are the
# baseline's) is listed under both in the parent's ARMS_ARTIFACT.
ARM = "ablate.arm"
# A ladder's cell (ablation.scales): the rung it ran at. A run without the tag belongs to no ladder.
RUNG = "ablate.rung"
# A ladder's parent (JSON): its rungs in order of compute, each with its overrides and planned compute, the
# target compute and the margin the transfer verdicts are judged by (ablate/study/rung_rounds.py)
SCALES = "ablate.scales"
# A data budget's cell (ablation.scales.budgets): the size rung it trains (its RUNG tag is the budget's own
# rung, <size>-<multiple>x) and the multiple of the size's tokens it trains on, as text (e.g. '2').
# ablate/stats and the report read a run's budget from these two tags.
SIZE_RUNG = "ablate.size_rung"
DATA_BUDGET = "ablate.data_budget"
# A tuned ladder's parent (JSON, ablate/study/ladder_tuning.py tuning_record): per variant and size rung the
# grid, each point's mean metric over the tuning seeds, the best point and whether it sat at a grid edge;
# per variant the best rate's power law in parameters.
LADDER_TUNE = "ablate.ladder_tune"
# A tuned ladder's tuning cells (ablation.scales.tune): every variant at every grid point of every size rung,
# on the tuning seeds; never compared, only read for each variant's best per rung.
LADDER_TUNE_ARM = "ladder_tune"
BASELINE_ARM = "baseline_settings"  # every variant at the baseline's hyperparameters (the study's cells)
OWN_BEST_ARM = "own_best"  # every variant at the best settings of its own search (ablation.tune)
CONFIRM_ARM = "confirm"  # the decided comparisons rerun at the larger setting (ablation.confirm)
ARMS = (BASELINE_ARM, OWN_BEST_ARM, CONFIRM_ARM)
# A study's parent with tune: or confirm: (JSON): the design its arms are judged by (the sequential one, or
# one look at a fixed seed list) and the arm whose decided comparisons confirm: reruns.
ARM_DESIGN = "ablate.arm_design"
TUNE = "ablate.tune"  # a study's parent (JSON): the tuning space, trials, fidelity and the baseline's values
CONFIRM = "ablate.confirm"  # a study's parent (JSON): the larger setting, as written, and its seeds
BEST_SETTINGS = "ablate.best_settings"  # a variant's search run (JSON): its best values of the tuning space
PARAMS_CHANGED = "ablate.params_changed"  # params a resumed run could not change (MLflow params are final)
MODEL_URI = "ablate.model_uri"  # models:/ URI of a logged model
DEVICE = "ablate.device"  # the device's name (NVIDIA H200, or the CPU and its threads)
DEVICE_INDEX = "ablate.device_index"  # which one: cuda:3 (a study's workers spread over a node's GPUs), cpu
PRECISION = "ablate.precision"  # what train.precision resolved to here (auto: bf16, fp16 or fp32)
SPEC_PRECISION = "ablate.spec_precision"  # a study cell trained at its study's precision: what its spec said
STUDY_PRECISION = "ablate.study_precision"  # a study's parent: what auto resolves to in every cell
# How the run's float32 matrix products ran: tf32 on a GPU (tensor cores, inputs rounded to 10 mantissa bits,
# float32 sums), ieee elsewhere (ablate/hardware.py's fp32_matmul)
FP32_MATMUL = "ablate.fp32_matmul"
HOST = "ablate.host"
CPU = "ablate.cpu"
GPU = "ablate.gpu"
GIT_DIRTY = "ablate.git_dirty"
VERSION_PREFIX = "ablate.version."  # one tag per package that decides results: ablate.version.torch
BEST_RUN = "ablate.best_run_id"  # a search's parent: the best trial's run
BEST_TRIAL = "ablate.best_trial"  # a search's parent: the best trial's number (the one best.yaml retrains)
TRIALS_LEFT = "ablate.trials_left"  # a search's parent: trials not started when search.timeout was reached
ORIGIN_RUN = "ablate.origin_run_id"  # an imported run: its run id in the store it was exported from
ARTIFACTS_LEFT_OUT = "ablate.artifacts_left_out"  # an imported run: JSON list of what its export left out
BLEU_SIGNATURE = "eval.sacrebleu_signature"
CHRF_SIGNATURE = "eval.chrf_signature"

STUDY_KINDS = ("ablation", "search")
CHILD_KINDS = ("cell", "trial")

# ---------------------------------------------------------------- metrics
FINAL = "final/"
# The metric names themselves are declared in ablate/spec/metricnames.py; the ones the record writes are
# bound here too, so that writers and readers of the record may name them through this module.
CPU_TIME = _metric.CPU_TIME
MODEL_PARAMS = _metric.MODEL_PARAMS
KV_CACHE = _metric.KV_CACHE
NON_EMBEDDING_PARAMS = _metric.NON_EMBEDDING_PARAMS
TRAIN_TOKENS = _metric.TRAIN_TOKENS
TRAIN_FLOPS = _metric.TRAIN_FLOPS
PADDING = _metric.PADDING
VOCAB_SIZE = _metric.VOCAB_SIZE
PEAK_MEMORY = _metric.PEAK_MEMORY
RUN_MEMORY = _metric.RUN_MEMORY
TOKENS_PER_S = _metric.TOKENS_PER_S
TRAIN_LOSS = _metric.TRAIN_LOSS
VAL_LOSS = _metric.VAL_LOSS
VAL_STEPS_TO_TARGET = _metric.VAL_STEPS_TO_TARGET
WALL_TIME = _metric.WALL_TIME
# train.weight_average (ablate/engine/averaging.py): the averaged weights' reading of each val/test metric,
# declared with the other metric names in ablate.spec.metricnames under the `AVERAGED` marker:
# 'val/bleu' -> averaged('val/bleu') == 'val/averaged/bleu', logged as final/val/averaged/bleu beside the
# best checkpoint's final/val/bleu; `plain` maps back (both imported above).
CONSTANT_METRICS = (MODEL_PARAMS, PADDING, KV_CACHE, NON_EMBEDDING_PARAMS, VOCAB_SIZE)


def final(metric: str) -> str:
    """The name of a run's result for ``metric``: 'val/bleu' -> 'final/val/bleu' (idempotent)."""
    return metric if metric.startswith(FINAL) else FINAL + metric


def unfinal(metric: str) -> str:
    """'final/val/bleu' -> 'val/bleu'; other names unchanged."""
    return metric[len(FINAL):] if metric.startswith(FINAL) else metric


def result_metrics(latest: Mapping[str, float]) -> dict[str, float]:
    """A run's result under the plain names ('val/bleu', 'train/wall_time_s') from its latest metric
    values: ``final/X`` where the run has it, else the latest ``X``. Runs recorded before the final/
    prefix logged their result as the last value of ``X`` (one step past the last training step), so
    both read back the same way."""
    out = {k: float(v) for k, v in latest.items() if not k.startswith(FINAL)}
    out.update({unfinal(k): float(v) for k, v in latest.items() if k.startswith(FINAL)})
    return out


def result_value(metrics: Mapping[str, float], metric: str) -> float | None:
    """``metric``'s result in a run's metrics dict: the final/ value, else the plain one (a diverged run
    has no final evaluation: its last training-time value), else None."""
    name = unfinal(metric)
    value = metrics.get(final(name), metrics.get(name))
    return None if value is None else float(value)


# ---------------------------------------------------------------- artifacts
SPEC_ARTIFACT = "spec.yaml"
SPEC_RESUMED_ARTIFACT = "spec.resumed.yaml"
ENVIRONMENT_ARTIFACT = "environment.json"
ENVIRONMENT_RESUMED_ARTIFACT = "environment.resumed.json"
TOKENIZERS_ARTIFACT = "tokenizer/tokenizers.json"
SRC_TOKENIZER_ARTIFACT = "tokenizer/src.json"
TGT_TOKENIZER_ARTIFACT = "tokenizer/tgt.json"
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_ARTIFACT = "checkpoints/best.pt"
SAMPLES_ARTIFACT = "samples.txt"
# A text run's final translations of each split its final BLEU was computed on: one JSON object
# {"hyp": ..., "ref": ...} a line, in corpus order, gzipped (`ablate.tracking.translations`). The
# report's paired bootstrap (`ablate.report.sections.sampling`) reads them; exports carry them (~25 KB a
# split).
TRANSLATIONS_DIR = "translations"


def machine(tags: Mapping[str, str]) -> str | None:
    """The machine a run ran on, as its tags name it: its CPU, and its GPU where it had one ('AMD EPYC
    (family 25, model 17, stepping 1; bf16) + NVIDIA H200'); None for a run from before these tags."""
    cpu, gpu = tags.get(CPU), tags.get(GPU)
    if cpu is None:
        return gpu
    return f"{cpu} + {gpu}" if gpu else cpu


def translations_artifact(split: str) -> str:
    """'val' -> 'translations/val.jsonl.gz'."""
    return f"{TRANSLATIONS_DIR}/{split}.jsonl.gz"


LOSS_CURVE_ARTIFACT = "loss_curve.png"
SUMMARY_ARTIFACT = "summary.json"
# A study's parent: what the study states about itself for its report, one versioned JSON object
# (ablate/study/recorded_study.py StudyRecord; a study recorded before it has only the per-field tags above)
STUDY_RECORD_ARTIFACT = "study_record.json"
CELLS_ARTIFACT = "cells.txt"  # a study's parent: its cells (variant x seed) and their spec hashes
PLAN_ARTIFACT = "plan.txt"  # a study's parent: the power plan printed when its design was recorded
CELLS_TABLE_ARTIFACT = "cells.json"  # a study's parent: the cells table MLflow's artifact view shows
ARMS_ARTIFACT = "arms.json"  # a study's parent with tune: or confirm:: {arm: {cell key: variant}}
STATUS_ARTIFACT = "status.txt"  # a finished study's parent: the grid of outcomes
TRIALS_TABLE_ARTIFACT = "trials.json"  # a search's parent: the trials table (state, values, params)
BEST_SPEC_ARTIFACT = "best.yaml"  # a search's parent: the best trial as a runnable spec
IMPORTANCE_ARTIFACT = "importance.json"
PARETO_ARTIFACT = "pareto.json"
REPORT_DIR = "report"


def first_artifact(available: Sequence[str], *names: str) -> str | None:
    """The first of ``names`` (the current name first, then older ones) that ``available`` holds."""
    have = set(available)
    return next((n for n in names if n in have), None)
