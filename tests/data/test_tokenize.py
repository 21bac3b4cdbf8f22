"""Tokenizers: special ids, detokenization per kind, joint vs separate, preprocessing, on-disk cache."""

from __future__ import annotations

from pathlib import Path

import pytest

import ablate.data.tokenize as tk
from ablate.data.tokenize import Tokenizers, fixed_wordlevel, load_or_train, train_tokenizer
from ablate.spec.experiment import TokenizerSpec

SRC = ["Ein Hund läuft über die Wiese.", "Zwei Kinder spielen im Park.", "Eine Frau liest ein Buch."] * 20
TGT = ["A dog runs across the meadow.", "Two children play in the park.", "A woman reads a book."] * 20


@pytest.mark.parametrize("kind", ["bpe", "wordlevel", "char"])
def test_special_ids_and_round_trip(kind: str) -> None:
    tok = Tokenizers(train_tokenizer(kind, SRC + TGT, 200, 1), kind=kind)
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert [tok.tgt.token_to_id(s) for s in ("<pad>", "<s>", "</s>", "<unk>")] == [0, 1, 2, 3]
    ids = tok.encode_tgt("Two children play in the park.")
    assert ids and min(ids) > 3  # no bos/eos added, nothing unknown
    expected = "Two children play in the park ." if kind == "wordlevel" else "Two children play in the park."
    assert tok.decode_tgt(ids) == expected  # bpe/char restore spaces; wordlevel joins words by spaces
    # decode stops at eos and ignores bos/pad
    assert tok.decode_tgt([1, *ids, 2, *ids, 0, 0]) == expected


def test_bpe_merges_and_literal_specials_are_text() -> None:
    tok = Tokenizers(train_tokenizer("bpe", SRC + TGT, 120, 1))
    assert len(tok.encode_tgt("the park")) < len("the park")  # merges learned, not characters
    ids = tok.encode_tgt("the <s> park")
    assert 1 not in ids  # "<s>" typed by a user is not bos
    assert tok.decode_tgt(ids) == "the <unk>s<unk> park"  # unseen characters stay visible as <unk>
    known = Tokenizers(train_tokenizer("bpe", [*SRC, "x <s> y"], 120, 1))
    assert 1 not in known.encode_tgt("die <s> Wiese")
    assert known.decode_tgt(known.encode_tgt("die <s> Wiese")) == "die <s> Wiese"


def test_wordlevel_min_freq_and_vocab_size() -> None:
    rare = SRC + ["Quokka."]
    kept = train_tokenizer("wordlevel", rare, 1000, 1)
    dropped = train_tokenizer("wordlevel", rare, 1000, 2)
    assert kept.token_to_id("Quokka") is not None and dropped.token_to_id("Quokka") is None
    assert train_tokenizer("wordlevel", SRC, 10, 1).get_vocab_size() == 10


def test_lowercase_applies_to_encoding_and_reverse_source_to_model_src() -> None:
    tok = Tokenizers(train_tokenizer("wordlevel", [s.lower() for s in SRC + TGT], 500, 1), kind="wordlevel",
                     lowercase=True, reverse_source=True)
    plain = tok.encode_src("Ein Hund läuft.")
    assert plain == tok.encode_src("ein hund läuft.") and min(plain) > 3  # lowercased before lookup
    assert tok.decode_src(plain) == "ein hund läuft ."  # encode_src never reverses
    assert tok.model_src("Ein Hund läuft.") == plain[::-1]  # what the model reads (reversed, as preset d-)
    assert tok.model_src_batch(["Ein Hund läuft."]) == [plain[::-1]]
    assert Tokenizers(tok.src, kind="wordlevel", lowercase=True).model_src("Ein Hund läuft.") == plain
    assert tok.encode_tgt("A DOG") == tok.encode_tgt("a dog")  # the target is never reversed


def test_fixed_wordlevel_and_json_round_trip(tmp_path: Path) -> None:
    tok = Tokenizers(fixed_wordlevel(["w0", "w1", "w2"]), kind="wordlevel", reverse_source=True)
    assert tok.src_vocab_size == tok.tgt_vocab_size == 7
    assert tok.model_src("w0 w2 w1") == [5, 6, 4] and tok.encode_tgt("w0 w2 w9") == [4, 6, 3]
    tok.save(tmp_path / "tok.json")
    again = Tokenizers.load(tmp_path / "tok.json")
    assert again.model_src("w0 w2 w1") == [5, 6, 4] and again.reverse_source and again.joint


def test_joint_and_separate_vocabularies(tmp_path: Path) -> None:
    joint, _ = load_or_train(tmp_path, "j", TokenizerSpec(kind="wordlevel", joint=True), SRC, TGT,
                             lowercase=False, reverse_source=False)
    separate, _ = load_or_train(tmp_path, "s", TokenizerSpec(kind="wordlevel", joint=False), SRC, TGT,
                                lowercase=False, reverse_source=False)
    assert joint.joint and joint.src is joint.tgt and joint.src_vocab_size == joint.tgt_vocab_size
    assert joint.src.token_to_id("Hund") is not None and joint.src.token_to_id("dog") is not None
    assert not separate.joint
    assert separate.src.token_to_id("Hund") is not None and separate.src.token_to_id("dog") is None
    assert separate.tgt.token_to_id("dog") is not None and separate.tgt.token_to_id("Hund") is None


def test_cache_hit_does_not_retrain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = tk.train_tokenizer

    def counting(kind: str, texts: list[str], vocab_size: int, min_freq: int):  # type: ignore[no-untyped-def]
        calls.append(kind)
        return real(kind, texts, vocab_size, min_freq)

    monkeypatch.setattr(tk, "train_tokenizer", counting)
    spec = TokenizerSpec(kind="bpe", vocab_size=100, joint=False)
    first, trained = load_or_train(tmp_path, "k1", spec, SRC, TGT, lowercase=False, reverse_source=False)
    assert trained and calls == ["bpe", "bpe"]
    path = tmp_path / "tokenizers" / "k1.json"
    mtime = path.stat().st_mtime_ns
    second, trained = load_or_train(tmp_path, "k1", spec, SRC, TGT, lowercase=False, reverse_source=False)
    assert not trained and calls == ["bpe", "bpe"] and path.stat().st_mtime_ns == mtime
    assert second.encode_src(SRC[0]) == first.encode_src(SRC[0])
    assert not list(path.parent.glob(".*.tmp"))  # atomic write left no temporary file
    path.write_text("{broken")  # a damaged cache file is rebuilt, not fatal
    _, trained = load_or_train(tmp_path, "k1", spec, SRC, TGT, lowercase=False, reverse_source=False)
    assert trained and len(calls) == 4
