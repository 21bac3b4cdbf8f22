"""Evaluation that scales (ablate/engine/lm_eval.py, evaluate.py): the float32 log-softmax a chunk of rows at
a time gives the whole-logits cross-entropy, soft-capped logits take the whole path; ``eval.max_tokens`` caps
the batches scored (a stated default for language models, out of the spec's identity); the ranks of a DDP run
score disjoint shares that add up to the whole split."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ablate.data.lm_corpus import IGNORE, prepare_lm, window_batches
from ablate.data.prepare import TokenBatcher, prepare_data
from ablate.engine import lm_eval
from ablate.engine.builders import build_lm
from ablate.engine.dispatch import build_any
from ablate.engine.evaluate import teacher_forced_loss
from ablate.engine.lm_eval import window_nll
from ablate.spec.experiment import LM_EVAL_TOKENS, ExperimentSpec
from tests.factories import tiny_spec

pytestmark = pytest.mark.usefixtures("single_thread")
CPU = torch.device("cpu")
LM_MODEL = {"arch": "decoder_only", "d_model": 32, "heads": 2, "d_ff": 64, "decoder_layers": 2,
            "dropout": 0.0, "max_positions": 64}
LM_DATA = {"source": "synthetic", "synthetic": {"task": "copy_far", "vocab_size": 16, "min_len": 4,
                                                "max_len": 4, "train_size": 200, "val_size": 200,
                                                "test_size": 20},
           "document_lines": 20, "max_len": 32, "batch_tokens": 256}


def lm_spec(**model: object) -> ExperimentSpec:
    return ExperimentSpec.model_validate({"name": "lm", "data": LM_DATA, "tracking": {"enabled": False},
                                          "model": {**LM_MODEL, **model}})


def whole_logits_nll(model: torch.nn.Module, docs: object, length: int, max_batches: int | None = None
                     ) -> tuple[float, int]:
    """The reference: F.cross_entropy on the whole float32 logits of each batch, summed."""
    total, count = 0.0, 0
    for i, batch in enumerate(window_batches(docs, length, None, 256, 0)):  # type: ignore[arg-type]
        if max_batches is not None and i >= max_batches:
            break
        logits = model(batch.ids).float()  # (B, T, V)
        total += float(F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE,
                                       reduction="sum"))
        count += batch.n_tgt_tokens
    return total, count


def test_max_tokens_stays_out_of_the_identity_and_states_its_language_model_default() -> None:
    lm, mt = lm_spec(), ExperimentSpec.model_validate(tiny_spec())
    assert "max_tokens" not in lm.identity()["eval"] and "max_tokens" not in mt.identity()["eval"]
    assert lm.eval.token_cap(lm.is_lm) == LM_EVAL_TOKENS == 2**21
    assert mt.eval.token_cap(mt.is_lm) is None  # translation: the whole split
    capped = ExperimentSpec.model_validate({**lm.model_dump(), "eval": {"max_tokens": 5000}})
    assert capped.eval.token_cap(True) == 5000 and capped.spec_hash != lm.spec_hash


@pytest.mark.parametrize("logits", ["plain", "softcap"])
def test_the_chunked_float32_loss_equals_the_whole_logits_cross_entropy(logits: str) -> None:
    spec = lm_spec(logits=logits, logit_softcap=2.0) if logits == "softcap" else lm_spec()
    data = prepare_lm(spec)
    model = build_lm(spec.model, data.tokenizers.tgt_vocab_size, seed=0).eval()
    docs = data.documents["val"]
    assert lm_eval.scores_by_chunks(model) == (logits == "plain")
    with torch.no_grad():
        expected, n = whole_logits_nll(model, docs, 32)
    nll, count = window_nll(model, docs, 32, None, 256, CPU, "fp32")
    assert count == n == docs.n_targets
    assert nll == pytest.approx(expected, rel=1e-5)


def test_max_tokens_scores_whole_batches_in_order_up_to_the_cap() -> None:
    spec = lm_spec()
    data = prepare_lm(spec)
    model = build_lm(spec.model, data.tokenizers.tgt_vocab_size, seed=0).eval()
    docs = data.documents["val"]
    sizes = [b.n_tgt_tokens for b in window_batches(docs, 32, None, 256, 0)]
    assert len(sizes) > 4
    cap = sizes[0] + 1  # the second batch reaches it: two whole batches
    nll, count = window_nll(model, docs, 32, None, 256, CPU, "fp32", max_tokens=cap)
    with torch.no_grad():
        expected, n = whole_logits_nll(model, docs, 32, max_batches=2)
    assert count == n == sizes[0] + sizes[1]
    assert nll == pytest.approx(expected, rel=1e-5)
    assert window_nll(model, docs, 32, None, 256, CPU, "fp32", max_tokens=cap) == (nll, count)  # same tokens
    whole = window_nll(model, docs, 32, None, 256, CPU, "fp32", max_tokens=10**9)
    assert whole[1] == docs.n_targets


def test_ranks_score_disjoint_shares_that_add_up_to_the_whole_split(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = lm_spec()
    data = prepare_lm(spec)
    model = build_lm(spec.model, data.tokenizers.tgt_vocab_size, seed=0).eval()
    docs = data.documents["val"]
    shares: list[tuple[float, int]] = []

    def no_reduction(total: float, count: int, world_size: int, device: torch.device) -> tuple[float, int]:
        shares.append((total, count))  # what this rank adds to the all-reduce
        return total, count

    monkeypatch.setattr(lm_eval, "summed_over_ranks", no_reduction)
    whole_nll, whole_count = window_nll(model, docs, 32, None, 256, CPU, "fp32")
    for rank in (0, 1, 2):
        window_nll(model, docs, 32, None, 256, CPU, "fp32", rank=rank, world_size=3)
    ranks = shares[1:]
    assert all(count > 0 for _, count in ranks) and len({count for _, count in ranks}) > 0
    assert sum(count for _, count in ranks) == whole_count
    assert sum(total for total, _ in ranks) == pytest.approx(whole_nll, rel=1e-9)


def test_the_translation_loss_by_chunks_equals_the_whole_logits_cross_entropy() -> None:
    spec = ExperimentSpec.model_validate(tiny_spec({"model.dropout": 0.0}))
    data = prepare_data(spec)
    tok = data.tokenizers
    model = build_any(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=0).eval()
    batcher = TokenBatcher(data.splits["val"], spec.data.batch_tokens, spec.seed, shuffle=False,
                           specials=(tok.pad_id, tok.bos_id, tok.eos_id))
    total, tokens = 0.0, 0
    with torch.no_grad():
        for indices in batcher.epoch_batches(0):
            batch = batcher.collate(indices)
            logits = model(batch.src, batch.tgt_in).float()  # (B, T, V)
            total += float(F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(),
                                           ignore_index=tok.pad_id, reduction="sum"))
            tokens += batch.n_tgt_tokens
    loss = teacher_forced_loss(model, data, "val", spec, CPU, torch.autocast("cpu", enabled=False))
    assert loss == pytest.approx(total / tokens, rel=1e-5)
