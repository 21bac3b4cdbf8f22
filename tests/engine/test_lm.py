"""Decoder-only language modelling (model.arch: decoder_only): the spec's arch, packing and evaluation
windows, the documents of a local corpus, and ALiBi's length extrapolation against learned positions' hard
limit."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from ablate.data.lm_corpus import (
    IGNORE,
    LMBatch,
    PackedBatcher,
    bits_per_byte,
    documents,
    pack,
    prepare_lm,
    windows,
)
from ablate.data.tokenize import BOS_ID, EOS_ID
from ablate.engine.builders import build_lm
from ablate.engine.decoder_only import PositionRangeError, segment_positions
from ablate.engine.lm_eval import window_nll
from ablate.engine.trainer import Trainer
from ablate.errors import AblateError
from ablate.spec.experiment import ExperimentSpec
from ablate.spec.load import load_spec

pytestmark = pytest.mark.usefixtures("single_thread")
MULTI30K = Path(os.environ.get("ABLATE_DATA_DIR") or Path(__file__).resolve().parents[3] / "shared" / "data"
                / "multi30k")
LM_MODEL = {"arch": "decoder_only", "d_model": 32, "heads": 2, "d_ff": 64, "decoder_layers": 2,
            "dropout": 0.0, "max_positions": 64}


def copy_far(**data: object) -> dict[str, object]:
    return {"source": "synthetic", "synthetic": {"task": "copy_far", "vocab_size": 16, "min_len": 4,
                                                 "max_len": 4, "train_size": 3000, "val_size": 200,
                                                 "test_size": 20},
            "document_lines": 20, "max_len": 32, "batch_tokens": 512, **data}


def lm_spec(model: dict[str, object] | None = None, **sections: object) -> ExperimentSpec:
    return ExperimentSpec.model_validate({"name": "lm", "data": copy_far(), "tracking": {"enabled": False},
                                          "model": {**LM_MODEL, **(model or {})}, **sections})


# ---------------------------------------------------------------- spec
def test_arch_at_its_default_keeps_every_existing_hash(tmp_path: Path) -> None:
    base = {"name": "x", "tracking": {"enabled": False}}
    plain = ExperimentSpec.model_validate(base)
    explicit = ExperimentSpec.model_validate({**base, "model": {"arch": "encoder_decoder"}})
    assert plain.spec_hash == explicit.spec_hash
    assert "arch" not in plain.identity()["model"] and "lengths" not in plain.identity()["eval"]
    assert "document_lines" not in plain.identity()["data"]
    assert lm_spec().spec_hash != plain.spec_hash


def _error_of(tmp_path: Path, text: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(AblateError) as info:
        load_spec(str(path), [])
    return str(info.value)


def test_axis_values_without_meaning_in_a_decoder_only_model_are_located_errors(tmp_path: Path) -> None:
    message = _error_of(tmp_path, "name: x\ndata:\n  source: synthetic\n  synthetic: {task: copy_far}\n"
                        "model:\n  arch: decoder_only\n  embeddings: shared\n  encoder_layers: 3\n")
    assert "spec.yaml:7" in message and "'shared' does not apply to model.arch decoder_only" in message
    assert "spec.yaml:8" in message and "encoder_layers does not apply" in message


def test_translation_data_and_lm_data_need_their_own_arch(tmp_path: Path) -> None:
    message = _error_of(tmp_path, "name: x\nmodel: {arch: decoder_only}\n")  # the default task: reverse
    assert "decoder_only trains a language model" in message
    message = _error_of(tmp_path, "name: x\ndata:\n  source: synthetic\n  synthetic: {task: recall}\n")
    assert "needs model.arch: decoder_only" in message
    message = _error_of(tmp_path, "name: x\neval:\n  lengths: [16, 32]\n")
    assert "eval.lengths" in message and "need model.arch: decoder_only" in message


def test_evaluation_lengths_past_the_position_table_are_a_spec_error(tmp_path: Path) -> None:
    message = _error_of(tmp_path, "name: x\ndata:\n  source: synthetic\n  synthetic: {task: recall}\n"
                        "  max_len: 32\nmodel: {arch: decoder_only, positions: learned, max_positions: 64}\n"
                        "eval:\n  lengths: [32, 64, 128]\n")
    assert "eval.lengths.2" in message and "128 is past model.max_positions 64" in message


def test_lm_metric_names_are_the_ones_its_runs_report() -> None:
    spec = lm_spec(eval={"lengths": [32, 64], "sliding_stride": 8})
    assert spec.evaluation_metrics() == ["val/loss", "val/ppl", "val/bpb", "val/ppl_at_32",
                                         "val/ppl_at_32_sliding", "val/ppl_at_64", "val/ppl_at_64_sliding",
                                         "val/loss_growth_at_64", "val/loss_growth_at_64_sliding"]
    with pytest.raises(ValueError, match="val/bleu"):
        lm_spec(train={"early_stopping": {"metric": "val/bleu"}})
    assert lm_spec(train={"early_stopping": {"metric": "val/bpb"}}).selection_metric() == "val/bpb"


def test_xavier_embed_normal_draws_only_the_token_embedding_from_n_0_inverse_sqrt_d() -> None:
    """``model.init: xavier_embed_normal`` (tensor2tensor's and fairseq's embedding init): the sqrt(d)-scaled
    tied embedding has unit-variance entries, where Xavier's are sqrt(2 / (V + d)) * sqrt(d) (0.35 at V 1000,
    d 64), smaller than a sinusoid's 0.71; every other parameter is Xavier's draw, unchanged."""
    model = {"d_model": 64, "heads": 4, "embeddings": "tied", "positions": "sinusoidal", "max_positions": 64}
    xavier = build_lm(lm_spec(model).model, 1000, seed=3)
    paper = build_lm(lm_spec({**model, "init": "xavier_embed_normal"}).model, 1000, seed=3)
    scaled = {name: float((m.embed.weight * m.embed_scale).std())
              for name, m in (("x", xavier), ("p", paper))}
    assert scaled["p"] == pytest.approx(1.0, abs=0.02)
    assert scaled["x"] == pytest.approx((2 / (1000 + 64)) ** 0.5 * 8, rel=0.05)  # Xavier std, times sqrt(d)
    assert paper.generator.weight is paper.embed.weight  # still tied: one draw
    others = {n: p for n, p in xavier.named_parameters() if not n.startswith("embed.")}
    for name, p in paper.named_parameters():
        if not name.startswith("embed."):
            assert torch.equal(p, others[name]), name


# ---------------------------------------------------------------- packing and windows
def test_packed_blocks_hold_each_documents_pairs_in_order_and_mark_documents() -> None:
    docs = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    inputs, targets, segments = pack(docs, 4)
    assert inputs.tolist() == [[BOS_ID, 5, 6, 7], [BOS_ID, 8, 9, BOS_ID], [10, 11, 12, 13]]
    assert targets.tolist() == [[5, 6, 7, EOS_ID], [8, 9, EOS_ID, 10], [11, 12, 13, EOS_ID]]
    assert segments.tolist() == [[0, 0, 0, 0], [1, 1, 1, 2], [2, 2, 2, 2]]
    assert segment_positions(torch.tensor(segments)).tolist() == [[0, 1, 2, 3], [0, 1, 2, 0], [0, 1, 2, 3]]
    cut, _, _ = pack(docs, 5)  # 12 pairs: two blocks of 5, the last 2 pairs dropped
    assert cut.shape == (2, 5)


def test_packed_batches_are_fixed_by_seed_and_epoch_and_split_over_ranks() -> None:
    from ablate.data.lm_corpus import LMSplit

    split = LMSplit.from_lists([[5] * 30, [6] * 50], ["a", "b"], 0)
    one, again = PackedBatcher(split, 8, 16, seed=3), PackedBatcher(split, 8, 16, seed=3)
    assert [b.tolist() for b in one.all_batches(0)] == [b.tolist() for b in again.all_batches(0)]
    assert [b.tolist() for b in one.all_batches(0)] != [b.tolist() for b in one.all_batches(1)]
    assert sorted(i for b in one.all_batches(0) for i in b.tolist()) == list(range(10))
    ranks = [PackedBatcher(split, 8, 16, seed=3, rank=r, world_size=2) for r in (0, 1)]
    assert ranks[0].num_batches(0) == ranks[1].num_batches(0) == 2
    batch = one.collate([0, 1])
    assert isinstance(batch, LMBatch) and batch.n_tgt_tokens == 16 and len(batch.model_inputs()) == 2


@pytest.mark.parametrize("stride", [None, 1, 3, 5])
def test_every_target_is_scored_once_with_the_most_context_that_fits(stride: int | None) -> None:
    docs = [list(range(10, 23)), [4, 5]]
    got = list(windows(docs, 5, stride))
    scored = [t for w in got for t in w.targets if t != IGNORE]
    assert scored == [*docs[0], EOS_ID, *docs[1], EOS_ID]
    for w in got:
        assert len(w.ids) <= 5 and len(w.ids) == len(w.targets)
        if stride is not None and w.targets[0] == IGNORE:
            assert len(w.ids) == 5  # a sliding window that is not a document's first is full
    if stride is None:
        assert all(w.targets[0] != IGNORE for w in got)  # non-overlapping: no context is reused


def test_bits_per_byte_is_nats_over_bytes_in_bits() -> None:
    assert bits_per_byte(math.log(2) * 12, 6) == pytest.approx(2.0)


def test_documents_join_consecutive_lines() -> None:
    assert documents(["a b", " c ", "", "d", "e"], 2, lowercase=False) == ["a b c", "d e"]


@pytest.mark.skipif(not (MULTI30K / "train.en.gz").exists(), reason="needs ../shared/data/multi30k")
def test_multi30k_english_captions_become_documents(tmp_path: Path) -> None:
    spec = ExperimentSpec.model_validate({
        "name": "m", "tracking": {"enabled": False}, "model": {"arch": "decoder_only"},
        "data": {"source": "text", "document_lines": 8,
                 "text": {"train": "train.en.gz", "val": "val.en.gz", "root": str(MULTI30K)},
                 "tokenizer": {"kind": "char", "vocab_size": 200},
                 "max_train_examples": 800, "cache_dir": str(tmp_path)}})
    data = prepare_lm(spec)
    val = data.documents["val"]
    assert len(data.documents["train"].docs) == 100 and len(val.docs) == math.ceil(1014 / 8)
    assert val.texts[0].startswith("A group of men are loading cotton onto a truck")
    assert data.tokenizers.decode_tgt(val.docs[0]) == val.texts[0]
    assert val.n_bytes == sum(len(t.encode()) + 1 for t in val.texts)


# ---------------------------------------------------------------- section 5 of the issue
@pytest.mark.slow  # a real training or study (the fast tier stays under 3 minutes)
def test_alibi_trained_at_l_keeps_its_loss_at_2l_and_learned_positions_stop_at_their_table(
        tmp_path: Path) -> None:
    """Press et al. 2022: ALiBi trained on blocks of L tokens predicts as well at 2L (here a copy at a
    fixed distance inside documents ten times longer than L); a learned table of L positions cannot even
    be evaluated at 2L, and says so in one line."""
    spec = lm_spec({"d_model": 64, "heads": 4, "d_ff": 128, "positions": "alibi"},
                   train={"max_steps": 600, "eval_every": 600, "optimizer": {"lr": 3e-3},
                          "schedule": {"name": "constant", "warmup_steps": 20}, "out_dir": str(tmp_path)})
    data = prepare_lm(spec)
    model = build_lm(spec.model, data.tokenizers.tgt_vocab_size, seed=0)
    Trainer(spec, data, model, tmp_path / "run", torch.device("cpu"), show_progress=False).fit()
    docs = data.documents["val"].docs
    loss = {}
    for n in (32, 64):
        nll, count = window_nll(model, docs, n, None, 2048, torch.device("cpu"), "fp32")
        loss[n] = nll / count
    uniform = math.log(16)
    assert loss[32] < 0.8 * uniform, "the copies are learned at the training length"
    assert loss[64] <= loss[32] + 0.05, f"ALiBi keeps its loss at 2L: {loss}"

    learned = build_lm(lm_spec({"positions": "learned", "max_positions": 32}).model,
                       data.tokenizers.tgt_vocab_size)
    with pytest.raises(PositionRangeError) as info:
        window_nll(learned, docs, 64, None, 2048, torch.device("cpu"), "fp32")
    message = str(info.value)
    assert "\n" not in message and "learned positions cannot extrapolate beyond their table" in message


def test_an_lm_study_ranks_by_perplexity_and_lower_is_better() -> None:
    from ablate.spec.metricnames import direction
    from ablate.study.designs import study_metric

    spec = lm_spec(ablation={"axes": {"model.positions": ["sinusoidal", "alibi"]}})
    assert study_metric(spec) == "val/ppl"
    metrics = ("val/ppl", "val/bpb", "val/ppl_at_256", "test/loss")
    assert {direction(m) for m in metrics} == {"minimize"}


def test_a_hub_dataset_text_column_becomes_documents(tmp_path: Path) -> None:
    """A hub source reads one text column (here a local dataset folder, as load_dataset accepts)."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    lines = {"train": ["a b c", "d e", "f g h i"], "validation": ["a b", "c d"], "test": ["e f"]}
    for split, texts in lines.items():
        (folder / f"{split}.jsonl").write_text("".join(f'{{"text": "{t}", "id": 1}}\n' for t in texts))
    spec = ExperimentSpec.model_validate({
        "name": "h", "tracking": {"enabled": False}, "model": {"arch": "decoder_only"},
        "data": {"source": "hub", "hub": {"name": str(folder), "field": "text"}, "document_lines": 2,
                 "tokenizer": {"kind": "wordlevel", "vocab_size": 50}, "cache_dir": str(tmp_path / "c")}})
    data = prepare_lm(spec)
    assert [[data.tokenizers.decode_tgt(d) for d in data.documents[s].docs] for s in ("train", "val", "test")
            ] == [["a b c d e", "f g h i"], ["a b c d"], ["e f"]]
    assert [list(data.documents[s].texts or []) for s in ("train", "val", "test")] == [
        ["a b c d e", "f g h i"], ["a b c d"], ["e f"]]


def test_a_hub_lm_spec_must_name_its_text_column(tmp_path: Path) -> None:
    message = _error_of(tmp_path, "name: x\nmodel: {arch: decoder_only}\ndata:\n  source: hub\n"
                        "  hub: {name: some/dataset}\n")
    assert "data.hub.field" in message and "one text column" in message
