"""The tiny studies the report tests read, and the committed exports of the two that are not retrained.

`ablate report` is tested on real studies: an ablation (baseline, post-norm and a variant that diverges,
three seeds) and a 2 x 2 full factorial (two seeds) were trained once by `ablate study` and exported with
`ablate export` into ``tests/fixtures/report-studies/``; the report tests import them into a fresh MLflow
store and Optuna storage (`ablate import`, the path a study spread over machines takes) instead of training
their 17 runs at every test session. The one-seed study with explicit attention (whose heat maps need its
checkpoint) and the search are trained by the tests themselves, end to end.

Regenerate the exports after a change to what a run records (about a minute)::

    python -m tests.report_studies
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

EXPORTS = Path(__file__).resolve().parent / "fixtures" / "report-studies"

COMMON = """
data:
  source: synthetic
  synthetic: {task: copy, vocab_size: 8, min_len: 1, max_len: 3, train_size: 200, val_size: 16, test_size: 16}
  max_len: 5
  batch_tokens: 256
model: {d_model: 16, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 32, dropout: 0.0, ATTN}
train:
  max_steps: 30
  eval_every: 10
  checkpoint_every: 10
  threads: 1
  optimizer: {lr: 0.01}
  schedule: {name: constant, warmup_steps: 0}
eval: {samples: 2}
"""
ABLATION = "name: rep-abl\nseed: 0\n" + COMMON.replace(", ATTN", "") + """
ablation:
  design: variants
  variants:
    - {model: {residual: post_norm}}
    - {label: lr=50, train: {optimizer: {lr: 50}}}
  seeds: [0, 1, 2]
"""
ONE_SEED = "name: rep-one\nseed: 0\n" + COMMON.replace("ATTN", "attention: explicit") + """
ablation:
  axes: {model.residual: [pre_norm, post_norm]}
  seeds: [0]
"""
SHORT = COMMON.replace(", ATTN", "").replace("max_steps: 30", "max_steps: 20")
FACTORIAL = "name: rep-fac\nseed: 0\n" + SHORT.replace("max_steps: 20", "max_steps: 10") + """
ablation:
  design: full_factorial
  axes:
    model.residual: [pre_norm, post_norm]
    train.schedule.warmup_steps: [0, 5]
  seeds: [0, 1]
"""
SEARCH = "name: rep-search\nseed: 0\n" + SHORT + """
search:
  trials: 3
  sampler: random
  pruner: {name: none}
  space:
    train.optimizer.lr: {low: 0.001, high: 0.05, log: true}
    model.residual: {choice: [pre_norm, post_norm]}
"""
EXPORTED = {"rep-abl": ABLATION, "rep-fac": FACTORIAL}  # study name -> its spec


def regenerate() -> int:
    """Train the exported studies in a scratch folder and replace their exports (one thread, as the tests
    trained them; the records are deterministic apart from timestamps and wall times)."""
    import torch

    from ablate.launch.local_study import main_ablate
    from ablate.study.export_study import main_export

    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="ablate-report-studies-"))
    os.chdir(root)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{root / 'mlflow.db'}"
    for name, text in EXPORTED.items():
        (root / f"{name}.yaml").write_text(text)
        if main_ablate(f"{name}.yaml") != 0:
            return 1
        shutil.rmtree(EXPORTS / name, ignore_errors=True)
        if main_export(name, str(EXPORTS / name)) != 0:
            return 1
    shutil.rmtree(root, ignore_errors=True)
    print(f"exports written to {EXPORTS}")
    return 0


if __name__ == "__main__":
    sys.exit(regenerate())
