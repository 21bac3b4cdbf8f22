"""A third-party rotary position scheme, installed as a package with an entry point, used by a study.

Nothing in the repository is edited: the package's module registers a ``positions`` variant whose only
hook is ``attention()`` returning a rotation of queries and keys (the rotary site), with an option of its
own; the spec validates it (the option is accepted with it and refused without it), and ``ablate study``
trains a two-cell study comparing it with sinusoidal positions, recorded in MLflow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from registry import ENTRY_POINT_GROUP

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = '''
"""A third-party rotary position scheme: half-split rotation (GPT-NeoX style), its own base option."""
import torch

from registry import Option, register
from registry.positions import PositionHooks, _Positions


@register("positions", "demo_rotary", options=(Option("demo_base", float, 500.0, "rotary base", gt=1.0),))
class DemoRotary(_Positions):
    """Half-split rotary positions from a plugin package (tests/registry/test_plugin_positions.py)."""

    def __init__(self, d_model, heads=1, max_positions=512, dropout=0.0, *, causal=False, demo_base=500.0):
        super().__init__(d_model, heads, max_positions, dropout, causal=causal)
        half = d_model // heads // 2
        inv = demo_base ** (-torch.arange(half, dtype=torch.float32) / half)
        self.register_buffer("angles", torch.arange(max_positions)[:, None] * inv, persistent=False)

    def attention(self, q_start, q_len, k_len, device):
        cos = self.angles[q_start:q_start + q_len].cos()
        sin = self.angles[q_start:q_start + q_len].sin()

        def rotate(x):
            a, b = x.float().chunk(2, dim=-1)
            return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1).to(x.dtype)

        return PositionHooks(rotate=rotate)
'''

STUDY = """
extends: {quickstart}
name: plugin-study
data:
  synthetic: {{task: reverse, vocab_size: 12, min_len: 3, max_len: 6, train_size: 400, val_size: 40,
              test_size: 40}}
  max_len: 10
model: {{d_model: 16, heads: 2, d_ff: 32, encoder_layers: 1, decoder_layers: 1}}
train: {{max_steps: 12, eval_every: 6, checkpoint_every: 6, threads: 1}}
eval: {{samples: 0}}
tracking: {{experiment: plugin-study, uri: sqlite:///mlflow.db}}
ablation:
  design: one_at_a_time
  axes:
    model.positions: [sinusoidal, demo_rotary]
  seeds: [0]
  metric: val/exact_match
"""

RECORD = """
import json
from mlflow import MlflowClient
client = MlflowClient("sqlite:///mlflow.db")
exp = client.get_experiment_by_name("plugin-study")
runs = client.search_runs([exp.experiment_id])
print(json.dumps(sorted((r.data.tags.get("ablate.variant", ""), r.data.params.get("model.positions", ""),
                         r.data.params.get("model.demo_base", ""), r.info.status) for r in runs)))
"""


def _install(site: Path, name: str, module_text: str) -> None:
    """What `pip install` leaves for a package whose module registers components: module + dist-info."""
    (site / f"{name}.py").write_text(textwrap.dedent(module_text))
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ndemo = {name}\n")


def _run(cwd: Path, site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.soak
@pytest.mark.slow
def test_a_plugin_rotary_scheme_is_validated_and_ablated_without_editing_the_repo(tmp_path: Path) -> None:
    site, work = tmp_path / "site", tmp_path / "work"
    site.mkdir()
    work.mkdir()
    _install(site, "ablate_demo_rotary", PLUGIN)
    (work / "study.yaml").write_text(STUDY.format(quickstart=ROOT / "experiments" / "quickstart.yaml"))
    listed = _run(work, site, "-m", "ablate", "list", "positions")
    assert listed.returncode == 0, listed.stderr
    assert "demo_rotary" in listed.stdout and "[demo_base=500.0]" in listed.stdout
    # its option belongs to it: refused under another scheme, with the file's line
    (work / "bad.yaml").write_text(f"extends: {ROOT / 'experiments' / 'quickstart.yaml'}\nname: b\n"
                                   "model:\n  demo_base: 900.0\n")
    bad = _run(work, site, "-m", "ablate", "validate", "bad.yaml")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "bad.yaml:4: model.demo_base: demo_base applies to positions: demo_rotary only" in bad.stderr

    study = _run(work, site, "-m", "ablate", "ablate", "study.yaml")
    assert study.returncode == 0, study.stdout[-2000:] + study.stderr[-3000:]
    record = _run(work, site, "-c", RECORD)
    assert record.returncode == 0, record.stderr
    cells = [row for row in json.loads(record.stdout) if row[1]]
    positions = sorted((variant, pos, base, status) for variant, pos, base, status in cells)
    assert ("positions=demo_rotary", "demo_rotary", "500.0", "FINISHED") in positions
    assert any(row[1] == "sinusoidal" and row[2] == "" and row[3] == "FINISHED" for row in positions)
