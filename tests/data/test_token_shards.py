"""Token shards (ablate/data/token_shards.py, shard_build.py): a language model's corpus tokenized once into
memory-mapped files, read back as the same blocks, batches and windows the in-memory lists gave, resumed
after a kill, and refused in one line when the data is bad."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from ablate.data import shard_build
from ablate.data.corpus import DataError, sha256_json
from ablate.data.lm_corpus import PackedBatcher, prepare_lm, windows
from ablate.data.lm_sources import Piece, StreamDigest, split_long, stream_pieces
from ablate.data.token_shards import token_dtype
from ablate.data.tokenize import BOS_ID, EOS_ID, train_tokenizer
from ablate.spec.experiment import ExperimentSpec

WORDS = ("the kernel maps a page into the address space of the process and the fault handler reads it "
         "back when the cache misses").split()


def corpus(folder: Path, n_docs: int = 60, seed: int = 0) -> Path:
    """Paragraph text files (train, val, test) of documents of varied length."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_docs), ("val", 6), ("test", 4)):
        paras = []
        for _ in range(n):
            lines = [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 12))))
                     for _ in range(rng.integers(1, 6))]
            paras.append("\n".join(lines))
        (folder / f"{split}.txt").write_text("\n\n".join(paras) + "\n", encoding="utf-8")
    return folder


def lm(folder: Path, cache: Path, **data: Any) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "shards", "tracking": {"enabled": False}, "model": {"arch": "decoder_only"},
        "data": {"source": "text", "text": {"root": str(folder), "train": "train.txt", "val": "val.txt",
                                            "test": "test.txt"},
                 "tokenizer": {"kind": "bpe", "vocab_size": 120}, "max_len": 16, "batch_tokens": 64,
                 "cache_dir": str(cache), **data}})


def published(cache: Path) -> list[Path]:
    """Finished shard folders under a cache (not a build in progress)."""
    shards = cache / "shards"
    return [p for p in shards.iterdir() if p.is_dir() and not p.name.endswith(".building")] \
        if shards.is_dir() else []


