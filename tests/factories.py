"""The one tiny spec the training, study and search tests start from, and the changes each of them makes.

A synthetic reverse task small enough to train in a second or two on one core. Tests state what they
change as dotted keys (``{"train.max_steps": 60}``), so a reader sees what a test depends on.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 3,
    "data": {
        "source": "synthetic",
        "synthetic": {"task": "reverse", "vocab_size": 12, "min_len": 2, "max_len": 6, "train_size": 400,
                      "val_size": 24, "test_size": 24},
        "max_len": 10,
        "batch_tokens": 256,
    },
    "model": {"d_model": 32, "heads": 2, "encoder_layers": 1, "decoder_layers": 1, "d_ff": 64,
              "dropout": 0.1},
    "train": {
        "max_steps": 40,
        "eval_every": 20,
        "checkpoint_every": 5,
        "schedule": {"name": "inverse_sqrt", "warmup_steps": 10},
        "optimizer": {"lr": 0.003},
        "threads": 1,
    },
    "eval": {"samples": 2, "decode": {"strategy": "greedy"}},
    "tracking": {"enabled": False},
}

# The head of a 4-step study spec on the reverse task, as YAML (a str.format template: `{name}`, doubled
# braces), which a study test ends with its own `ablation:` section.
TINY_STUDY_HEAD = """\
name: {name}
seed: 0
data:
  source: synthetic
  synthetic: {{task: reverse, vocab_size: 12, min_len: 3, max_len: 6, train_size: 120, val_size: 8,
              test_size: 8}}
  max_len: 8
  batch_tokens: 256
model: {{d_model: 16, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 32, dropout: 0.0}}
train:
  max_steps: 4
  eval_every: 2
  checkpoint_every: 4
  schedule: {{name: inverse_sqrt, warmup_steps: 2}}
eval: {{metric: exact_match, samples: 0}}
tracking: {{log_checkpoint: false}}
"""

# A study cell or search trial: smaller still (d_model 16), 20-30 steps, tracked in MLflow.
STUDY_CELL: dict[str, Any] = {
    "seed": 0,
    "data.synthetic": {"task": "reverse", "vocab_size": 12, "min_len": 3, "max_len": 6, "train_size": 200,
                       "val_size": 16, "test_size": 16},
    "data.max_len": 8,
    "model": {"d_model": 16, "heads": 2, "encoder_layers": 1, "decoder_layers": 1, "d_ff": 32,
              "dropout": 0.0},
    "train": {"max_steps": 20, "eval_every": 10, "checkpoint_every": 5, "divergence_factor": 1.5,
              "schedule": {"name": "inverse_sqrt", "warmup_steps": 10}},
    "eval": {"metric": "exact_match", "samples": 0},
    "tracking": {"log_checkpoint": False},
}


def tiny_spec(*changes: dict[str, Any]) -> dict[str, Any]:
    """TINY with each mapping of ``dotted.key -> value`` applied in order (a value replaces the field)."""
    spec = copy.deepcopy(TINY)
    for change in changes:
        for dotted, value in change.items():
            *parents, leaf = dotted.split(".")
            node = spec
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = copy.deepcopy(value)
    return spec


def tiny_yaml(*changes: dict[str, Any], extra: str = "") -> str:
    """The spec as YAML text; ``extra`` (top-level YAML such as an ``ablation:`` block) is appended."""
    return yaml.safe_dump(tiny_spec(*changes), sort_keys=False) + extra


def write_tiny_spec(folder: Path, *changes: dict[str, Any], extra: str = "",
                    filename: str = "tiny.yaml") -> Path:
    path = folder / filename
    path.write_text(tiny_yaml(*changes, extra=extra))
    return path
