"""``data.source_eos`` / ``source_bos``: every source ends in eos (as fairseq's translation task has it)
and opens with bos (as tutorials a, d and e and the Annotated Transformer have it), in the prepared splits,
the batches, user text at translation time and the logged tokenizers; specs that leave them out keep their
data fingerprints and run identities; a language model has no source, so they are spec errors there."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # no network: datasets only ever reads local files

import pytest

from ablate.data.prepare import TokenBatcher, prepare_data
from ablate.data.tokenize import BOS_ID, EOS_ID, PAD_ID, Tokenizers
from ablate.spec.experiment import DataSpec
from ablate.spec.load import SpecError, load_spec
from tests.data.test_data import DE, EN, files_spec, text_corpus, write

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = {"synthetic": {"task": "reverse", "train_size": 60, "val_size": 10, "test_size": 10}}


def test_every_source_ends_in_eos_after_its_tokens_in_every_split() -> None:
    plain = prepare_data(DataSpec(**SYNTHETIC), seed=0)
    marked = prepare_data(DataSpec(**SYNTHETIC, source_eos=True), seed=0)
    for name in ("train", "val", "test"):
        p, m = plain.splits[name], marked.splits[name]
        assert m.src_ids == [[*ids, EOS_ID] for ids in p.src_ids]
        assert m.tgt_ids == p.tgt_ids and m.src_text == p.src_text  # targets and text untouched
        assert all(EOS_ID not in ids for ids in p.src_ids)  # off: no marker at all
    assert marked.fingerprint != plain.fingerprint


def test_eos_comes_after_reversal() -> None:
    both = prepare_data(DataSpec(**SYNTHETIC, source_eos=True, reverse_source=True), seed=0)
    plain = prepare_data(DataSpec(**SYNTHETIC), seed=0)
    first = both.splits["train"]
    assert first.src_ids[0] == [*plain.splits["train"].src_ids[0][::-1], EOS_ID]
    assert first.src_ids[0] == both.tokenizers.model_src(first.src_text[0])  # user text, same ids


def test_a_truncated_source_keeps_its_eos_and_the_train_filter_is_unchanged(tmp_path: Path) -> None:
    files = text_corpus(tmp_path / "c")
    long_de, long_en = "ein sehr langer satz mit vielen wörtern hier", "a very long sentence with many words"
    write(tmp_path / "c" / "train.de.gz", [*DE, long_de])
    write(tmp_path / "c" / "train.en.gz", [*EN, long_en])
    write(tmp_path / "c" / "val.de", [long_de])
    write(tmp_path / "c" / "val.en", [long_en])
    plain = prepare_data(files_spec(files, tmp_path / "cache", max_len=8))
    marked = prepare_data(files_spec(files, tmp_path / "cache", max_len=8, source_eos=True))
    assert marked.stats["train_filtered"] == plain.stats["train_filtered"] == 1
    assert marked.splits["train"].src_text == plain.splits["train"].src_text
    val = marked.splits["val"].src_ids[0]  # 8 words cut to max_len - 2 = 6, then the marker: 7 positions
    assert val == [*plain.splits["val"].src_ids[0], EOS_ID] and len(val) == 7
    assert marked.tokenizers.model_src(long_de, 6) == val
    assert len(list((tmp_path / "cache" / "prepared").glob("*.npz"))) == 2  # one cache entry each


def test_batches_carry_the_marker_before_the_padding() -> None:
    data = prepare_data(DataSpec(**SYNTHETIC, source_eos=True), seed=0)
    batcher = TokenBatcher(data.splits["train"], 256, seed=0)
    batch = batcher.collate(batcher.epoch_batches(0)[0])
    for row in batch.src.tolist():
        real = [t for t in row if t != PAD_ID]
        assert real[-1] == EOS_ID and real.count(EOS_ID) == 1
        assert row[:len(real)] == real  # right-padded: the marker ends the real tokens


def test_logged_tokenizers_remember_it_and_older_files_read_as_off() -> None:
    data = prepare_data(DataSpec(**SYNTHETIC, source_eos=True), seed=0)
    again = Tokenizers.from_json(data.tokenizers.to_json())
    assert again.source_eos and again.model_src("3 4 5") == [*again.encode_src("3 4 5"), EOS_ID]
    older = json.loads(data.tokenizers.to_json())
    del older["source_eos"]  # written before the option existed
    assert not Tokenizers.from_json(json.dumps(older)).source_eos


def test_leaving_it_out_keeps_a_specs_hash_and_setting_it_changes_it() -> None:
    quickstart = ROOT / "experiments" / "quickstart.yaml"
    on = load_spec(quickstart)
    assert on.data.source_eos
    off = load_spec(quickstart, ["data.source_eos=false"])
    assert "source_eos" not in off.identity()["data"]  # a spec written before the field hashes as it did
    assert on.identity()["data"]["source_eos"] is True and on.spec_hash != off.spec_hash


@pytest.mark.parametrize("marker", ["source_eos", "source_bos"])
def test_a_language_model_with_a_source_marker_is_a_located_spec_error(marker: str) -> None:
    with pytest.raises(SpecError, match=f"data.{marker}") as caught:
        load_spec(ROOT / "experiments" / "lm-quickstart.yaml", [f"data.{marker}=true"])
    assert "has no source" in str(caught.value)


def test_bos_opens_and_eos_ends_every_source_after_reversal_and_the_cut(tmp_path: Path) -> None:
    both = prepare_data(DataSpec(**SYNTHETIC, source_bos=True, source_eos=True, reverse_source=True), seed=0)
    plain = prepare_data(DataSpec(**SYNTHETIC), seed=0)
    for name in ("train", "val"):
        want = [[BOS_ID, *ids[::-1], EOS_ID] for ids in plain.splits[name].src_ids]
        assert both.splits[name].src_ids == want
    only_bos = prepare_data(DataSpec(**SYNTHETIC, source_bos=True), seed=0)
    assert only_bos.splits["test"].src_ids == [[BOS_ID, *ids] for ids in plain.splits["test"].src_ids]
    assert len({both.fingerprint, only_bos.fingerprint, plain.fingerprint}) == 3
    files = text_corpus(tmp_path / "c")
    long_de = "ein sehr langer satz mit vielen wörtern hier"
    write(tmp_path / "c" / "val.de", [long_de])
    write(tmp_path / "c" / "val.en", ["a long one"])
    wrapped = prepare_data(files_spec(files, tmp_path / "cache", max_len=8, source_bos=True, source_eos=True))
    val = wrapped.splits["val"].src_ids[0]  # 8 words cut to 6, then both markers: exactly max_len
    assert len(val) == 8 and val[0] == BOS_ID and val[-1] == EOS_ID
    assert wrapped.tokenizers.model_src(long_de, 6) == val
    again = Tokenizers.from_json(wrapped.tokenizers.to_json())
    assert again.source_bos and again.source_eos


def test_presets_whose_tutorials_wrap_the_source_do_so() -> None:
    """a (000, its dataset: [SOS] + ids + [EOS]), d (003, Field(init_token='<sos>', eos_token='<eos>'))
    and e (004, the encoder input [SOS] ... [EOS]) wrap sources in both markers; b and c show no data code."""
    presets = ROOT / "experiments" / "presets"
    wrapped = {p.stem[0]: (s.data.source_bos, s.data.source_eos)
               for p in sorted(presets.glob("*.yaml")) for s in [load_spec(p)]}
    assert wrapped == {"a": (True, True), "b": (False, False), "c": (False, False), "d": (True, True),
                       "e": (True, True)}


def test_translation_reads_user_text_as_training_read_its_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ablate translate` gives the model what training gave it: the marker after the (cut) tokens."""
    import ablate.run.translate
    from ablate.engine.builders import build_model
    from ablate.run.translate import RunModel, translate

    spec = load_spec(ROOT / "experiments" / "quickstart.yaml", ["tracking.enabled=false"])
    tok = prepare_data(spec).tokenizers
    model = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=0)
    seen: list[list[int]] = []

    def record(model: object, src: object, *args: object) -> list[list[int]]:
        seen.extend([t for t in row if t != PAD_ID] for row in src.tolist())  # type: ignore[attr-defined]
        return [[] for _ in src.tolist()]  # type: ignore[attr-defined]

    monkeypatch.setattr(ablate.run.translate, "decode_batch", record)  # where translate looks it up
    long = " ".join(f"w{i}" for i in range(16))  # past data.max_len 16 - 2: cut to 14 tokens, then eos
    translate(RunModel("r", spec, tok, model.eval()), ["w3 w4", long])
    assert sorted(seen) == sorted([[*tok.encode_src("w3 w4"), EOS_ID], [*tok.encode_src(long)[:14], EOS_ID]])
