"""Two larger corpora that need no download: the Linux kernel's documentation and its C source, as Debian
ships them.

* ``docs``: ``linux-doc-6.1`` installs the reStructuredText sources of the kernel's documentation as plain
  text (``/usr/share/doc/linux-doc-6.1/html/_sources/**/*.rst.txt``, about 3,200 pages, 32 MB). One page
  is one document, cleaned as :mod:`ablate.data.python_docs` cleans the Python pages (heading adornments
  dropped, whitespace runs made one space); pages under ``min_words`` words (index pages, stubs) and the
  ``translations/`` pages (other languages' versions of English pages) are left out.
* ``source``: ``linux-source-6.1`` installs the kernel's source as one tarball
  (``/usr/src/linux-source-6.1.tar.xz``, 139 MB); its ``.c`` and ``.h`` files (about 55,000, 1.18 GB) are
  read from it as a stream, nothing unpacked. One file is one document, its whitespace runs made one
  space (a document is one line; the tokenizers do not model line breaks).

Both are under the GNU General Public License version 2 (``Files: *`` of the packages' copyright file,
``License: GPL-2``); :func:`prepare_docs` and :func:`prepare_source` refuse to run unless the copyright
file says so, and copy it beside the corpus (``COPYRIGHT``). What GPL-2.0 means for a model trained on
the corpus: docs/corpora.md.

Each corpus is split by document, from a hash of the seed and the document's path (4% val, 4% test by
default), so a document never straddles two splits and a release that adds files moves none of the old
ones; it is written as ``train.txt.gz``, ``val.txt.gz`` and ``test.txt.gz``, one document a line (the form
``data.source: text`` reads with ``data.document_lines: 1``), with ``manifest.json`` (each document's
path, split and size). The files are written under temporary names and renamed once all are complete.

    apt-get install linux-doc-6.1 linux-source-6.1
    python -m ablate.data.kernel_corpora docs .ablate_cache/corpora/linux-docs-6.1
    python -m ablate.data.kernel_corpora source .ablate_cache/corpora/linux-source-6.1
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import sys
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from ablate.data.corpus import DataError, atomic_write
from ablate.data.python_docs import SPLITS, Document, clean, split_of

__all__ = ["LICENCE", "LICENCE_MARK", "check_licence", "prepare_docs", "prepare_source", "source_documents"]

LICENCE = "GPL-2.0-only"
LICENCE_MARK = re.compile(r"^Files: \*\s*\nCopyright:.*\n(?:\s.*\n)*License: GPL-2\s*$", re.MULTILINE)
DOC_ROOT = Path("/usr/share/doc")
VERSION = "6.1"
TARBALL = Path("/usr/src") / f"linux-source-{VERSION}.tar.xz"
_SPACE = re.compile(r"\s+")
C_SUFFIXES = (".c", ".h")
# Other languages' versions of English pages: thousands of CJK characters would take a small BPE vocabulary
# for its alphabet (BPE 1000 merged nothing with them in), and they repeat the English pages' content.
TRANSLATIONS = "translations/"


def check_licence(copyright_file: Path) -> str:
    """The copyright file's text; DataError unless its ``Files: *`` paragraph grants GPL-2."""
    if not copyright_file.is_file():
        raise DataError(f"{copyright_file}: no such copyright file (apt-get install linux-doc-{VERSION} "
                        f"linux-source-{VERSION}, or pass --copyright)")
    text = copyright_file.read_text(encoding="utf-8", errors="replace")
    if not LICENCE_MARK.search(text):
        raise DataError(f"{copyright_file}: its 'Files: *' paragraph does not grant License: GPL-2; "
                        "refusing to use the text")
    return text


# ------------------------------------------------------------------ reading each corpus
def docs_documents(sources: Path, min_words: int, translations: bool = False) -> Iterator[Document]:
    """Every ``*.rst.txt`` page under ``sources`` with at least ``min_words`` words once cleaned, in path
    order; the ``translations/`` pages (Chinese, Japanese, Korean, Italian, Spanish versions of English
    pages) only with ``translations``."""
    for path in sorted(sources.rglob("*.rst.txt")):
        name = path.relative_to(sources).as_posix()
        if not translations and name.startswith(TRANSLATIONS):
            continue
        text = clean(path.read_text(encoding="utf-8", errors="replace"))
        if len(text.split()) >= min_words:
            yield Document(name, text)


