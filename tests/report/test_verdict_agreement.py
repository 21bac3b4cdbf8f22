"""Every committed report states one verdict per comparison, whichever section a reader opens.

A verdict is decided once (``ablate.stats.verdict``) and rendered by several sections: the Adaptive seeds
table, the summary's lines, the forest plot's validation answers, both arms of a tuned study, the
published results the study checks, the Effects table of a fixed seed list, and the verdicts checked at a
larger scale. This walks each committed ``report.json`` (and the summary of its ``report.md``) and checks
that every section that speaks of a comparison says what the others say of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ablate.stats.verdict import ALPHA, EQUIVALENCE_PAIRS

REPORTS = Path(__file__).resolve().parents[2] / "reports"
WITH_VERDICTS = sorted(p.parent.name for p in REPORTS.glob("*/report.json")
                       if "variants" in json.loads(p.read_text()))


def _report(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((REPORTS / name / "report.json").read_text())
    return data


def sequential_answers(data: dict[str, Any]) -> dict[str, str]:
    """{variant: better | worse | no effect | identical | open} as the Adaptive seeds section words it."""
    out = {}
    for c in data["sequential"]["comparisons"]:
        text = c["verdict"]
        if text.startswith("effect: "):
            out[c["variant"]] = text.removeprefix("effect: ").split(" than")[0]
        elif text.startswith("no effect"):
            out[c["variant"]] = "no effect"
        elif text.startswith("identical"):
            out[c["variant"]] = "identical"
        else:
            out[c["variant"]] = "open"
    return out


def published_outcome(expected: str, answer: str, beyond_margin: bool = False,
                      within_margin: bool = False) -> set[str]:
    """The outcomes a published claim may have when its comparison's verdict is ``answer`` (a variant that
    failed to train is judged by that instead: the caller leaves those out); ``beyond_margin``: a ``none``
    claim's interval lies wholly beyond its margin (an effect whose interval still reaches inside the margin
    answers a question the claim did not ask: not settled); ``within_margin``: it lies wholly inside it, so
    the claim holds even where the interval also excludes 0 (an effect too small to matter: gqa-docs'
    kv_heads=2)."""
    if expected == "identical":
        return {"reproduced"} if answer == "identical" else {"contradicted", "not settled"}
    if expected == "none":
        if answer in ("no effect", "identical") or within_margin:
            return {"reproduced"}
        return {"contradicted"} if beyond_margin else {"not settled"}
    if answer == expected:
        return {"reproduced"}
    if answer in ("better", "worse", "identical", "no effect"):
        return {"contradicted"}
    return {"not settled"}


def margin_outcome(answer: str, expected: str, lo: float | None, hi: float | None, margin: float) -> set[str]:
    """The outcomes a claim of ``expected`` by more than ``margin`` may have: reproduced only when the
    direction is settled the claimed way and the whole interval lies beyond the margin; contradicted when
    the direction is settled the other way or the interval lies wholly within the margin; otherwise the far
    bound on the claimed side decides, which the interval alone (without the metric's sign) cannot place,
    so either open or contradicted."""
    if lo is None or hi is None:
        return {"not settled"}
    near, far = sorted((abs(lo), abs(hi)))
    if answer == expected:
        return {"reproduced"} if near > margin else {"contradicted"} if far < margin else {"not settled"}
    if answer in ("better", "worse", "identical") or far < margin:
        return {"contradicted"}
    return {"contradicted", "not settled"}


def summary_bullets(name: str) -> list[str]:
    """The summary's bullet lines of ``report.md``."""
    lines = (REPORTS / name / "report.md").read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("**Summary**")), None)
    if start is None:
        return []
    bullets = []
    for line in lines[start + 1:]:
        if line.startswith("- "):
            bullets.append(line[2:])
        elif bullets and not line.strip():
            break
    return bullets


def test_the_committed_reports_are_found() -> None:
    assert len(WITH_VERDICTS) >= 5
    assert any("sequential" in _report(n) for n in WITH_VERDICTS)
    assert any("sequential" not in _report(n) for n in WITH_VERDICTS)


@pytest.mark.parametrize("name", WITH_VERDICTS)
def test_every_section_states_the_same_verdict_for_the_same_comparison(name: str) -> None:
    data = _report(name)
    failed_to_train = {v for v, in _diverged(data)}
    if "sequential" in data:
        answers = sequential_answers(data)
        # the forest plot's validation answers
        assert {v["variant"]: v["val_answer"] for v in data["verdicts"]} == answers
        # the summary's lines carry the Adaptive seeds section's words
        texts = {c["variant"]: c["verdict"] for c in data["sequential"]["comparisons"]}
        bullets = summary_bullets(name)
        for variant, text in texts.items():
            assert any(b.startswith(f"{variant}: ") and text in b for b in bullets), (variant, text)
        # the arms: the comparison at the baseline's settings is the study's own
        for row in data.get("own_best") or []:
            assert row["baseline_settings"]["answer"] == answers[row["variant"]]
    else:
        answers = fixed_answers(data)
    for claim in data.get("published") or []:
        if claim["variant"] not in answers or claim["variant"] in failed_to_train:
            continue
        if claim["expected"] in ("better", "worse") and claim["margin"] is not None:
            allowed = margin_outcome(answers[claim["variant"]], claim["expected"], claim["lo"], claim["hi"],
                                     claim["margin"])
        else:
            margin = claim["margin"] if claim["margin"] is not None else (data.get("sequential") or {}).get(
                "min_effect")
            beyond = margin is not None and claim["lo"] is not None and (
                claim["lo"] > margin or claim["hi"] < -margin)
            within = margin is not None and claim["lo"] is not None and (
                -margin <= claim["lo"] and claim["hi"] <= margin
                and (claim.get("n") or 0) >= EQUIVALENCE_PAIRS)
            allowed = published_outcome(claim["expected"], answers[claim["variant"]], beyond, within)
        assert claim["outcome"] in allowed, claim
    # a verdict checked at a larger scale is one the deciding arm decided, in the same direction
    deciding = {r["variant"]: (r["own_best"] or r["baseline_settings"])["answer"]
                for r in data.get("own_best") or []} or answers
    for checked in (data.get("scale") or {}).get("verdicts", []):
        word = {"better": "better", "worse": "worse", "none": "no effect"}[checked["small"]]
        assert deciding[checked["variant"]] == word


def fixed_answers(data: dict[str, Any]) -> dict[str, str]:
    """A fixed seed list's verdicts on the primary metric, as the Effects table states them; a published
    claim is judged by the Holm-adjusted p of the same row (the family's level), so where the two differ
    the answer is the Holm one and the Effects line must not call it significant."""
    out = {}
    for row in data["effects"]:
        if row["metric"] != data["primary_metric"]:
            continue
        text = row["verdict"]
        holm = row["p_holm"] is not None and row["p_holm"] < ALPHA
        if "identical to the baseline" in text:
            out[row["variant"]] = "identical"
        elif holm:
            assert "significant at 5%" in text, text
            out[row["variant"]] = "better" if text.endswith("better than the baseline") else "worse"
        else:
            out[row["variant"]] = "open"
    return out


def _diverged(data: dict[str, Any]) -> list[tuple[str]]:
    """Variants that diverged in at least half their runs while the baseline never did (the published
    check judges those as failed to train, whatever the interval)."""
    return [(c["variant"],) for c in data.get("published") or [] if "failed to train" in c["why"]
            or "diverged where the baseline did not" in c["why"]]
