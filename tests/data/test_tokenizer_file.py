"""A tokenizer of one's own (``data.tokenizer: {kind: file, path: ...}``, ablate/data/tokenizer_file.py): a
Hugging Face tokenizers JSON that the test makes itself (no download), for a language model and for
translation, its special tokens mapped to pad/bos/eos, its sha256 in the data identity, and every bad file
one located line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ablate.cli import main
from ablate.data.corpus import DataError
from ablate.data.lm_corpus import PackedBatcher, prepare_lm
from ablate.data.prepare import prepare_data
from ablate.data.tokenizer_file import load_tokenizer_file, tokenizer_file_check
from ablate.spec.experiment import ExperimentSpec, TokenizerSpec

TEXT = ["the cat sat on the mat", "a dog ran in the park", "the sun is warm today", "birds sing at dawn"]


def byte_level(path: Path, specials: list[str], vocab: int = 300) -> Path:
    """A GPT-2-style byte-level BPE tokenizer, its special tokens first (ids 0..)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXT * 20, trainer)
    tok.save(str(path))
    return path


def text_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in (("train", TEXT * 10), ("val", TEXT[:2]), ("test", TEXT[2:])):
        (folder / f"{split}.txt").write_text("\n\n".join(rows) + "\n")
    return folder


def lm_spec(folder: Path, cache: Path, tokenizer: dict[str, Any]) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "own", "tracking": {"enabled": False}, "model": {"arch": "decoder_only"},
        "data": {"source": "text", "text": {"root": str(folder), "train": "train.txt", "val": "val.txt",
                                            "test": "test.txt"},
                 "tokenizer": tokenizer, "max_len": 8, "batch_tokens": 32, "cache_dir": str(cache)}})


def test_a_language_model_reads_the_files_ids_and_its_special_tokens(tmp_path: Path) -> None:
    path = byte_level(tmp_path / "tokenizer.json", ["<|endoftext|>", "<pad>", "<s>"])
    spec = lm_spec(text_corpus(tmp_path / "text"), tmp_path / "cache", {"kind": "file", "path": str(path)})
    data = prepare_lm(spec)
    own = Tokenizer.from_file(str(path))
    tok = data.tokenizers
    assert (tok.eos_id, tok.pad_id, tok.bos_id) == (0, 1, 2) and tok.unk_id is None
    assert tok.tgt_vocab_size == own.get_vocab_size()
    train = data.documents["train"]
    assert train.docs[0].tolist() == own.encode(TEXT[0], add_special_tokens=False).ids  # the file's own ids
    assert tok.decode_tgt(train.docs[1]) == TEXT[1]
    batch = PackedBatcher(train, 8, 32, seed=0).collate([0])
    assert batch.ids[0, 0] == tok.bos_id and tok.eos_id in batch.targets[0].tolist()


def test_special_tokens_named_in_the_spec_and_each_missing_one_in_one_line(tmp_path: Path) -> None:
    path = byte_level(tmp_path / "gpt2.json", ["<|endoftext|>"])  # GPT-2 has one special token
    spec = TokenizerSpec(kind="file", path=str(path))
    # a translation model needs a pad of its own: every missing role at once, one line each
    with pytest.raises(DataError) as info:
        load_tokenizer_file(spec, lowercase=False)
    lines = str(info.value).splitlines()
    assert len(lines) == 2 and all(line.startswith("data.tokenizer.path: ") for line in lines)
    assert "has no pad token" in lines[0] and "data.tokenizer.specials.pad" in lines[0]
    assert "a translation model needs its own" in lines[0]
    assert "has no bos token" in lines[1] and "data.tokenizer.specials.bos" in lines[1]
    # a language model's end-of-text token serves as pad and bos too, as nanoGPT and litgpt use GPT-2's
    lm = load_tokenizer_file(spec, lowercase=False, lm=True)
    assert lm.pad_id == lm.bos_id == lm.eos_id == 0
    note = (f"data.tokenizer.path: {path} has one end-of-text token, '<|endoftext|>': it serves as pad and "
            "bos too (as in nanoGPT and litgpt; a language model's padding is never scored)")
    assert tokenizer_file_check(spec, lm=True) == ([], note)
    # no end-of-text token either: all three roles missing, at once
    bare = TokenizerSpec(kind="file", path=str(byte_level(tmp_path / "bare.json", ["<sep>"])))
    problems, note = tokenizer_file_check(bare, lm=True)
    assert note is None and [m.split(" token")[0].split()[-1] for _, m in problems] == ["pad", "bos", "eos"]
    named = TokenizerSpec(kind="file", path=str(path),
                          specials={"pad": "<|endoftext|>", "bos": "<|endoftext|>"})
    tok = load_tokenizer_file(named, lowercase=False)
    assert tok.pad_id == tok.bos_id == tok.eos_id == 0  # nanoGPT's use of GPT-2's one token
    wrong = TokenizerSpec(kind="file", path=str(path), specials={"pad": "<none>", "bos": "<|endoftext|>"})
    with pytest.raises(DataError, match=r"data.tokenizer.specials.pad: '<none>' is not a token of"):
        load_tokenizer_file(wrong, lowercase=False)


