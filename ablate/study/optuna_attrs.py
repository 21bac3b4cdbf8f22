"""Every Optuna attribute name ablate writes or reads, declared once (the Optuna side of what
``ablate.tracking.record`` is for MLflow). Stores written by earlier versions keep these names: change
one only with a fallback that reads the old.

Study user attributes identify a study and link it to MLflow; trial user attributes let any worker
rebuild and resume a cell or trial; system attributes are the liveness records of the journal store.
"""

from __future__ import annotations

# ---------------------------------------------------------------- study user attributes
KEY = "ablate.study_key"  # the study's identity hash
SPEC_NAME = "ablate.spec_name"  # the spec's name
OVERRIDES = "ablate.overrides"  # JSON list of the --set overrides the study was started with
KIND = "ablate.kind"  # ablation | search
PARENT = "ablate.parent_run_id"  # the study's parent MLflow run
STOP = "ablate.stopped"  # why the study stopped (fail-fast); cleared by the next command
PREREGISTERED = "ablate.preregistered"  # JSON: the design recorded before the first cell (never moves)
PLAN = "ablate.plan"  # the power plan printed when the design was recorded (text)

# ---------------------------------------------------------------- trial user attributes
CELL = "ablate.cell"  # a cell's <spec hash>-s<seed>
CELL_LABEL = "label"  # a cell's variant label: 'baseline', 'residual=post_norm'
CELL_SEED = "seed"
CELL_SPEC_HASH = "spec_hash"
CELL_OVERRIDES = "overrides"  # JSON: the fields the cell changes from the baseline
CELL_ARM = "arm"  # the arm that queued the cell (absent: the baseline's settings); a confirm cell's
#                   overrides apply to the larger setting (ablation.confirm), not to the study's spec
CELL_RUNG = "rung"  # a ladder's cell: its rung (ablation.scales; absent: the study has no ladder)
# a cell's attrs by the names above (the seed an int, the rest text): a queued trial's user attrs
CellAttrs = dict[str, str | int]
RUN_ID = "mlflow_run_id"  # the cell's or trial's MLflow run, set as soon as the run opens
STATUS = "status"  # the run's ablate status (finished | diverged | failed | pruned | killed)
ERROR = "error"  # the last lines of a failed run's error
STEP = "ablate.step"  # the step of a finished cell's last evaluation (a cell resumed at its last step
#                       reports none of its own)
OWNER = "ablate.owner"  # the process running the trial
RUN_DIR = "ablate.run_dir"  # a search trial's run folder: a retry resumes its checkpoint and MLflow run
BASELINE = "ablate.baseline"  # a search trial enqueued at the spec's own values
FINAL_LOSS = "ablate.final_val_loss"  # a search trial's final val/loss, whatever its objective (a tuned
#                                       steps-to-target study's own-best target: ablate/study/tuned_target.py)

# ---------------------------------------------------------------- trial system attributes
HEARTBEAT = "ablate.heartbeat"  # journal stores: time.time() of the owner's last beat
RETRY_HISTORY = "retry_history"  # Optuna's own: the trials a retried trial was re-queued from
FIXED_PARAMS = "fixed_params"  # Optuna's own: the params an enqueued trial was given
