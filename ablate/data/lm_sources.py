"""A language model's documents as streams: text files, a hub dataset's text column, read without holding a
corpus in memory.

Each split is an iterator of :class:`Piece`\\ s: normalised text and whether it ends its document. Every
document is one piece, except a ``documents: stream`` file (nanoGPT's one long stream), whose lines are
pieces of one document, so that a corpus of any size is read, tokenized and written line batch by line
batch. A document's pieces are joined by one space, as the lines of a document always were, and a document
longer than ``MAX_PIECE_CHARS`` is cut into pieces at spaces too; a piece after the first is encoded with
that space in front, which gives it the ids it has inside the whole (the built-in Metaspace BPE, words and
characters, and byte-level tokenizers: tests/data/test_token_shards.py checks it).

Text files are read line by line (``.gz`` decompressed on the fly), split on ``\\n`` only as ``datasets``'
text loader splits them, a UTF-8 byte-order mark dropped from the first line; the line-by-line check
(``corpus.check_text_file``) runs first, so a bad byte or a stray carriage return is one located line.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import datasets  # heavy: only for a hub source

from ablate.data.check import text_named_paths, text_split_paths
from ablate.data.corpus import DataError, check_text_file, expand_env, sha256_json
from ablate.data.tokenize import normalize

if TYPE_CHECKING:
    from ablate.spec.experiment import DataSpec

__all__ = ["DocumentSource", "Piece", "StreamDigest", "documents", "hub_source", "paragraphs",
           "text_source"]


@dataclass(frozen=True)
class Piece:
    text: str  # normalised, non-empty
    ends: bool = True  # the last piece of its document
    first: bool = True  # the first piece of its document (a later one is encoded after a space)


MAX_PIECE_CHARS = 1 << 16  # a longer document is encoded in pieces of about this many characters


def split_long(pieces: Iterable[Piece], limit: int | None = None) -> Iterator[Piece]:
    """Pieces longer than ``limit`` characters cut at a space (the space dropped: pieces are joined by one),
    so that a 20 MB source file is never one string with its millions of token objects at once. A piece
    after the first is encoded with its space in front (shard_build), which gives the ids of the whole for
    Metaspace and byte-level tokenizers alike (tests/data/test_token_shards.py)."""
    limit = limit or MAX_PIECE_CHARS
    for piece in pieces:
        text, first = piece.text, piece.first
        while len(text) > limit:
            cut = text.rfind(" ", 1, limit)
            if cut <= 0:
                cut = text.find(" ", limit)  # a run of `limit` characters without a space: cut after it
                if cut < 0:
                    break
            yield Piece(text[:cut], ends=False, first=first)
            text, first = text[cut + 1:], False
        yield Piece(text, ends=piece.ends, first=first)


@dataclass
class DocumentSource:
    """Where a language model's documents come from: each split's piece stream (re-readable: a build
    that resumes, or trains a tokenizer first, reads it again), its size for the ETA, and its identity."""

    splits: dict[str, Callable[[], Iterator[Piece]]]
    key: str  # sha256 of the raw input and of how it is cut into documents: the shards' cache key
    name: str  # for mlflow.log_input, e.g. 'multi30k/train.en.gz'
    source: str  # the train file or the hub id
    total_bytes: dict[str, int | None]  # raw bytes of each split's input (None: unknown, a stream)
    origins: dict[str, str]  # each split's field and input, for messages: 'data.text.val (/c/val.txt)'


# ------------------------------------------------------------------ cutting lines into documents
def documents(lines: Iterable[str], per_document: int, lowercase: bool) -> list[str]:
    """Consecutive lines joined by a space, ``per_document`` at a time (the last document may be shorter)."""
    return [p.text for p in grouped(lines, per_document, lowercase)]


def grouped(lines: Iterable[str], per_document: int, lowercase: bool) -> Iterator[Piece]:
    current: list[str] = []
    for line in lines:
        if clean := normalize(line, lowercase):
            current.append(clean)
            if len(current) == per_document:
                yield Piece(" ".join(current))
                current = []
    if current:
        yield Piece(" ".join(current))


def paragraphs(lines: Iterable[str], lowercase: bool) -> list[str]:
    """One document per run of non-blank lines: a blank line (or several) ends a document."""
    return [p.text for p in paragraph_pieces(lines, lowercase)]


def paragraph_pieces(lines: Iterable[str], lowercase: bool) -> Iterator[Piece]:
    current: list[str] = []
    for line in lines:
        if clean := normalize(line, lowercase):
            current.append(clean)
        elif current:
            yield Piece(" ".join(current))
            current = []
    if current:
        yield Piece(" ".join(current))


def joined(lines: Iterable[str], lowercase: bool) -> str:
    """Non-blank lines joined by a space (the tokenizers do not model line breaks)."""
    return " ".join(clean for line in lines if (clean := normalize(line, lowercase)))


def stream_pieces(lines: Iterable[str], lowercase: bool, piece_lines: int = 256) -> Iterator[Piece]:
    """The whole text as one document, in pieces of ``piece_lines`` non-blank lines (the last one ends it)."""
    held: Piece | None = None
    current: list[str] = []
    for line in lines:
        if clean := normalize(line, lowercase):
            current.append(clean)
            if len(current) == piece_lines:
                if held is not None:
                    yield held
                held, current = Piece(" ".join(current), ends=False, first=held is None), []
    if current:
        if held is not None:
            yield held
        held = Piece(" ".join(current), ends=False, first=held is None)
    if held is not None:
        yield Piece(held.text, ends=True, first=held.first)


def cut_documents(lines: Sequence[str], data: DataSpec) -> list[str]:
    """One text's lines cut into documents as the spec cuts its text (``data.text.documents``; a hub
    column or synthetic task: ``document_lines`` at a time); a ``files`` document is the whole text."""
    mode = (data.text.documents if data.text is not None else None) or "lines"
    if mode == "paragraphs":
        return paragraphs(lines, data.lowercase)
    if mode in ("stream", "files"):
        return [d] if (d := joined(lines, data.lowercase)) else []
    return documents(lines, data.document_lines, data.lowercase)


# ------------------------------------------------------------------ text files
def read_lines(path: Path) -> Iterator[str]:
    """A UTF-8 text file's lines (``.gz`` decompressed), blank ones kept, split on ``\\n`` as ``datasets``'
    text loader splits them; the byte-order mark of the first line dropped."""
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline=None) as handle:
        for i, line in enumerate(handle):
            line = line[:-1] if line.endswith("\n") else line
            yield line.lstrip("\ufeff") if i == 0 else line


def _checked(path: Path) -> Path:
    if check_text_file(path, blank_lines=True) == 0:
        raise DataError(f"{path}: empty file (no line of text)")
    return path


def _file_pieces(paths: Sequence[Path], data: DataSpec, split: str) -> Callable[[], Iterator[Piece]]:
    assert data.text is not None
    mode = data.text.documents or "lines"
    cap = data.max_train_examples if split == "train" else None

    def pieces() -> Iterator[Piece]:
        yield from split_long(whole())

    def whole() -> Iterator[Piece]:
        if mode == "files":  # one document per file, its lines joined like a paragraph's
            found = (Piece(d) for p in paths if (d := joined(read_lines(p), data.lowercase)))
            yield from _capped(found, cap)
            return
        lines: Iterable[str] = read_lines(paths[0])
        if mode == "lines":  # lines mode caps lines before grouping them (as it always did)
            yield from grouped(lines if cap is None else _first(lines, cap), data.document_lines,
                               data.lowercase)
        elif mode == "paragraphs":
            yield from _capped(paragraph_pieces(lines, data.lowercase), cap)
        else:  # stream: one document, however long (a cap of documents keeps it)
            yield from stream_pieces(lines, data.lowercase)

    return pieces


def _first(items: Iterable[str], n: int) -> Iterator[str]:
    for i, item in enumerate(items):
        if i >= n:
            return
        yield item


def _capped(pieces: Iterator[Piece], cap: int | None) -> Iterator[Piece]:
    """At most ``cap`` documents (None: all)."""
    done = 0
    for piece in pieces:
        if cap is not None and done >= cap:
            return
        yield piece
        done += piece.ends


def text_source(data: DataSpec) -> DocumentSource:
    """The ``source: text`` splits, their files checked line by line and hashed (the cache key)."""
    assert data.text is not None
    mode = data.text.documents or "lines"
    splits: dict[str, Callable[[], Iterator[Piece]]] = {}
    sizes: dict[str, int | None] = {}
    origins: dict[str, str] = {}
    digest = hashlib.sha256(json.dumps({"mode": mode, "document_lines": data.document_lines,
                                        "lowercase": data.lowercase, "cap": data.max_train_examples},
                                       sort_keys=True).encode())
    for named in text_named_paths(data):
        split = named.field.rsplit(".", 1)[1]
        paths = text_split_paths(named, mode)
        if not paths or not all(p.is_file() for p in paths):
            if mode == "files" and named.path.is_dir():
                raise DataError(f"{named.field}: no document in {named.path}{named.explain()}: the folder "
                                "holds no file (text.documents: files reads one document a file)")
            raise DataError(f"{named.field}: file not found: {named.path}{named.explain()}")
        if mode != "files":
            _checked(paths[0])
        for path in paths:
            with open(path, "rb") as handle:
                digest.update(f"|{split}:{hashlib.file_digest(handle, 'sha256').hexdigest()}".encode())
        splits[split] = _file_pieces(paths, data, split)
        sizes[split] = None if any(p.suffix == ".gz" for p in paths) else sum(p.stat().st_size for p in paths)
        origins[split] = f"{named.field} ({named.path})"
    folder = Path(expand_env(data.text.root)).name if data.text.root else ""
    train = Path(data.text.train).name
    name = f"{folder}/{train}" if folder else train  # e.g. 'multi30k/train.en.gz'
    source = str(Path(expand_env(data.text.root or "")) / data.text.train)
    return DocumentSource(splits, digest.hexdigest(), name, source, sizes, origins)


# ------------------------------------------------------------------ a hub dataset's text column
def hub_source(data: DataSpec) -> DocumentSource:
    """A hub dataset's text column, grouped ``document_lines`` rows at a time; ``hub.streaming`` reads the
    rows as they come (``load_dataset(streaming=True)``) instead of downloading the dataset first."""
    assert data.hub is not None and data.hub.field is not None

    hub = data.hub
    text_field = hub.field
    assert text_field is not None
    streaming = bool(getattr(hub, "streaming", False))
    label = hub.name if hub.config is None else f"{hub.name}/{hub.config}"
    try:
        loaded = datasets.load_dataset(hub.name, hub.config, revision=hub.revision, streaming=streaming,
                                       cache_dir=str(Path(expand_env(data.cache_dir)) / "hf"))
    except Exception as e:  # the hub raises many types; the user needs one line
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"data.hub: cannot load dataset {label!r}: {message}") from e
    splits: dict[str, Callable[[], Iterator[Piece]]] = {}
    identity: list[Any] = ["lm-hub", label, hub.revision, hub.field, data.document_lines, data.lowercase,
                           data.max_train_examples, streaming]
    for split, name in (("train", hub.train_split), ("val", hub.val_split), ("test", hub.test_split)):
        if name is None or (split == "test" and name not in loaded):
            continue
        if name not in loaded:
            raise DataError(f"data.hub.{split}_split: dataset {label!r} has no split {name!r}; "
                            f"splits: {', '.join(loaded)}")
        columns = loaded[name].column_names
        if columns is not None and hub.field not in columns:
            raise DataError(f"data.hub.field: {label}[{name}] has no column {hub.field!r}; columns: "
                            f"{', '.join(columns)}")
        splits[split] = _hub_pieces(loaded[name], text_field, data, split)
        # a streamed dataset has no fingerprint: its name, revision and files stand for it
        identity.append([split, name, getattr(loaded[name], "_fingerprint", None) if not streaming else
                         sorted(str(f) for f in _data_files(loaded[name]))])
    source = f"hf://{label}" + (f"@{hub.revision}" if hub.revision else "")
    origins = {split: f"data.hub.{split}_split ({label})" for split in splits}
    return DocumentSource(splits, sha256_json(identity), hub.name, source, dict.fromkeys(splits), origins)


def _data_files(ds: Any) -> list[Any]:
    """The files a streamed split reads (their names stand for its content)."""
    try:
        return list(ds._ex_iterable.kwargs.get("files", []))  # noqa: SLF001 - no public accessor
    except AttributeError:
        return []


def _hub_pieces(ds: Any, field: str, data: DataSpec, split: str) -> Callable[[], Iterator[Piece]]:
    cap = data.max_train_examples if split == "train" else None

    def pieces() -> Iterator[Piece]:
        texts = (t for t in _column(ds, field, split) if isinstance(t, str) and t.strip())
        yield from split_long(grouped(texts if cap is None else _first(texts, cap), data.document_lines,
                                      data.lowercase))

    return pieces


def _column(ds: Any, field: str, split: str) -> Iterator[Any]:
    """A split's text column, row by row (a streamed split says what it lacks only when read)."""
    for row in ds:
        if field not in row:
            raise DataError(f"data.hub.field: the {split} split has no column {field!r}; columns: "
                            f"{', '.join(row)}")
        yield row[field]


# ------------------------------------------------------------------ the data's content identity
class StreamDigest:
    """``sha256_json(documents)`` of a split computed as its pieces stream by: the digest the in-memory
    loader took of its list of document strings, so a corpus keeps its data fingerprint."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256(b"[")
        self.first = True
        self.open = False

    def add(self, piece: Piece) -> None:
        escaped = json.dumps(piece.text)[1:-1]  # the string's JSON escaping, without its quotes
        if self.open:
            self.hash.update(f" {escaped}".encode())
        else:
            self.hash.update((b'"' if self.first else b', "') + escaped.encode())
            self.first = False
        self.open = not piece.ends
        if piece.ends:
            self.hash.update(b'"')

    def hexdigest(self) -> str:
        done = self.hash.copy()
        done.update(b"]")
        return done.hexdigest()