def test_the_files_sha256_is_part_of_the_data_identity(tmp_path: Path) -> None:
    path = byte_level(tmp_path / "tokenizer.json", ["<|endoftext|>", "<pad>", "<s>"])
    folder = text_corpus(tmp_path / "text")
    spec = lm_spec(folder, tmp_path / "cache", {"kind": "file", "path": str(path)})
    first = prepare_lm(spec)
    byte_level(path, ["<|endoftext|>", "<pad>", "<s>"], vocab=290)  # the same path, another tokenizer
    second = prepare_lm(spec)
    assert second.fingerprint != first.fingerprint and not second.cached
    assert len(list((tmp_path / "cache" / "shards").glob("*/meta.json"))) == 2
    # the run identity names the file; its content is in the data identity (shards, fingerprint)
    again = lm_spec(folder, tmp_path / "cache", {"kind": "file", "path": str(path)})
    assert again.spec_hash == spec.spec_hash and again.identity()["data"]["tokenizer"]["path"] == str(path)


def test_translation_uses_the_file_for_both_sides(tmp_path: Path) -> None:
    path = byte_level(tmp_path / "tokenizer.json", ["<pad>", "<s>", "</s>", "<unk>", "<|endoftext|>"][::-1])
    folder = tmp_path / "pairs"
    folder.mkdir()
    for split in ("train", "val"):
        (folder / f"{split}.src").write_text("\n".join(TEXT) + "\n")
        (folder / f"{split}.tgt").write_text("\n".join(reversed(TEXT)) + "\n")
    spec = ExperimentSpec.model_validate({
        "name": "mt", "tracking": {"enabled": False},
        "data": {"source": "files", "files": {"root": str(folder),
                                              "train": {"src": "train.src", "tgt": "train.tgt"},
                                              "val": {"src": "val.src", "tgt": "val.tgt"}},
                 "tokenizer": {"kind": "file", "path": str(path)}, "cache_dir": str(tmp_path / "cache")}})
    data = prepare_data(spec)
    tok = data.tokenizers
    assert tok.joint and (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (4, 3, 2, 1)
    own = Tokenizer.from_file(str(path))
    assert data.splits["train"].src_ids[0] == own.encode(TEXT[0], add_special_tokens=False).ids
    assert tok.decode_tgt([tok.bos_id, *data.splits["train"].tgt_ids[0], tok.eos_id, 7]) == TEXT[-1]


@pytest.mark.parametrize("content", ["not json at all", json.dumps({"model": "none"}), None])
def test_a_missing_or_foreign_file_is_one_located_line_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None) -> None:
    path = tmp_path / "tokenizer.json"
    if content is not None:
        path.write_text(content)
    folder = text_corpus(tmp_path / "text")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: own\nmodel: {{arch: decoder_only}}\ndata:\n  source: text\n"
                    f"  text: {{root: {folder}, train: train.txt, val: val.txt}}\n"
                    f"  tokenizer:\n    kind: file\n    path: {path}\n  cache_dir: {tmp_path / 'cache'}\n")
    assert main(["validate", str(spec)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and f"{spec}:8" in err[0] and "data.tokenizer.path" in err[0]
    expected = "tokenizer file not found" if content is None else "is not a Hugging Face tokenizers JSON"
    assert expected in err[0]
    with pytest.raises(DataError):
        prepare_lm(lm_spec(folder, tmp_path / "cache", {"kind": "file", "path": str(path)}))
    assert not (tmp_path / "cache" / "shards").exists()


def test_validate_says_which_token_serves_and_warns_of_a_vocabulary_far_wider_than_the_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = byte_level(tmp_path / "gpt2.json", ["<|endoftext|>"], vocab=400)
    folder = text_corpus(tmp_path / "text")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: own\nmodel: {{arch: decoder_only, d_model: 8, heads: 2, d_ff: 16}}\ndata:\n"
                    f"  source: text\n  text: {{root: {folder}, train: train.txt, val: val.txt}}\n"
                    f"  tokenizer: {{kind: file, path: {path}}}\n  cache_dir: {tmp_path / 'cache'}\n")
    assert main(["validate", str(spec)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("note: data.tokenizer.path: ") and "serves as pad and bos too" in out[0]
    vocab = Tokenizer.from_file(str(path)).get_vocab_size()
    # about 300 types at width 8: the input and output tables (2 x 303 x 8) against 2 layers of 4 x 8^2
    # attention and 2 x 8 x 16 FFN weights each
    share = 2 * vocab * 8 / (2 * vocab * 8 + 2 * (4 * 64 + 2 * 8 * 16))
    assert out[1].startswith(f"warning: data.tokenizer.path: a vocabulary of {vocab} types at model.d_model "
                             f"8 ({vocab / 8:.0f}x the width): the embedding tables hold about {share:.0%}")
    assert out[2].startswith(f"ok {spec} (")
    # the same file at a width it suits: no warning
    assert main(["validate", str(spec), "--set", "model.d_model=64", "--set", "model.d_ff=256"]) == 0
    assert not any(line.startswith("warning:") for line in capsys.readouterr().out.splitlines())


def test_the_spec_ties_path_to_kind_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind file needs path"):
        TokenizerSpec(kind="file")
    with pytest.raises(ValueError, match="path names a tokenizer file, but kind is 'bpe'"):
        TokenizerSpec(path="tokenizer.json")
    plain = ExperimentSpec.model_validate({"name": "x", "tracking": {"enabled": False}})
    assert "path" not in plain.identity()["data"]["tokenizer"]  # older specs keep their hash
