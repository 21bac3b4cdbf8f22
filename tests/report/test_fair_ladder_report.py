"""A fair ladder's section (ablate/report/sections/fair_ladder.py): the fields each rung changes over the one
before (reports/ladder-kdocs's largest rung changed depth where the others changed width), and with per-rung
tuning each variant's best rate per rung, an edge flagged, and the rate's power law."""

from __future__ import annotations

import json
from pathlib import Path

from ablate.report.compute.loaded_study import build_study
from ablate.report.compute.tuned_ladder import fair_ladder
from ablate.report.render import Document, render_markdown
from ablate.report.section_api import Inputs
from ablate.report.sections import fair_ladder as section
from ablate.tracking import record
from tests.report.test_ladder_report import ladder_frame

OVERRIDES = {"xs": {"model.d_model": 32, "model.d_ff": 128, "train.max_steps": 100},
             "s": {"model.d_model": 48, "model.d_ff": 192, "train.max_steps": 200},
             "m": {"model.d_model": 64, "model.d_ff": 256, "train.max_steps": 300},
             "l": {"model.d_model": 64, "model.d_ff": 256, "model.decoder_layers": 4, "train.max_steps": 600}}


def _parent(tuned: bool) -> tuple[dict[str, object], object]:
    parent, frame = ladder_frame(seeds=2)
    tags = parent["tags"]
    assert isinstance(tags, dict)
    scales = json.loads(tags[record.SCALES])
    for r in scales["rungs"]:
        r["overrides"] = OVERRIDES[r["name"]]
    scales.update(tokens_per_param=20, tokens_counted="all")
    tags[record.SCALES] = json.dumps(scales)
    if tuned:
        rows = [{"variant": v, "rung": r, "params": 1000 * (k + 1), "edge": ["train.optimizer.lr"]
                 if (v, r) == ("wide", "l") else [], "best": {"train.optimizer.lr": lr}, "scores": []}
                for k, (r, lr) in enumerate([("xs", 0.016), ("s", 0.008), ("m", 0.008), ("l", 0.004)])
                for v in ("baseline", "wide", "same")]
        tags[record.LADDER_TUNE] = json.dumps({
            "grid": {"train.optimizer.lr": [0.004, 0.008, 0.016]}, "seeds": [900], "rungs": rows,
            "rate_laws": {"baseline": {"exponent": -0.45, "low": -0.8, "high": -0.1, "level": 0.95,
                                       "rungs": 4, "coefficient": 0.3}, "wide": None}})
    return parent, frame


def test_the_section_says_which_fields_each_rung_changes(tmp_path: Path) -> None:
    parent, frame = _parent(tuned=False)
    fair = fair_ladder(parent)
    assert fair is not None and not fair.tuned
    assert [(a, b, [k for k, _, _ in d]) for a, b, d in fair.changes] == [
        ("xs", "s", ["model.d_ff", "model.d_model"]), ("s", "m", ["model.d_ff", "model.d_model"]),
        ("m", "l", ["model.decoder_layers"])]  # the confound: the last rung changes depth, not width
    made = section.part(Inputs(build_study(parent, frame), tmp_path))  # type: ignore[arg-type]
    assert made is not None
    text = render_markdown(Document("t", "s", sections=made.sections))
    assert "declares no scaling rule" in text and "counting every parameter" in text
    assert "| m → l | `model.decoder_layers` spec → 4 |" in text
    assert made.data["fair_ladder"]["changes"][2]["fields"] == ["model.decoder_layers"]


def test_a_tuned_ladder_shows_each_best_per_rung_and_flags_an_edge(tmp_path: Path) -> None:
    parent, frame = _parent(tuned=True)
    made = section.part(Inputs(build_study(parent, frame), tmp_path))  # type: ignore[arg-type]
    assert made is not None
    text = render_markdown(Document("t", "s", sections=made.sections))
    assert "| l | 4,000 | 0.004 | 0.004 (edge) | 0.004 |" in text
    assert "**At a grid edge**" in text and "wide at l" in text
    assert "scales as N^-0.45 [-0.80, -0.10] at 95%" in text
    assert [b["edge"] for b in made.data["fair_ladder"]["bests"] if b["rung"] == "l"] == [
        [], ["train.optimizer.lr"], []]


def test_a_study_without_a_ladder_has_no_such_section() -> None:
    assert fair_ladder({"tags": {}}) is None


def test_the_section_says_which_rule_set_each_rungs_rate(tmp_path: Path) -> None:
    """scales.tune.larger_rungs: a grid from the rungs below (and from what), or the smallest rung's rate
    under muP with the transfer check that allowed it (ablate/study/rung_rates.py, mup_check.py)."""
    parent, frame = _parent(tuned=True)
    tags = parent["tags"]
    assert isinstance(tags, dict)
    tuned = json.loads(tags[record.LADDER_TUNE])
    for row in tuned["rungs"]:
        if row["rung"] == "s":
            row.update(rule="grid_from_below",
                       source="3 rates a factor 2 apart around 0.016: the best rate at xs")
        elif row["rung"] in ("m", "l"):
            row.update(rule="mup", source="the rate tuned at xs")
    tuned["mup_check"] = {"study": "reports/mup-check", "widths": [32, 128], "shift": 0.2, "low": -0.4,
                          "high": 0.8, "verdict": "stable"}
    tags[record.LADDER_TUNE] = json.dumps(tuned)
    fair = fair_ladder(parent)
    assert fair is not None and {b.rung for b in fair.derived} == {"s", "m", "l"}
    made = section.part(Inputs(build_study(parent, frame), tmp_path))  # type: ignore[arg-type]
    assert made is not None
    text = render_markdown(Document("t", "s", sections=made.sections))
    assert "0.008 (grid from below)" in text and "(muP, the smallest rung's rate)" in text
    assert "baseline at s: 3 rates a factor 2 apart around 0.016: the best rate at xs" in text
    assert ("**muP** (Yang et al. 2022): rungs m, l were not tuned" in text
            and "reports/mup-check: muP's best rate shifts +0.20 log2 [-0.40, +0.80] from d32 to d128: stable"
            in text)
    rules = {(b["variant"], b["rung"]): b.get("rule") for b in made.data["fair_ladder"]["bests"]}
    assert rules[("baseline", "xs")] is None and rules[("same", "l")] == "mup"
