"""A variant's implementation version: fixing a plugin variant retrains its own cells and nothing else.

A plugin package registers a position scheme at version 1 and a study compares it with sinusoidal
positions. The package is then upgraded: the same name at version 2 (a fix that changes what it computes).
The next ``ablate study`` of the same spec trains the plugin's cell again under its new identity, leaves the
baseline's cell alone (same hash, no new run), tags the old cell ``ablate.superseded`` in MLflow (kept, not
deleted), and the report leaves the old cell out with a note.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.registry.test_plugin_positions import ROOT, _install, _run

PLUGIN = '''
"""A third-party additive position table: a plugin whose version is {version}."""
import torch

from registry import register
from registry.positions import _Positions, sinusoid_table


@register("positions", "demo_table", version={version})
class DemoTable(_Positions):
    """Sinusoids times {scale}: version 2 fixes version 1's scale."""

    def __init__(self, d_model, heads=1, max_positions=512, dropout=0.0, *, causal=False):
        super().__init__(d_model, heads, max_positions, dropout, causal=causal)
        self.register_buffer("table", {scale} * sinusoid_table(max_positions, d_model), persistent=False)

    def embed(self, x, start_pos=0):
        return self.dropout(x + self.table[start_pos:start_pos + x.size(1)])
'''

STUDY = """
extends: {quickstart}
name: version-study
data:
  synthetic: {{task: reverse, vocab_size: 12, min_len: 3, max_len: 6, train_size: 200, val_size: 20,
              test_size: 20}}
  max_len: 10
model: {{d_model: 16, heads: 2, d_ff: 32, encoder_layers: 1, decoder_layers: 1}}
train: {{max_steps: 6, eval_every: 6, checkpoint_every: 6, threads: 1}}
eval: {{samples: 0}}
tracking: {{experiment: version-study, uri: sqlite:///mlflow.db}}
ablation:
  design: one_at_a_time
  axes:
    model.positions: [sinusoidal, demo_table]
  seeds: [0]
  metric: val/exact_match
"""

RECORD = """
import json
from mlflow import MlflowClient
client = MlflowClient("sqlite:///mlflow.db")
exp = client.get_experiment_by_name("version-study")
runs = client.search_runs([exp.experiment_id])
print(json.dumps([{"id": r.info.run_id, "variant": r.data.tags.get("ablate.variant", ""),
                   "hash": r.data.tags.get("ablate.spec_hash", ""),
                   "versions": r.data.tags.get("ablate.component_versions", ""),
                   "superseded": r.data.tags.get("ablate.superseded", "")}
                  for r in runs if "ablate.spec_hash" in r.data.tags]))
"""


def _cells(work: Path, site: Path) -> list[dict[str, str]]:
    record = _run(work, site, "-c", RECORD)
    assert record.returncode == 0, record.stderr
    return list(json.loads(record.stdout))


@pytest.mark.soak
@pytest.mark.slow
def test_a_new_plugin_version_retrains_only_its_own_cells(tmp_path: Path) -> None:
    site, work = tmp_path / "site", tmp_path / "work"
    site.mkdir()
    work.mkdir()
    _install(site, "ablate_demo_table", PLUGIN.format(version=1, scale=0.5))
    (work / "study.yaml").write_text(STUDY.format(quickstart=ROOT / "experiments" / "quickstart.yaml"))
    first = _run(work, site, "-m", "ablate", "ablate", "study.yaml")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    before = {c["variant"]: c for c in _cells(work, site)}
    assert set(before) == {"baseline", "positions=demo_table"}
    assert before["positions=demo_table"]["versions"] == ""  # version 1 is not recorded

    (site / "ablate_demo_table.py").write_text(PLUGIN.format(version=2, scale=1.0))  # the upgrade
    second = _run(work, site, "-m", "ablate", "ablate", "study.yaml")
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    assert "1 cells ran an older implementation" in second.stdout
    assert "positions=demo_table seed 0: positions=demo_table v1, now v2" in second.stdout
    after = _cells(work, site)
    assert len(after) == 3  # one new run: the plugin's cell; the baseline was not trained again
    baseline = [c for c in after if c["variant"] == "baseline"]
    assert baseline == [before["baseline"]]  # same run, same hash, not superseded
    old, new = sorted((c for c in after if c["variant"] == "positions=demo_table"),
                      key=lambda c: c["id"] != before["positions=demo_table"]["id"])
    assert old["id"] == before["positions=demo_table"]["id"]
    assert old["superseded"] == "positions=demo_table v1, now v2"
    assert new["superseded"] == "" and json.loads(new["versions"]) == {"positions": 2}
    assert new["hash"] != old["hash"]
    third = _run(work, site, "-m", "ablate", "ablate", "study.yaml")  # nothing to train, nothing new to tag
    assert third.returncode == 0, third.stdout[-2000:] + third.stderr[-3000:]
    assert "1 cells of an older implementation stay superseded" in third.stdout
    assert "ran an older implementation" not in third.stdout and len(_cells(work, site)) == 3

    report = _run(work, site, "-m", "ablate", "report", "version-study", "--out", "report")
    assert report.returncode == 0, report.stderr[-3000:]
    text = (work / "report" / "report.md").read_text()
    assert "1 run(s) of a variant whose implementation changed since they ran are left out" in text
    assert "positions=demo_table seed 0" in text