def source_documents(tarball: Path, limit: int | None = None) -> Iterator[Document]:
    """Every non-empty ``.c`` / ``.h`` file of the kernel's source tarball, in the tarball's order (at most
    ``limit``), its path without the tarball's top folder; a byte that is not UTF-8 reads as U+FFFD."""
    count = 0
    try:
        with tarfile.open(tarball, mode="r|*") as archive:
            for member in archive:
                if not member.isfile() or not member.name.endswith(C_SUFFIXES):
                    continue
                handle = archive.extractfile(member)
                if handle is None:
                    continue
                text = _SPACE.sub(" ", handle.read().decode("utf-8", errors="replace")).strip()
                if not text:
                    continue
                yield Document(member.name.split("/", 1)[-1], text)
                count += 1
                if limit is not None and count >= limit:
                    return
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DataError(f"{tarball}: cannot be read as a tarball: {exc}") from None


# ------------------------------------------------------------------ writing
class _SplitFiles:
    """The three gzipped split files, written under temporary names and renamed together at the end."""

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.tmp = {s: out / f".{s}.txt.gz.{os.getpid()}.tmp" for s in SPLITS}
        self.raw: dict[str, IO[bytes]] = {s: open(p, "wb") for s, p in self.tmp.items()}
        # mtime 0 and no file name in the header: the same corpus gives the same bytes
        self.gz = {s: gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=6, mtime=0)
                   for s, f in self.raw.items()}
        self.text = {s: io.TextIOWrapper(g, encoding="utf-8", newline="\n") for s, g in self.gz.items()}

    def write(self, split: str, text: str) -> None:
        self.text[split].write(text + "\n")

    def close(self, keep: bool) -> None:
        for s in SPLITS:
            self.text[s].close()  # closes the gzip stream and the file under it
        for s, tmp in self.tmp.items():
            if keep:
                os.replace(tmp, self.out / f"{s}.txt.gz")
            else:
                tmp.unlink(missing_ok=True)


def write_corpus(out: Path, docs: Iterator[Document], *, val_percent: int, test_percent: int, seed: int,
                 licence_text: str, about: Mapping[str, object]) -> dict[str, dict[str, int]]:
    """Split ``docs`` by document and write the corpus folder; returns documents and bytes per split."""
    counts = {s: {"documents": 0, "bytes": 0} for s in SPLITS}
    entries = []
    created = not out.exists()
    files = _SplitFiles(out)
    done = False
    try:
        for doc in docs:
            split = split_of(doc.name, val_percent, test_percent, seed=seed)
            files.write(split, doc.text)
            size = len(doc.text.encode("utf-8"))
            counts[split]["documents"] += 1
            counts[split]["bytes"] += size
            entries.append({"name": doc.name, "split": split, "bytes": size})
        empty = [s for s, c in counts.items() if c["documents"] == 0]
        if empty:
            total = sum(c["documents"] for c in counts.values())
            raise DataError(f"the {empty[0]} split of {total} documents is empty: the corpus is too small "
                            f"for {val_percent}% val and {test_percent}% test" if total else
                            f"{about['sources']}: no document found (nothing to prepare)")
        done = True
    finally:
        files.close(keep=done)
        if not done and created:
            out.rmdir()  # nothing half-written: the folder this call made goes too
    atomic_write(out / "COPYRIGHT", licence_text.encode("utf-8"))
    manifest = {**about, "licence": LICENCE, "seed": seed, "val_percent": val_percent,
                "test_percent": test_percent, "splits": counts, "documents": entries}
    atomic_write(out / "manifest.json", json.dumps(manifest, indent=1).encode("utf-8"))
    return counts


