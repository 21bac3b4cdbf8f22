"""The Linux kernel corpora (ablate/data/kernel_corpora.py), prepared from a small documentation tree and a
small source tarball the tests write themselves (the real packages are not needed), then read back by the
language model's loader into token shards."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from ablate.data.corpus import DataError
from ablate.data.kernel_corpora import main, prepare_docs, prepare_source
from ablate.data.lm_corpus import prepare_lm
from ablate.data.python_docs import split_of
from ablate.spec.experiment import ExperimentSpec

COPYRIGHT = ("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
             "Upstream-Name: Linux kernel\n\nFiles: *\nCopyright: 1991-2012 Linus Torvalds and many others\n"
             "License: GPL-2\n\nFiles: debian/*\nCopyright: Debian kernel team\nLicense: GPL-2\n")
C_FILE = ("// SPDX-License-Identifier: GPL-2.0\n#include <linux/mm.h>\n\nstatic int f{i}(int x)\n{{\n"
          "\treturn x + {i};\n}}\n")


def lines(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()


def copyright_file(tmp_path: Path, text: str = COPYRIGHT) -> Path:
    path = tmp_path / "copyright"
    path.write_text(text)
    return path


def doc_tree(tmp_path: Path, pages: int) -> Path:
    sources = tmp_path / "_sources"
    for i in range(pages):
        page = sources / f"sub{i % 3}" / f"page{i}.rst.txt"
        page.parent.mkdir(parents=True, exist_ok=True)
        words = " ".join(f"word{j}" for j in range(120 + i))
        page.write_text(f"=====\nTitle {i}\n=====\n\n{words}\n\n.. code-block:: c\n\n   int x;\n")
    (sources / "index.rst.txt").write_text("Index\n=====\n\n.. toctree::\n")  # a stub: under 100 words
    translated = sources / "translations" / "zh_CN" / "page0.rst.txt"  # another language's page0
    translated.parent.mkdir(parents=True)
    translated.write_text("内存 " * 200)
    return sources


def tarball(tmp_path: Path, files: int) -> Path:
    path = tmp_path / "linux-source-6.1.tar.xz"
    with tarfile.open(path, "w:xz") as archive:
        members = {f"linux-source-6.1/drivers/d{i}.{'c' if i % 2 else 'h'}": C_FILE.format(i=i)
                   for i in range(files)}
        members["linux-source-6.1/Makefile"] = "obj-y += d1.o\n"  # not C: left out
        members["linux-source-6.1/drivers/empty.c"] = "\n\n"  # no text: left out
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_docs_one_page_a_document_split_by_page_with_the_seed(tmp_path: Path) -> None:
    out = tmp_path / "kdocs"
    counts = prepare_docs(out, doc_tree(tmp_path, 60), copyright_file(tmp_path), val_percent=10,
                          test_percent=10, seed=3)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["licence"] == "GPL-2.0-only" and manifest["seed"] == 3
    names = [d["name"] for d in manifest["documents"]]
    assert len(names) == 60 and "index.rst.txt" not in names  # the stub under 100 words is left out
    assert not any(n.startswith("translations/") for n in names)  # and the other languages' pages
    for split in ("train", "val", "test"):
        part = [d for d in manifest["documents"] if d["split"] == split]
        assert all(split_of(d["name"], 10, 10, seed=3) == split for d in part)
        written = lines(out / f"{split}.txt.gz")
        assert len(written) == counts[split]["documents"] == len(part)
        assert all(t.startswith("Title ") and "\n" not in t and "=====" not in t for t in written)
    assert "License: GPL-2" in (out / "COPYRIGHT").read_text()
    again = tmp_path / "again"
    prepare_docs(again, tmp_path / "_sources", copyright_file(tmp_path), val_percent=10, test_percent=10,
                 seed=3)
    assert (again / "train.txt.gz").read_bytes() == (out / "train.txt.gz").read_bytes()  # byte for byte


def test_source_one_c_file_a_document_from_the_tarball(tmp_path: Path) -> None:
    out = tmp_path / "ksrc"
    counts = prepare_source(out, tarball(tmp_path, 50), copyright_file(tmp_path), val_percent=10,
                            test_percent=10)
    manifest = json.loads((out / "manifest.json").read_text())
    names = {d["name"] for d in manifest["documents"]}
    assert names == {f"drivers/d{i}.{'c' if i % 2 else 'h'}" for i in range(50)}
    first = next(t for split in ("train", "val", "test") for t in lines(out / f"{split}.txt.gz")
                 if "return x + 7;" in t)
    assert first == "// SPDX-License-Identifier: GPL-2.0 #include <linux/mm.h> static int f7(int x) " \
                    "{ return x + 7; }"
    assert sum(c["documents"] for c in counts.values()) == 50
    limited = prepare_source(tmp_path / "slice", tmp_path / "linux-source-6.1.tar.xz",
                             copyright_file(tmp_path), limit=40, val_percent=20, test_percent=20)
    assert sum(c["documents"] for c in limited.values()) == 40


def test_the_prepared_source_is_read_into_token_shards(tmp_path: Path) -> None:
    out = tmp_path / "ksrc"
    counts = prepare_source(out, tarball(tmp_path, 60), copyright_file(tmp_path), val_percent=10,
                            test_percent=10)
    spec = ExperimentSpec.model_validate({
        "name": "k", "tracking": {"enabled": False}, "model": {"arch": "decoder_only"},
        "data": {"source": "text", "document_lines": 1, "cache_dir": str(tmp_path / "cache"),
                 "text": {"root": str(out), "train": "train.txt.gz", "val": "val.txt.gz",
                          "test": "test.txt.gz"},
                 "tokenizer": {"kind": "bpe", "vocab_size": 200}}})
    data = prepare_lm(spec)
    for split in ("train", "val", "test"):
        assert len(data.documents[split].docs) == counts[split]["documents"]
    assert list(data.documents["val"].texts or []) == lines(out / "val.txt.gz")


def test_a_copyright_file_without_gpl2_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "kdocs"
    bad = copyright_file(tmp_path, COPYRIGHT.replace("License: GPL-2\n\nFiles: debian",
                                                     "License: MIT\n\nFiles: debian"))
    with pytest.raises(DataError, match="does not grant License: GPL-2"):
        prepare_docs(out, doc_tree(tmp_path, 5), bad)
    assert not out.exists()


def test_a_tree_with_no_page_is_one_line_exit_2_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "_sources"
    empty.mkdir()
    out = tmp_path / "kdocs"
    licence = str(copyright_file(tmp_path))
    assert main(["docs", str(out), "--sources", str(empty), "--copyright", licence]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no document found" in err and str(empty) in err
    assert not out.exists()
    assert main(["source", str(out), "--tarball", str(tmp_path / "none.tar.xz"),
                 "--copyright", str(copyright_file(tmp_path))]) == 2
    assert "apt-get install linux-source-6.1" in capsys.readouterr().err