# ---------------------------------------------------------------- the reference: the lists of before
def reference_pack(docs: list[list[int]], block_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The packing of the in-memory loader, written plainly: [bos] d [eos] per document, inputs without the
    eos, targets without the bos, cut into blocks, the last partial one dropped."""
    inputs, targets, segments = [], [], []
    for j, d in enumerate(docs):
        inputs += [BOS_ID, *d]
        targets += [*d, EOS_ID]
        segments += [j] * (len(d) + 1)
    n = len(inputs) // block_len * block_len
    return tuple(np.array(a[:n]).reshape(-1, block_len) for a in (inputs, targets, segments))  # type: ignore


def reference_batches(n_blocks: int, rows: int, seed: int, epoch: int) -> list[list[int]]:
    order = np.random.default_rng([seed, epoch]).permutation(n_blocks)
    return [order[i:i + rows].tolist() for i in range(0, n_blocks, rows)]


def test_shards_give_the_batches_and_windows_of_the_in_memory_lists(tmp_path: Path) -> None:
    spec = lm(corpus(tmp_path / "text"), tmp_path / "cache")
    data = prepare_lm(spec)
    train = data.documents["train"]
    assert isinstance(train.docs.tokens, np.memmap) and train.docs.tokens.dtype == np.uint16  # on disk
    docs = [d.tolist() for d in train.docs]
    texts = (tmp_path / "text" / "train.txt").read_text().split("\n\n")
    assert docs == data.tokenizers.encode_tgt_batch([" ".join(t.split("\n")) for t in texts])
    inputs, targets, segments = reference_pack(docs, 16)
    batcher = PackedBatcher(train, 16, 64, seed=7)
    for epoch in (0, 1):
        expected = reference_batches(len(inputs), 4, 7, epoch)
        assert [b.tolist() for b in batcher.all_batches(epoch)] == expected
        for rows in expected:
            batch = batcher.collate(rows)
            assert batch.ids.tolist() == inputs[rows].tolist()
            assert batch.targets.tolist() == targets[rows].tolist()
            assert batch.segments is not None and batch.segments.tolist() == segments[rows].tolist()
    val = data.documents["val"]
    as_lists = [d.tolist() for d in val.docs]
    for stride in (None, 3):
        assert [(w.ids, w.targets) for w in windows(val, 8, stride)] == \
            [(w.ids, w.targets) for w in windows(as_lists, 8, stride)]
    assert val.n_bytes == sum(len(t.encode()) + 1 for t in val.texts or [])


def test_a_second_run_opens_the_shards_and_keeps_the_fingerprint(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    spec = lm(corpus(tmp_path / "text"), tmp_path / "cache")
    first = prepare_lm(spec)
    monkeypatch.setattr(shard_build, "_build", lambda *a: pytest.fail("built again"))
    again = prepare_lm(spec)
    assert again.cached and not first.cached and again.fingerprint == first.fingerprint
    # the fingerprint is the in-memory loader's: each split's document strings digested as one JSON list
    val = [" ".join(p.split("\n")) for p in (tmp_path / "text" / "val.txt").read_text().strip().split("\n\n")]
    assert list(again.documents["val"].texts or []) == val
    other = lm(tmp_path / "text", tmp_path / "cache", max_len=32)  # the block length is read, not written
    assert prepare_lm(other).fingerprint != first.fingerprint


def test_a_build_killed_mid_corpus_resumes_where_it_stopped(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    spec = lm(corpus(tmp_path / "text", n_docs=400), tmp_path / "cache")
    fresh = prepare_lm(lm(tmp_path / "text", tmp_path / "fresh"))
    monkeypatch.setattr(shard_build, "BATCH_PIECES", 50)
    real = shard_build._write_batch
    calls: list[int] = []

    def killed_after_three(writer: Any, batch: list[Piece], *args: Any) -> None:
        if len(calls) == 3:
            raise KeyboardInterrupt  # the kill, between two batches
        calls.append(len(batch))
        real(writer, batch, *args)

    monkeypatch.setattr(shard_build, "_write_batch", killed_after_three)
    with pytest.raises(KeyboardInterrupt):
        prepare_lm(spec)
    building = next((tmp_path / "cache" / "shards").glob("*.building"))
    assert published(tmp_path / "cache") == [], "a killed build publishes nothing"
    journal = json.loads((building / "train.journal.json").read_text())
    assert journal["documents"] == 150
    with open(building / "train.tokens.part", "ab") as part:  # an append the journal never recorded
        part.write(b"\x07" * 10)
    encoded: list[int] = []
    monkeypatch.setattr(shard_build, "_write_batch",
                        lambda w, b, *a: (encoded.append(len(b)), real(w, b, *a)))
    resumed = prepare_lm(spec)
    assert sum(encoded) == 400 - 150 + 6 + 4  # the rest of train, then val and test
    for split in ("train", "val", "test"):
        assert [d.tolist() for d in resumed.documents[split].docs] == \
            [d.tolist() for d in fresh.documents[split].docs]
    assert resumed.fingerprint == fresh.fingerprint
    assert not building.exists()


def byte_level(texts: list[str]) -> Tokenizer:
    """A GPT-2-style byte-level BPE (a tokenizer file's kind), trained here."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts * 5, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return tok


def encoded(tok: Tokenizer, pieces: list[Piece]) -> list[int]:
    """The ids the shard build writes: a later piece of a document encoded after its space."""
    texts = [p.text if p.first else f" {p.text}" for p in pieces]
    return [i for e in tok.encode_batch(texts, add_special_tokens=False) for i in e.ids]


@pytest.mark.parametrize("kind", ["bpe", "wordlevel", "char", "byte-level file"])
def test_a_streams_pieces_and_a_long_documents_get_the_ids_of_the_whole_text(kind: str) -> None:
    lines = [" ".join(WORDS[i:i + 5]) + (" ," if i % 3 else "") + ("  (x)" if i % 4 else "")
             for i in range(17)]
    whole = " ".join(lines)
    tok = byte_level([whole]) if kind == "byte-level file" else train_tokenizer(kind, [whole], 200, 1)
    pieces = list(stream_pieces(lines, lowercase=False, piece_lines=4))
    assert [p.ends for p in pieces] == [False] * (len(pieces) - 1) + [True]
    assert [p.first for p in pieces] == [True] + [False] * (len(pieces) - 1)
    assert encoded(tok, pieces) == tok.encode(whole, add_special_tokens=False).ids
    cut = list(split_long([Piece(whole)], limit=40))  # one long document, cut at spaces
    assert len(cut) > 5 and all(len(p.text) <= 40 for p in cut) and " ".join(p.text for p in cut) == whole
    assert encoded(tok, cut) == tok.encode(whole, add_special_tokens=False).ids
    digest = StreamDigest()
    for p in pieces:
        digest.add(p)
    assert digest.hexdigest() == sha256_json([whole])


def test_the_stream_digest_is_the_json_digest_of_the_documents() -> None:
    docs = ["plain", 'quote " and \\ back', "ünïcode — ☃", "tab\there"]
    digest = StreamDigest()
    for d in docs:
        digest.add(Piece(d))
    assert digest.hexdigest() == sha256_json(docs)


def test_the_token_width_follows_the_vocabulary() -> None:
    assert token_dtype(65_536) == np.uint16 and token_dtype(65_537) == np.uint32


def test_a_corpus_folder_with_no_documents_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "pages"
    (folder / "train").mkdir(parents=True)
    (folder / "val").mkdir()
    for split in ("train", "val"):
        (folder / split / "empty.txt").write_text("\n\n")
    spec = ExperimentSpec.model_validate({
        "name": "none", "tracking": {"enabled": False}, "model": {"arch": "decoder_only"},
        "data": {"source": "text", "text": {"root": str(folder), "train": "train", "val": "val",
                                            "documents": "files"},
                 "tokenizer": {"kind": "char", "vocab_size": 50}, "cache_dir": str(tmp_path / "cache")}})
    with pytest.raises(DataError) as info:
        prepare_lm(spec)
    message = str(info.value)
    assert "\n" not in message and "data.text.train" in message and "no document" in message
    cache = tmp_path / "cache"
    assert not list(cache.rglob("*.part")) and not list(cache.rglob("*.building"))
    assert published(tmp_path / "cache") == []
    (folder / "val" / "empty.txt").unlink()
    (folder / "train" / "a.txt").write_text("one page\n")
    with pytest.raises(DataError, match=r"data.text.val: no document in .*val.*the folder holds no file"):
        prepare_lm(spec)


def test_a_shard_folder_from_another_tokenizer_is_refused_in_one_line(tmp_path: Path) -> None:
    spec = lm(corpus(tmp_path / "text"), tmp_path / "cache")
    prepare_lm(spec)
    (folder,) = [p for p in (tmp_path / "cache" / "shards").iterdir() if p.is_dir()]
    other = prepare_lm(lm(tmp_path / "text", tmp_path / "other",
                          tokenizer={"kind": "char", "vocab_size": 60}))
    (folder / "tokenizer.json").write_text(other.tokenizers.to_json())  # shards of one, tokenizer of another
    with pytest.raises(DataError) as info:
        prepare_lm(spec)
    assert "\n" not in str(info.value) and "written with another tokenizer" in str(info.value)


def test_preparing_prints_nothing_when_stderr_is_not_a_terminal(tmp_path: Path,
                                                                capfd: pytest.CaptureFixture[str]) -> None:
    prepare_lm(lm(corpus(tmp_path / "text"), tmp_path / "cache"))
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_gzipped_text_gives_the_same_shards(tmp_path: Path) -> None:
    plain = corpus(tmp_path / "text")
    zipped = tmp_path / "gz"
    zipped.mkdir()
    for split in ("train", "val", "test"):
        (zipped / f"{split}.txt.gz").write_bytes(gzip.compress((plain / f"{split}.txt").read_bytes()))
    a = prepare_lm(lm(plain, tmp_path / "c1"))
    b = prepare_lm(ExperimentSpec.model_validate({**lm(plain, tmp_path / "c2").model_dump(), "data": {
        **lm(plain, tmp_path / "c2").data.model_dump(), "text": {
            "root": str(zipped), "train": "train.txt.gz", "val": "val.txt.gz", "test": "test.txt.gz",
            "documents": "paragraphs"}}}))
    assert a.fingerprint == b.fingerprint
    assert [d.tolist() for d in a.documents["train"].docs] == [d.tolist() for d in b.documents["train"].docs]


def test_ablate_run_on_a_folder_without_documents_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from ablate.cli import main

    monkeypatch.chdir(tmp_path)
    for split in ("train", "val"):
        (tmp_path / "pages" / split).mkdir(parents=True)
    (tmp_path / "pages" / "train" / "blank.txt").write_text("\n")  # the one problem: no document to train on
    (tmp_path / "pages" / "val" / "page.txt").write_text("a page of text\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: none\nmodel: {arch: decoder_only}\ndata:\n  source: text\n"
                    "  text: {root: pages, train: train, val: val, documents: files}\n"
                    "  tokenizer: {kind: char, vocab_size: 50}\ntracking: {enabled: false}\n")
    assert main(["run", str(spec)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    # the data check every command runs finds it before any shard is built: one located line
    assert len(err) == 1 and "spec.yaml:5: data.text.train" in err[0] and "Traceback" not in err[0], err
    assert published(tmp_path / ".ablate_cache") == [] and not list(tmp_path.rglob("*.building"))