def find_docs(doc_root: Path = DOC_ROOT) -> tuple[Path, Path]:
    """(sources folder, copyright file) of the installed ``linux-doc-6.1``; DataError if absent."""
    package = doc_root / f"linux-doc-{VERSION}"
    sources = package / "html" / "_sources"
    if not sources.is_dir():
        raise DataError(f"{sources}: no such folder: apt-get install linux-doc-{VERSION}, or pass --sources "
                        "and --copyright")
    return sources, package / "copyright"


def prepare_docs(out: Path, sources: Path | None = None, copyright_file: Path | None = None, *,
                 min_words: int = 100, val_percent: int = 4, test_percent: int = 4, seed: int = 0,
                 translations: bool = False) -> dict[str, dict[str, int]]:
    """The kernel documentation corpus under ``out`` (see the module docstring)."""
    if sources is None or copyright_file is None:
        found_sources, found_copyright = find_docs()
        sources, copyright_file = sources or found_sources, copyright_file or found_copyright
    licence = check_licence(copyright_file)
    if not sources.is_dir():
        raise DataError(f"{sources}: no such folder of documentation sources")
    about = {"corpus": f"linux-doc-{VERSION}", "sources": str(sources), "copyright": str(copyright_file),
             "min_words": min_words, "translations": translations}
    return write_corpus(out, docs_documents(sources, min_words, translations), val_percent=val_percent,
                        test_percent=test_percent, seed=seed, licence_text=licence, about=about)


def prepare_source(out: Path, tarball: Path = TARBALL, copyright_file: Path | None = None, *,
                   limit: int | None = None, val_percent: int = 4, test_percent: int = 4, seed: int = 0
                   ) -> dict[str, dict[str, int]]:
    """The kernel source corpus under ``out``: every .c and .h file of the tarball (see the docstring)."""
    copyright_file = copyright_file or DOC_ROOT / f"linux-source-{VERSION}" / "copyright"
    licence = check_licence(copyright_file)
    if not tarball.is_file():
        raise DataError(f"{tarball}: no such file: apt-get install linux-source-{VERSION}, or pass --tarball")
    about = {"corpus": f"linux-source-{VERSION}", "sources": str(tarball), "copyright": str(copyright_file),
             "suffixes": list(C_SUFFIXES), "limit": limit}
    return write_corpus(out, source_documents(tarball, limit), val_percent=val_percent,
                        test_percent=test_percent, seed=seed, licence_text=licence, about=about)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ablate.data.kernel_corpora",
                                     description=(__doc__ or "").split("\n")[0])
    sub = parser.add_subparsers(dest="corpus", required=True)
    docs = sub.add_parser("docs", help=f"linux-doc-{VERSION}: one documentation page a document")
    docs.add_argument("--sources", type=Path, help="the html/_sources folder (default: the package's)")
    docs.add_argument("--min-words", type=int, default=100, help="shorter pages are left out (default 100)")
    docs.add_argument("--with-translations", action="store_true",
                      help="keep the translations/ pages (other languages' versions of English pages)")
    source = sub.add_parser("source", help=f"linux-source-{VERSION}: one .c or .h file a document")
    source.add_argument("--tarball", type=Path, default=TARBALL, help=f"default: {TARBALL}")
    source.add_argument("--limit", type=int, help="only the first N files (a slice, for a quick run)")
    for p in (docs, source):
        p.add_argument("out", type=Path, help="folder to write train/val/test.txt.gz into")
        p.add_argument("--copyright", type=Path, help="the package's copyright file (default: the package's)")
        p.add_argument("--seed", type=int, default=0, help="the split's seed (default 0)")
        p.add_argument("--val-percent", type=int, default=4)
        p.add_argument("--test-percent", type=int, default=4)
    args = parser.parse_args(argv)
    common = {"val_percent": args.val_percent, "test_percent": args.test_percent, "seed": args.seed}
    try:
        if args.corpus == "docs":
            counts = prepare_docs(args.out, args.sources, args.copyright, min_words=args.min_words,
                                  translations=args.with_translations, **common)
        else:
            counts = prepare_source(args.out, args.tarball, args.copyright, limit=args.limit, **common)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for split, c in counts.items():
        print(f"{split}: {c['documents']:,} documents, {c['bytes']:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
