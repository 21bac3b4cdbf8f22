"""scripts/document_mask_speed.py (the CPU figure of document-masked attention): the blocks it packs hold
documents of the mean asked, cut by the blocks' edges; each form runs the attention it names (the mask's
sdpa, the per-document kernel), at tiny settings."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.scripts.script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return load_script("document_mask_speed")


def test_packed_blocks_hold_documents_of_the_mean_asked_cut_at_the_edges(script: ModuleType) -> None:
    segments = script.packed_segments(512, 1024, 2500.0, seed=0)  # about 210 documents
    assert segments.shape == (512, 1024)
    flat = segments.flatten()
    assert bool((flat[1:] >= flat[:-1]).all())  # one stream of documents, in order
    lengths = torch.bincount(flat)[:-1].float()  # the last document is cut by the end
    assert 2000 < float(lengths.mean()) < 3000
    several = sum(len(set(row.tolist())) > 1 for row in segments)
    assert 0.2 < several / 512 < 0.8  # some blocks one document, some several


@pytest.mark.parametrize("form,kernel", [("mask", "sdpa-"), ("fused", "varlen-")])
def test_each_form_runs_the_attention_it_names(script: ModuleType, form: str, kernel: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from ablate.engine import decoder_only

    # documents of 100 tokens cut by 128-token blocks average under the CPU's rule: the rule at 1 here
    monkeypatch.setattr(decoder_only, "VARLEN_MIN_LENGTH", 1)
    args = script.main.__globals__["argparse"].Namespace(
        spec=str(ROOT / "experiments" / "lm-gpt2-small-ksrc.yaml"), form=form, steps=1, rounds=1,
        precision="fp32", mean_doc=100.0, threads=1, vocab=64, rows=2, block=128, layers=1, d_model=32,
        heads=2)
    result = script.one_form(args)
    assert result["kernels"].startswith(kernel) and result["tokens_per_s"] > 0
    assert result["rows"] == 2 and result["block"] == 128 and result["multi_document_rows"] == 2
