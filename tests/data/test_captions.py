"""The LM quickstart's corpus, generated (ablate/data/captions.py): the same seed gives the same captions,
the splits differ, every word is in the fixed vocabulary, the verb agrees with its subject, and the
committed LM quickstart trains on it with no file on disk."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ablate.data import captions
from ablate.data.lm_corpus import prepare_lm
from ablate.spec.load import load_spec

REPO = Path(__file__).resolve().parents[2]
SIZES = {"train": 2000, "val": 200, "test": 200}


def test_the_same_seed_gives_the_same_captions_and_the_splits_differ() -> None:
    first, again = captions.generate(SIZES, 0), captions.generate(SIZES, 0)
    other = captions.generate(SIZES, 1)
    assert first == again and first != other
    assert {k: len(v) for k, v in first.items()} == SIZES
    assert first["train"][:50] != first["val"][:50]


def test_every_word_is_in_the_vocabulary_and_the_verb_agrees_with_its_subject() -> None:
    vocab = set(captions.vocabulary())
    lines = captions.generate(SIZES, 3)["train"]
    assert {w for line in lines for w in line.split()} <= vocab
    plural = tuple(captions.PEOPLE_MANY + captions.DOGS_MANY)
    for line in lines:
        verb = re.search(r"\b(is|are)\b", line)
        assert verb is not None and line.endswith(" .")
        assert verb.group(1) == ("are" if line.startswith(plural) else "is"), line
    dogs = [line for line in lines if line.startswith(captions.DOGS_ONE + captions.DOGS_MANY)]
    assert dogs and not any(act in line for line in dogs for act in ("reading a book", "playing a guitar"))


def test_the_lm_quickstart_needs_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh clone has no ../shared/data: the LM quickstart used to need Multi30k's English captions."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ABLATE_DATA_DIR", raising=False)
    spec = load_spec(REPO / "experiments" / "lm-quickstart.yaml")
    assert spec.data.source == "synthetic" and spec.model.arch == "decoder_only"
    data = prepare_lm(spec, spec.seed)
    val = data.documents["val"]
    assert len(val.docs) == 400 // spec.data.document_lines and val.texts[0].count(" . ") >= 7
    tok = data.tokenizers
    assert tok.decode_tgt(tok.encode_tgt("a man in a blue shirt")) == "a man in a blue shirt"
    assert list(tmp_path.iterdir()) == []  # generated in memory, nothing written
