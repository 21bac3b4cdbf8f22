"""prepare_data on every source (synthetic, files in four shapes, hub on local folders), its errors,
preprocessing options and caches; TokenBatcher's budget, coverage, determinism, DDP split and padding."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # no network: datasets only ever reads local files

import numpy as np
import pytest

import ablate.data.tokenize as tk
from ablate.data.prepare import DataError, PreparedData, Split, TokenBatcher, prepare_data
from ablate.errors import AblateError
from ablate.spec.experiment import DataSpec, ExperimentSpec

DE = ["Ein Hund läuft.", "Zwei Kinder spielen.", "Eine Frau liest ein Buch.", "Der Mann kocht Suppe.",
      "Ein Vogel singt laut.", "Die Katze schläft."]
EN = ["A dog runs.", "Two children play.", "A woman reads a book.", "The man cooks soup.",
      "A bird sings loudly.", "The cat sleeps."]


def write(path: Path, lines: list[str] | str | bytes) -> Path:
    data = lines if isinstance(lines, bytes) else (
        lines if isinstance(lines, str) else "".join(f"{line}\n" for line in lines)).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def text_corpus(root: Path, gz: bool = True) -> dict[str, Any]:
    suffix = ".gz" if gz else ""
    write(root / f"train.de{suffix}", DE * 4)
    write(root / f"train.en{suffix}", EN * 4)
    write(root / "val.de", DE[:3])
    write(root / "val.en", EN[:3])
    write(root / "test.de", DE[3:])
    write(root / "test.en", EN[3:])
    return {"format": "text", "root": str(root),
            "train": {"src": f"train.de{suffix}", "tgt": f"train.en{suffix}"},
            "val": {"src": "val.de", "tgt": "val.en"}, "test": {"src": "test.de", "tgt": "test.en"}}


def files_spec(files: dict[str, Any], cache: Path, **extra: Any) -> DataSpec:
    tokenizer = extra.pop("tokenizer", {"kind": "wordlevel", "vocab_size": 200})
    return DataSpec(source="files", files=files, src_lang="de", tgt_lang="en", cache_dir=str(cache),
                    tokenizer=tokenizer, **extra)


def pairs(split: Split) -> list[tuple[str, str]]:
    return list(zip(split.src_text, split.tgt_text, strict=True))


def count_training(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = tk.train_tokenizer

    def counting(kind: str, texts: Any, vocab_size: int, min_freq: int) -> Any:
        calls.append(kind)
        return real(kind, texts, vocab_size, min_freq)

    monkeypatch.setattr(tk, "train_tokenizer", counting)
    return calls


# ------------------------------------------------------------------ synthetic
def test_synthetic_default_is_deterministic_and_writes_nothing(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = {"synthetic": {"task": "reverse", "train_size": 300, "val_size": 40, "test_size": 40}}
    a = prepare_data(ExperimentSpec(name="t", seed=1, data=data))
    b = prepare_data(ExperimentSpec(name="t", seed=1, data=data))
    c = prepare_data(ExperimentSpec(name="t", seed=2, data=data))
    assert list(tmp_path.iterdir()) == []  # no download, no cache file
    assert not a.is_text and a.name == "synthetic-reverse"
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert a.splits["train"].src_ids == b.splits["train"].src_ids
    assert {k: len(v) for k, v in a.splits.items()} == {"train": 300, "val": 40, "test": 40}
    tok = a.tokenizers
    assert tok.src_vocab_size == tok.tgt_vocab_size == 4 + 20
    for split in a.splits.values():
        for i in range(len(split)):
            assert split.tgt_ids[i] == split.src_ids[i][::-1]  # the task, in ids
            assert tok.model_src(split.src_text[i]) == split.src_ids[i]
            assert tok.decode_tgt(split.tgt_ids[i]) == split.tgt_text[i]


def test_reverse_source_reverses_token_order() -> None:
    base = {"synthetic": {"task": "copy", "train_size": 50, "val_size": 10, "test_size": 10}}
    plain = prepare_data(DataSpec(**base), seed=0)
    flipped = prepare_data(DataSpec(**base, reverse_source=True), seed=0)
    for name in ("train", "val"):
        p, f = plain.splits[name], flipped.splits[name]
        assert f.src_text == p.src_text and f.tgt_ids == p.tgt_ids  # text and target untouched
        assert f.src_ids == [ids[::-1] for ids in p.src_ids]
        assert f.src_ids[0] == flipped.tokenizers.model_src(f.src_text[0])  # as user text
        assert p.src_ids[0] == flipped.tokenizers.encode_src(f.src_text[0])  # encode_src: no reversal
    assert plain.fingerprint != flipped.fingerprint


# ------------------------------------------------------------------ files
def test_text_files_gz_and_cache_hit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_training(monkeypatch)
    spec = files_spec(text_corpus(tmp_path / "corpus"), tmp_path / "cache")
    first = prepare_data(spec)
    assert calls == ["wordlevel"] and not first.cached and first.is_text
    assert first.name == "corpus.de-en"
    assert pairs(first.splits["train"]) == list(zip(DE * 4, EN * 4, strict=True))
    assert pairs(first.splits["val"]) == list(zip(DE[:3], EN[:3], strict=True))
    assert pairs(first.splits["test"]) == list(zip(DE[3:], EN[3:], strict=True))
    tok = first.tokenizers
    assert first.splits["train"].tgt_ids[0] == tok.encode_tgt("A dog runs.")
    assert tok.decode_tgt(first.splits["train"].tgt_ids[0]) == "A dog runs ."

    second = prepare_data(spec)
    assert second.cached and calls == ["wordlevel"]  # nothing retrained, nothing re-read through datasets
    assert second.fingerprint == first.fingerprint
    assert second.splits["train"] == first.splits["train"] and second.splits["test"] == first.splits["test"]
    assert second.tokenizers.encode_src("Ein Hund") == tok.encode_src("Ein Hund")

    # another max_len reuses the trained tokenizer but not the encoded splits
    third = prepare_data(spec.model_copy(update={"max_len": 6}))
    assert not third.cached and calls == ["wordlevel"]
    assert third.fingerprint != first.fingerprint
    # new content: new digest, retrained
    write(tmp_path / "corpus" / "val.en", ["A dog runs!", *EN[1:3]])
    fourth = prepare_data(spec)
    assert not fourth.cached and calls == ["wordlevel", "wordlevel"]
    assert fourth.fingerprint != first.fingerprint


def test_env_expansion_in_root_and_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = text_corpus(tmp_path / "corpus", gz=False)
    monkeypatch.setenv("ABLATE_TEST_DATA", str(tmp_path))
    monkeypatch.delenv("ABLATE_TEST_UNSET", raising=False)
    files["root"] = "${ABLATE_TEST_DATA}/corpus"
    files["train"] = {"src": "${ABLATE_TEST_UNSET:-train}.de", "tgt": "train.en"}
    got = prepare_data(files_spec(files, tmp_path / "cache"))
    assert len(got.splits["train"]) == 24
    files["root"] = "${ABLATE_TEST_UNSET}/corpus"
    unset = r"data.files.root: environment variable ABLATE_TEST_UNSET is not set"
    with pytest.raises(DataError, match=unset):
        prepare_data(files_spec(files, tmp_path / "cache"))


def test_windows_line_ends_and_bom_are_tolerated_but_a_lone_cr_is_not(tmp_path: Path) -> None:
    files = text_corpus(tmp_path / "c", gz=False)
    write(tmp_path / "c" / "val.de", ("\ufeff" + "\r\n".join(DE[:3]) + "\r\n").encode())
    got = prepare_data(files_spec(files, tmp_path / "cache"))
    assert got.splits["val"].src_text == DE[:3]
    write(tmp_path / "c" / "val.de", [DE[0], "Zwei\rKinder.", DE[2]])
    with pytest.raises(DataError, match=r"val.de:2: carriage return \(\\r\) inside the line"):
        prepare_data(files_spec(files, tmp_path / "cache"))


def test_tsv_and_jsonl_shapes_load_the_same_pairs(tmp_path: Path) -> None:
    expected = list(zip(DE, EN, strict=True))
    rows = [f"{d}\t{e}" for d, e in expected]
    shapes = {
        "tsv": (["de\ten", *rows], "tsv"),  # header by language code
        "tsv_plain": (rows, "tsv"),
        "jsonl_srctgt": ([json.dumps({"src": d, "tgt": e}) for d, e in expected], "jsonl"),
        "jsonl_langs": ([json.dumps({"de": d, "en": e, "id": i}) for i, (d, e) in enumerate(expected)],
                        "jsonl"),
        "jsonl_translation": ([json.dumps({"translation": {"de": d, "en": e}}) for d, e in expected],
                              "jsonl"),
    }
    for name, (lines, fmt) in shapes.items():
        suffix = ".tsv.gz" if name == "tsv" else ".tsv" if fmt == "tsv" else ".jsonl"
        path = write(tmp_path / name / f"all{suffix}", lines)
        files = {"format": fmt, "train": {"path": str(path)}, "val": {"path": str(path)}}
        got = prepare_data(files_spec(files, tmp_path / "cache"))
        assert pairs(got.splits["train"]) == expected, name
        assert "test" not in got.splits  # no test file given: no test split


@pytest.mark.parametrize("case", ["missing", "counts", "empty_line", "utf8", "utf8_gz", "empty_split",
                                  "tsv_fields", "jsonl_bad", "jsonl_keys", "format", "max_len"])
def test_bad_data_errors_name_the_place(tmp_path: Path, case: str) -> None:
    root = tmp_path / "c"
    files = text_corpus(root, gz=False)
    extra: dict[str, Any] = {}
    expected: str
    if case == "missing":
        files["val"]["tgt"] = "nope.en"
        expected = rf"data.files.val.tgt: file not found: {root}/nope.en \(resolved against data.files.root"
    elif case == "counts":
        write(root / "val.en", EN[:2])
        expected = rf"val split: {root}/val.de has 3 lines but {root}/val.en has 2"
    elif case == "empty_line":
        write(root / "train.en", [*EN[:2], "  ", *EN[3:]])
        expected = rf"{root}/train.en:3: empty line"
    elif case == "utf8":
        write(root / "test.de", "Ein Hund.\nK\xe4se gut.\n".encode("latin-1"))
        expected = rf"{root}/test.de:2: not valid UTF-8 at byte 11 \(column 2"
    elif case == "utf8_gz":
        write(root / "bad.de.gz", b"ok\n\xff\xfe\n")
        files["test"]["src"] = "bad.de.gz"
        expected = rf"{root}/bad.de.gz:2: not valid UTF-8 at decompressed byte 3"
    elif case == "empty_split":
        write(root / "val.de", "")
        expected = rf"{root}/val.de: the val split is empty"
    elif case == "tsv_fields":
        path = write(root / "x.tsv", ["a\tb", "c\td\te"])
        files = {"format": "tsv", "train": {"path": str(path)}, "val": {"path": str(path)}}
        expected = rf"{path}:2: expected 2 tab-separated fields \(source<TAB>target\), found 3"
    elif case == "jsonl_bad":
        path = write(root / "x.jsonl", ['{"src": "a", "tgt": "b"}', '{"src": "a", '])
        files = {"format": "jsonl", "train": {"path": str(path)}, "val": {"path": str(path)}}
        expected = rf"{path}:2: not valid JSON"
    elif case == "jsonl_keys":
        path = write(root / "x.jsonl", ['{"src": "a", "tgt": "b"}', '{"source": "a", "target": "b"}'])
        files = {"format": "jsonl", "train": {"path": str(path)}, "val": {"path": str(path)}}
        expected = rf"{path}:2: expected .* keys: source, target"
    elif case == "format":
        files["format"] = "tsv"
        expected = r"data.files.train: format 'tsv' needs path"
    else:
        extra = {"max_len": 2}
        expected = r"the train split is empty after the max_len filter: no pair of 24 fits data.max_len 2"
    with pytest.raises(DataError, match=expected) as info:
        prepare_data(files_spec(files, tmp_path / "cache", **extra))
    assert "\n" not in str(info.value) and isinstance(info.value, AblateError)


def test_preprocessing_lowercase_max_len_and_max_train_examples(tmp_path: Path) -> None:
    files = text_corpus(tmp_path / "c")
    long_de = "ein sehr langer satz mit vielen wörtern hier"
    long_en = "a very long sentence with many words here"
    write(tmp_path / "c" / "train.de.gz", [*DE, long_de])
    write(tmp_path / "c" / "train.en.gz", [*EN, long_en])
    write(tmp_path / "c" / "val.de", [long_de])
    write(tmp_path / "c" / "val.en", [long_en])
    got = prepare_data(files_spec(files, tmp_path / "cache", lowercase=True, max_len=8))
    train = got.splits["train"]
    assert all(t == t.lower() for t in train.src_text + train.tgt_text)
    assert got.tokenizers.encode_src("EIN HUND") == got.tokenizers.encode_src("ein hund")
    assert long_de not in train.src_text and got.stats["train_filtered"] == 1  # 8 words + bos/eos > 8
    assert all(len(ids) + 2 <= 8 for ids in train.src_ids + train.tgt_ids)
    val = got.splits["val"]  # never filtered; ids truncated to fit, text kept for scoring
    assert val.src_text == [long_de] and len(val.src_ids[0]) == 6 and got.stats["val_truncated"] == 1
    few = prepare_data(files_spec(files, tmp_path / "cache", lowercase=True, max_train_examples=3))
    assert few.splits["train"].tgt_text == [e.lower() for e in EN[:3]]


# ------------------------------------------------------------------ hub (local folders stand in for the Hub)
def hub_folder(root: Path, flat: bool) -> Path:
    def row(d: str, e: str) -> str:
        return json.dumps({"de": d, "en": e} if flat else {"translation": {"de": d, "en": e}, "id": "x"})

    for split, (de, en) in {"train": (DE * 3, EN * 3), "validation": (DE[:2], EN[:2]),
                            "test": (DE[2:], EN[2:])}.items():
        write(root / f"{split}.jsonl", [row(d, e) for d, e in zip(de, en, strict=True)])
    return root


@pytest.mark.parametrize("flat", [False, True], ids=["translation_dict", "flat_columns"])
def test_hub_loads_translation_dict_and_flat_columns(tmp_path: Path, flat: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_training(monkeypatch)
    folder = hub_folder(tmp_path / ("multi30k" if flat else "opus"), flat)
    spec = DataSpec(source="hub", hub={"name": str(folder)}, src_lang="de", tgt_lang="en",
                    cache_dir=str(tmp_path / "cache"), tokenizer={"kind": "bpe", "vocab_size": 120})
    got = prepare_data(spec)
    assert got.is_text and got.name == f"{folder.name}.de-en" and got.source == f"hf://{folder}"
    assert pairs(got.splits["train"]) == list(zip(DE * 3, EN * 3, strict=True))
    assert pairs(got.splits["val"]) == list(zip(DE[:2], EN[:2], strict=True))
    assert pairs(got.splits["test"]) == list(zip(DE[2:], EN[2:], strict=True))
    assert got.tokenizers.decode_tgt(got.splits["test"].tgt_ids[0]) == EN[2]  # BPE detokenizes exactly
    again = prepare_data(spec)
    assert again.cached and again.fingerprint == got.fingerprint and calls == ["bpe"]
    reversed_pair = spec.model_copy(update={"src_lang": "en", "tgt_lang": "de"})
    assert prepare_data(reversed_pair).splits["train"].src_text[0] == EN[0]


def test_hub_slices_and_errors(tmp_path: Path) -> None:
    folder = hub_folder(tmp_path / "opus", flat=False)
    base = {"source": "hub", "src_lang": "de", "tgt_lang": "en", "cache_dir": str(tmp_path / "cache"),
            "tokenizer": {"kind": "wordlevel"}}
    sliced = prepare_data(DataSpec(**base, hub={"name": str(folder), "train_split": "train[:-6]",
                                                "val_split": "train[-6:]", "test_split": None}))
    assert len(sliced.splits["train"]) == 12 and len(sliced.splits["val"]) == 6
    assert "test" not in sliced.splits  # test_split: null
    with pytest.raises(DataError, match=r"column 'translation' has languages de, en, not fr"):
        prepare_data(DataSpec(**{**base, "tgt_lang": "fr"}, hub={"name": str(folder)}))
    with pytest.raises(DataError, match=r"has no split 'dev'; splits: train, validation, test"):
        prepare_data(DataSpec(**base, hub={"name": str(folder), "val_split": "dev"}))
    with pytest.raises(DataError, match=r"data.hub: cannot load dataset"):
        prepare_data(DataSpec(**base, hub={"name": str(tmp_path / "nowhere")}))
    (folder / "test.jsonl").unlink()  # like opus_books: the default 'test' split may be absent ...
    assert set(prepare_data(DataSpec(**base, hub={"name": str(folder)})).splits) == {"train", "val"}
    with pytest.raises(DataError, match=r"has no split 'test2017'"):  # ... a test split named by the user not
        prepare_data(DataSpec(**base, hub={"name": str(folder), "test_split": "test2017"}))


# ------------------------------------------------------------------ batching
def synthetic_split(n: int = 600, seed: int = 0) -> Split:
    data = DataSpec(synthetic={"task": "sort", "train_size": n, "val_size": 10, "test_size": 10, "min_len": 1,
                               "max_len": 30, "vocab_size": 50}, max_len=40)
    return prepare_data(data, seed=seed).splits["train"]


def test_batches_respect_budget_and_cover_each_example_once() -> None:
    split = synthetic_split()
    batcher = TokenBatcher(split, batch_tokens=200, seed=3)
    for epoch in range(3):
        batches = batcher.epoch_batches(epoch)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(len(split)))  # every example exactly once
        for b in batches:
            s = max(len(split.src_ids[i]) for i in b)
            t = max(len(split.tgt_ids[i]) for i in b) + 1
            assert len(b) * max(s, t) <= 200 or len(b) == 1
        assert np.mean([len(b) for b in batches]) > 5  # the budget is used, not one example per batch
    assert batcher.epoch_batches(0) != batcher.epoch_batches(1)  # reshuffled each epoch
    assert batcher.padding_fraction(0) < 0.15


def test_batches_are_deterministic_resumable_and_model_independent() -> None:
    split = synthetic_split()
    a = TokenBatcher(split, batch_tokens=256, seed=5)
    b = TokenBatcher(split, batch_tokens=256, seed=5)
    assert a.epoch_batches(2) == b.epoch_batches(2)
    assert TokenBatcher(split, 256, seed=6).epoch_batches(2) != a.epoch_batches(2)
    # resume at (epoch 2, batch 4) in a fresh process == continuing the original one
    resumed = [batch.indices for batch in TokenBatcher(split, 256, seed=5).iter_epoch(2, start=4)]
    assert resumed == a.epoch_batches(2)[4:]
    # only lengths matter: other token ids with the same lengths give the same plan
    shifted = Split([[4] * len(s) for s in split.src_ids], [[5] * len(t) for t in split.tgt_ids],
                    split.src_text, split.tgt_text)
    assert TokenBatcher(shifted, 256, seed=5).epoch_batches(2) == a.epoch_batches(2)
    ordered = TokenBatcher(split, 256, seed=5, shuffle=False)
    assert ordered.epoch_batches(0) == ordered.epoch_batches(7)  # evaluation order is fixed
    costs = [max(max(len(split.src_ids[i]), len(split.tgt_ids[i]) + 1) for i in bt)
             for bt in ordered.epoch_batches(0)]
    assert costs == sorted(costs)  # sorted by length


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_rank_split_is_disjoint_covering_and_even(world_size: int) -> None:
    split = synthetic_split(n=301)
    per_rank = [TokenBatcher(split, 300, seed=1, rank=r, world_size=world_size).epoch_batches(4)
                for r in range(world_size)]
    assert len({len(batches) for batches in per_rank}) == 1  # equal step counts: no DDP hang
    seen = [i for batches in per_rank for b in batches for i in b]
    assert sorted(seen) == list(range(301))  # disjoint and covering
    single = TokenBatcher(split, 300, seed=1).all_batches(4)
    assert sum(len(b) for b in single) == 301
    with pytest.raises(ValueError, match="rank 2 is outside world_size 2"):
        TokenBatcher(split, 300, seed=1, rank=2, world_size=2)


def test_collate_shapes_and_special_tokens() -> None:
    split = Split([[5, 6, 7], [8]], [[9, 10], [11, 12, 13, 14]], ["a", "b"], ["c", "d"])
    batch = TokenBatcher(split, 100, seed=0).collate([0, 1])
    assert batch.src.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch.tgt_in.tolist() == [[1, 9, 10, 0, 0], [1, 11, 12, 13, 14]]
    assert batch.tgt_out.tolist() == [[9, 10, 2, 0, 0], [11, 12, 13, 14, 2]]
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == __import__("torch").long
    assert (batch.n_src_tokens, batch.n_tgt_tokens, batch.n_padded) == (4, 8, 2 + 2)
    assert batch.n_padded == int((batch.src == 0).sum() + (batch.tgt_in == 0).sum())


# ------------------------------------------------------------------ the real corpus
def _multi30k_dir() -> Path:
    """ABLATE_DATA_DIR when set (as the local Multi30k spec reads it), else ../shared/data/multi30k beside the
    repository root: where CI clones the repository, next to shared/."""
    env = os.environ.get("ABLATE_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "multi30k"


MULTI30K = _multi30k_dir()


@pytest.mark.skipif(not (MULTI30K / "train.de.gz").is_file(),
                    reason=f"Multi30k raw files not found at {MULTI30K} (set ABLATE_DATA_DIR, or put shared/ "
                           "beside the repository)")
@pytest.mark.slow
def test_multi30k_padding_below_ten_percent(tmp_path: Path) -> None:
    files = {"root": str(MULTI30K), "train": {"src": "train.de.gz", "tgt": "train.en.gz"},
             "val": {"src": "val.de.gz", "tgt": "val.en.gz"},
             "test": {"src": "test_2016_flickr.de.gz", "tgt": "test_2016_flickr.en.gz"}}
    spec = files_spec(files, tmp_path / "cache", tokenizer={"kind": "bpe", "vocab_size": 8000, "joint": True},
                      batch_tokens=4096)
    data: PreparedData = prepare_data(spec)
    assert not data.cached
    cached = prepare_data(spec)
    # The second call reads the cache (behaviour, not a wall time): same fingerprint, same token ids.
    assert cached.cached and cached.fingerprint == data.fingerprint
    for name, split in data.splits.items():
        assert cached.splits[name].src_ids == split.src_ids and cached.splits[name].tgt_ids == split.tgt_ids
    assert {k: len(v) for k, v in data.splits.items()} == {"train": 29000, "val": 1014, "test": 1000}
    assert data.tokenizers.src_vocab_size == 8000
    assert data.tokenizers.decode_tgt(data.splits["val"].tgt_ids[0]) == data.splits["val"].tgt_text[0]
    batcher = TokenBatcher(data.splits["train"], spec.batch_tokens, seed=0)
    fractions = [batcher.padding_fraction(epoch) for epoch in range(3)]
    print(f"\nMulti30k de-en, BPE 8000 joint, batch_tokens 4096: padding {fractions[0]:.2%} "
          f"(epochs 0-2: {', '.join(f'{f:.2%}' for f in fractions)}), {batcher.num_batches()} batches")
    assert max(fractions) < 0.10
