"""``source: hub`` with ``streaming: true`` (a corpus too large to download whole, FineWeb-style): the rows
are read as ``datasets`` streams them and written to the same token shards as the downloaded dataset gives.
Tested on local files through the same ``datasets.load_dataset`` call (no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ablate.data.corpus import DataError
from ablate.data.lm_corpus import prepare_lm
from ablate.spec.experiment import ExperimentSpec

ROWS = {"train": [f"row {i} of the corpus says {'a b c d e'[: 1 + i % 9]}" for i in range(300)],
        "validation": ["held out text one", "held out text two"], "test": ["the last row"]}


def hub_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "fineweb-like"
    folder.mkdir()
    for split, texts in ROWS.items():
        with open(folder / f"{split}.jsonl", "w") as handle:
            for i, text in enumerate(texts):
                handle.write(json.dumps({"text": text, "id": i, "url": "local"}) + "\n")
            handle.write(json.dumps({"text": "   ", "id": -1, "url": "blank"}) + "\n")  # no text: skipped
    return folder


def spec(folder: Path, cache: Path, streaming: bool, field: str = "text") -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "stream", "tracking": {"enabled": False}, "model": {"arch": "decoder_only"},
        "data": {"source": "hub", "hub": {"name": str(folder), "field": field, "streaming": streaming},
                 "document_lines": 3, "tokenizer": {"kind": "bpe", "vocab_size": 80}, "max_len": 16,
                 "cache_dir": str(cache)}})


def test_a_streamed_hub_corpus_writes_the_shards_the_downloaded_one_gives(tmp_path: Path) -> None:
    folder = hub_folder(tmp_path)
    whole = prepare_lm(spec(folder, tmp_path / "c1", streaming=False))
    streamed = prepare_lm(spec(folder, tmp_path / "c2", streaming=True))
    for split in ("train", "val", "test"):
        assert [d.tolist() for d in streamed.documents[split].docs] == \
            [d.tolist() for d in whole.documents[split].docs]
        assert list(streamed.documents[split].texts or []) == list(whole.documents[split].texts or [])
    assert len(streamed.documents["train"].docs) == 100  # 300 rows, 3 to a document
    assert streamed.fingerprint == whole.fingerprint  # the same documents and tokenizer
    assert not (tmp_path / "c2" / "hf").exists() or not list((tmp_path / "c2" / "hf").rglob("*.arrow"))
    again = prepare_lm(spec(folder, tmp_path / "c2", streaming=True))
    assert again.cached


def test_a_streamed_split_without_the_column_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        prepare_lm(spec(hub_folder(tmp_path), tmp_path / "c", streaming=True, field="content"))
    message = str(info.value)
    assert "\n" not in message and "data.hub.field" in message and "'content'" in message


def test_streaming_needs_a_language_model(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="streaming reads a language model's corpus"):
        ExperimentSpec.model_validate({"name": "mt", "tracking": {"enabled": False},
                                       "data": {"source": "hub", "hub": {"name": "x", "streaming": True}}})
