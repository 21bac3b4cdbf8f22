"""A long-document English corpus that needs no download: the Python documentation Debian ships.

Debian's ``python3.11-doc`` package installs the reStructuredText sources of the Python 3.11
documentation as plain text (``/usr/share/doc/python3.11/html/_sources/**/*.rst.txt``): about 500
pages, of which about 280 hold 1,000 to 30,000 words (the library reference, the language reference,
the HOWTOs, the tutorial, the "What's New" pages). They are under the PSF License version 2 (the
package's ``/usr/share/doc/python3.11-doc/copyright``: "this software ("Python") in source or binary
form and its associated documentation"), the code in them also under the Zero-Clause BSD licence
(``license.rst.txt``); :func:`prepare` refuses to run unless the copyright file grants the first.

One page is one document. The pages are split by document (never inside one) into train, val and test
by a hash of the page's path, so a split never depends on which other pages a release ships, and
written as ``train.txt.gz``, ``val.txt.gz`` and ``test.txt.gz``: one document a line, the form a
``data.source: text`` spec reads with ``data.document_lines: 1``. Beside them: the package's copyright
file (``COPYRIGHT``) and ``manifest.json`` (each document's path, split and word count).

Cleaning is light, so the text stays what the package ships: reST's heading underlines and overlines
(lines of one repeated punctuation character) are dropped, and runs of whitespace (newlines included)
become one space. Markup (roles, directives, code) stays.

    apt-get install python3.11-doc
    python -m ablate.data.python_docs .ablate_cache/corpora/python-docs-3.11
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ablate.data.corpus import DataError, atomic_write

__all__ = ["Document", "clean", "find_package", "prepare", "read_documents", "split_documents", "split_of"]

SPLITS = ("train", "val", "test")
DOC_ROOT = Path("/usr/share/doc")
# What the package's copyright file must say before its text is used.
LICENCE_MARK = "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2"
_ADORNMENT = re.compile(r"^\s*([!-/:-@\[-`{-~])\1{2,}\s*$")  # a line of one repeated punctuation mark
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Document:
    name: str  # its path under the sources folder, e.g. 'library/heapq.rst.txt'
    text: str  # cleaned: one line


def clean(raw: str) -> str:
    """One line of text: heading adornments dropped, whitespace runs collapsed to one space."""
    kept = [line for line in raw.splitlines() if not _ADORNMENT.match(line)]
    return _SPACE.sub(" ", " ".join(kept)).strip()


def read_documents(sources: Path, min_words: int, max_words: int) -> list[Document]:
    """Every ``*.rst.txt`` page under ``sources`` whose cleaned text has ``min_words`` to ``max_words``
    words (a short index page or a stub is not a long document), in path order."""
    docs = []
    for path in sorted(sources.rglob("*.rst.txt")):
        text = clean(path.read_text(encoding="utf-8", errors="replace"))
        if min_words <= len(text.split()) <= max_words:
            docs.append(Document(path.relative_to(sources).as_posix(), text))
    return docs


def split_of(name: str, val_percent: int, test_percent: int, seed: int | None = None) -> str:
    """The split of a document, from a hash of its name alone (and of ``seed``, when given): stable whatever
    else is in the corpus."""
    key = name if seed is None else f"{seed}:{name}"  # no seed: the Python docs' splits as they were
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") % 100
    if bucket < val_percent:
        return "val"
    return "test" if bucket < val_percent + test_percent else "train"


def split_documents(docs: Sequence[Document], val_percent: int, test_percent: int
                    ) -> dict[str, list[Document]]:
    """train / val / test by document; DataError when one of them would be empty."""
    out: dict[str, list[Document]] = {split: [] for split in SPLITS}
    for doc in docs:
        out[split_of(doc.name, val_percent, test_percent)].append(doc)
    for split, part in out.items():
        if not part:
            raise DataError(f"the {split} split of {len(docs)} documents is empty: the corpus is too small "
                            f"for {val_percent}% val and {test_percent}% test")
    return out


def find_package(doc_root: Path = DOC_ROOT) -> tuple[Path, Path]:
    """(sources folder, copyright file) of the newest installed ``python3.X-doc``; DataError if none."""
    found = []
    for copyright_file in doc_root.glob("python3.*-doc/copyright"):
        version = copyright_file.parent.name.removesuffix("-doc")  # 'python3.11'
        sources = doc_root / version / "html" / "_sources"
        if sources.is_dir():
            minor = int(version.split(".")[1]) if version.split(".")[1].isdigit() else -1
            found.append((minor, sources, copyright_file))
    if not found:
        raise DataError(f"no python3.X-doc package under {doc_root} (its html/_sources and copyright): "
                        f"apt-get install python3.11-doc, or pass --sources and --copyright")
    _, sources, copyright_file = max(found)
    return sources, copyright_file


def _check_licence(copyright_file: Path) -> str:
    if not copyright_file.is_file():
        raise DataError(f"{copyright_file}: no such copyright file")
    text = copyright_file.read_text(encoding="utf-8", errors="replace")
    if LICENCE_MARK not in text:
        raise DataError(f"{copyright_file}: does not grant the {LICENCE_MARK.title()}; "
                        "refusing to use the text")
    return text


def _write_split(path: Path, docs: Sequence[Document]) -> None:
    payload = "".join(f"{d.text}\n" for d in docs).encode("utf-8")
    atomic_write(path, gzip.compress(payload, mtime=0))  # mtime 0: the same corpus gives the same bytes


def prepare(out: Path, sources: Path | None = None, copyright_file: Path | None = None, *,
            min_words: int = 1000, max_words: int = 30_000, val_percent: int = 4, test_percent: int = 4
            ) -> dict[str, dict[str, int]]:
    """Write the corpus under ``out`` (see the module docstring); returns documents and words per split.

    ``sources`` and ``copyright_file`` default to the installed package's (:func:`find_package`)."""
    if sources is None or copyright_file is None:
        found_sources, found_copyright = find_package()
        sources, copyright_file = sources or found_sources, copyright_file or found_copyright
    licence = _check_licence(copyright_file)
    if not sources.is_dir():
        raise DataError(f"{sources}: no such folder of documentation sources")
    docs = read_documents(sources, min_words, max_words)
    splits = split_documents(docs, val_percent, test_percent)
    for split, part in splits.items():
        _write_split(out / f"{split}.txt.gz", part)
    atomic_write(out / "COPYRIGHT", licence.encode("utf-8"))
    manifest = {"sources": str(sources), "copyright": str(copyright_file), "licence": LICENCE_MARK.title(),
                "min_words": min_words, "max_words": max_words,
                "documents": [{"name": d.name, "split": split, "words": len(d.text.split())}
                              for split, part in splits.items() for d in part]}
    atomic_write(out / "manifest.json", json.dumps(manifest, indent=1).encode("utf-8"))
    return {split: {"documents": len(part), "words": sum(len(d.text.split()) for d in part)}
            for split, part in splits.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ablate.data.python_docs",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("out", type=Path, help="folder to write train/val/test.txt.gz into")
    parser.add_argument("--sources", type=Path,
                        help="the html/_sources folder (default: the installed package's)")
    parser.add_argument("--copyright", type=Path,
                        help="the package's copyright file (default: found beside it)")
    args = parser.parse_args(argv)
    try:
        counts = prepare(args.out, args.sources, args.copyright)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for split, c in counts.items():
        print(f"{split}: {c['documents']} documents, {c['words']:,} words")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
