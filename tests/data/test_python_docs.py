"""The long-document corpus from Debian's Python documentation (ablate/data/python_docs.py), prepared from
a small package tree the tests write themselves (the real package is not needed), then read back by the
language model's own loader (``data.source: text``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ablate.data.corpus import DataError
from ablate.data.lm_corpus import prepare_lm
from ablate.data.python_docs import LICENCE_MARK, clean, find_package, main, prepare, split_of
from ablate.spec.experiment import ExperimentSpec

WORDS = "the heap queue keeps its smallest item first so a pop returns it in logarithmic time".split()


def page(title: str, words: int) -> str:
    """A reST page: a title with its over- and underline, a directive, and ``words`` words of prose."""
    body = [WORDS[i % len(WORDS)] for i in range(words)]
    first, second = " ".join(body[: words // 2]), " ".join(body[words // 2:])
    return (f"{'=' * len(title)}\n{title}\n{'=' * len(title)}\n\n.. function:: heappush(heap, item)\n\n"
            f"   {first}\n\n{second}\n\n------------\n")


def package(tmp_path: Path, pages: dict[str, int], licence: str = LICENCE_MARK) -> Path:
    """A ``/usr/share/doc`` of one python3.X-doc package: its sources and its copyright file."""
    doc = tmp_path / "doc"
    sources = doc / "python3.11" / "html" / "_sources"
    for name, words in pages.items():
        path = sources / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page(name, words), encoding="utf-8")
    (doc / "python3.11-doc").mkdir(parents=True)
    (doc / "python3.11-doc" / "copyright").write_text(f"License:\n\n{licence}\n", encoding="utf-8")
    return doc


def lines(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()


def test_clean_drops_heading_adornments_and_joins_lines_but_keeps_markup() -> None:
    raw = "=====\nTitle\n=====\n\nSee :func:`heapq.heappush`   and\n   ``heap[0]``.\n\n~~~~~~\nA - B\n"
    assert clean(raw) == "Title See :func:`heapq.heappush` and ``heap[0]``. A - B"


def test_a_document_keeps_its_split_when_other_documents_come_or_go(tmp_path: Path) -> None:
    """The split is a hash of the page's own path: a release that adds pages moves none of the old ones."""
    old = {f"library/m{i}.rst.txt": 200 for i in range(40)}
    new = {**old, **{f"library/new{i}.rst.txt": 200 for i in range(40)}}
    splits = []
    for label, pages in (("old", old), ("new", new)):
        doc = package(tmp_path / label, pages)
        prepare(tmp_path / label / "out", doc / "python3.11" / "html" / "_sources",
                doc / "python3.11-doc" / "copyright", min_words=100, val_percent=10, test_percent=10)
        manifest = json.loads((tmp_path / label / "out" / "manifest.json").read_text())
        splits.append({d["name"]: d["split"] for d in manifest["documents"]})
    assert {n: splits[1][n] for n in old} == splits[0]
    assert {"train", "val", "test"} <= set(splits[1].values())


def test_prepare_writes_whole_documents_split_by_document(tmp_path: Path) -> None:
    names = {f"library/mod{i}.rst.txt": 300 + 10 * i for i in range(30)}
    names["index.rst.txt"] = 20  # too short to be a long document
    doc = package(tmp_path, names)
    out = tmp_path / "corpus"
    counts = prepare(out, doc / "python3.11" / "html" / "_sources", doc / "python3.11-doc" / "copyright",
                     min_words=100, max_words=10_000, val_percent=20, test_percent=20)

    manifest = json.loads((out / "manifest.json").read_text())
    by_split: dict[str, list[str]] = {}
    for entry in manifest["documents"]:
        by_split.setdefault(entry["split"], []).append(entry["name"])
    assert sorted(n for part in by_split.values() for n in part) == sorted(set(names) - {"index.rst.txt"})
    for split, part in by_split.items():
        assert all(split_of(n, 20, 20) == split for n in part)
        written = lines(out / f"{split}.txt.gz")
        # one line a page, in the manifest's order, each the whole page cleaned (its words all there)
        assert [len(t.split()) for t in written] == [names[n] + 5 for n in part]  # + title, directive
        assert counts[split]["documents"] == len(part)
    assert LICENCE_MARK in (out / "COPYRIGHT").read_text()


def test_prepared_corpus_is_read_by_the_language_model_loader(tmp_path: Path) -> None:
    doc = package(tmp_path, {f"howto/h{i}.rst.txt": 600 for i in range(30)})
    out = tmp_path / "corpus"
    counts = prepare(out, doc / "python3.11" / "html" / "_sources", doc / "python3.11-doc" / "copyright",
                     min_words=100, val_percent=20, test_percent=20)
    spec = ExperimentSpec.model_validate({
        "name": "docs", "tracking": {"enabled": False}, "model": {"arch": "decoder_only"},
        "data": {"source": "text", "document_lines": 1, "cache_dir": str(tmp_path / "cache"),
                 "text": {"root": str(out), "train": "train.txt.gz", "val": "val.txt.gz",
                          "test": "test.txt.gz"},
                 "tokenizer": {"kind": "char", "vocab_size": 100}}})
    data = prepare_lm(spec)
    for split in ("train", "val", "test"):
        part = data.documents[split]
        assert len(part.docs) == counts[split]["documents"]
        written = lines(out / f"{split}.txt.gz")
        assert list(part.texts or []) == written
        assert [data.tokenizers.decode_tgt(d) for d in part.docs] == written
        assert min(len(d) for d in part.docs) > 2000  # thousands of tokens a document (here characters)


def test_prepare_refuses_text_whose_copyright_file_grants_no_known_licence(tmp_path: Path) -> None:
    doc = package(tmp_path, {"a.rst.txt": 200}, licence="All rights reserved.")
    out = tmp_path / "corpus"
    with pytest.raises(DataError, match="does not grant the Python Software Foundation License"):
        prepare(out, doc / "python3.11" / "html" / "_sources", doc / "python3.11-doc" / "copyright",
                min_words=1)
    assert not out.exists()  # nothing half-written


def test_without_the_package_the_command_says_how_to_get_it_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DataError, match="apt-get install python3.11-doc"):
        find_package(tmp_path)
    assert main([str(tmp_path / "out"), "--sources", str(tmp_path / "none"),
                 "--copyright", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")


def test_the_newest_installed_package_is_found(tmp_path: Path) -> None:
    doc = package(tmp_path, {"a.rst.txt": 10})
    newer = doc / "python3.13" / "html" / "_sources"
    newer.mkdir(parents=True)
    (doc / "python3.13-doc").mkdir()
    (doc / "python3.13-doc" / "copyright").write_text(LICENCE_MARK)
    (doc / "python3.9-doc").mkdir()  # a copyright file without its sources is no package
    (doc / "python3.9-doc" / "copyright").write_text(LICENCE_MARK)
    assert find_package(doc) == (newer, doc / "python3.13-doc" / "copyright")
