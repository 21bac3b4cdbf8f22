"""The recipe of docs/architecture.md's "Adding a metric", checked: what an evaluation returns is exactly
what ``spec/metricnames.py`` declares (so a spec may name it and a typo gets a suggestion), and the
report's unit, decimals and direction of a quality metric agree with the declaration."""

from __future__ import annotations

from pathlib import Path

import torch

from ablate.data.prepare import prepare_data
from ablate.engine.dispatch import build_any
from ablate.engine.evaluate import evaluate
from ablate.report.compute.loaded_study import QUALITY, quality_meta
from ablate.spec import metricnames as names
from ablate.spec.load import load_spec
from tests.factories import write_tiny_spec


def test_an_evaluation_returns_exactly_the_declared_names(tmp_path: Path) -> None:
    spec = load_spec(write_tiny_spec(tmp_path))
    data = prepare_data(spec)
    tok = data.tokenizers
    model = build_any(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=0)
    for split in ("val", "test"):
        for decode in (True, False):
            got = evaluate(model, data, split, spec, torch.device("cpu"), "fp32", decode=decode, limit=4)
            assert sorted(got) == sorted(names.evaluation_metrics(data.is_text, decode=decode, split=split))
            assert set(got) <= set(names.all_metrics())
    assert set(names.evaluation_metrics(data.is_text)) <= set(spec.evaluation_metrics())


def test_the_report_reads_a_metric_the_way_its_declaration_says() -> None:
    declared = {m.rpartition("/")[2] for m in names.all_metrics() if m.startswith("val/")}
    assert set(QUALITY) <= declared  # the report knows no metric a run cannot produce
    for suffix, (_, _, higher) in QUALITY.items():
        assert higher == names.higher_is_better(f"val/{suffix}"), suffix
        assert quality_meta(f"test/{suffix}")[2] == higher
