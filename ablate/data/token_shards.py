"""Token shards: a language model's tokenized documents on disk, memory-mapped, written once.

One folder per prepared corpus, ``<data.cache_dir>/shards/<key>/`` (the key names the raw text, how it is
cut into documents and the tokenizer), holding for each split:

* ``<split>.tokens``: every document's token ids back to back (no bos/eos), ``uint16`` when the
  vocabulary fits in 65,536 ids, else ``uint32``: nanoGPT's ``train.bin``;
* ``<split>.index.npy``: the document index, ``int64`` offsets into the tokens (``docs + 1`` of them);
* ``<split>.text`` and ``<split>.text_index.npy``: each document's normalised text (what a sample's
  reference line prints), UTF-8, the same kind of index, memory-mapped too;

and ``tokenizer.json`` (the run's :class:`~ablate.data.tokenize.Tokenizers`) and ``meta.json`` (counts,
dtype, the data fingerprint, the tokenizer's sha256). Readers open the arrays with ``np.memmap`` /
``np.load(mmap_mode="r")``: training and evaluation read windows from the page cache, so a process's
memory does not grow with the corpus.

Writing is atomic and resumable. A build writes into ``<key>.building/`` under an exclusive ``flock`` (a
second process preparing the same data waits, then reads the finished folder), appends each batch of
documents to ``<split>.*.part`` files, fsyncs them and then records the lengths reached in
``<split>.journal.json`` (written atomically). A build killed at any moment resumes from its journal: the
part files are cut back to the recorded lengths, the documents already written are skipped, and the rest is
tokenized. Only a finished build is renamed to ``<key>/``, so no reader ever sees half a corpus.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, overload

import numpy as np
from tqdm import tqdm

from ablate.data.corpus import DataError, atomic_write
from ablate.data.lm_sources import Piece

__all__ = ["DocumentTexts", "ShardBuild", "SplitWriter", "TokenDocs", "build_lock", "open_split",
           "token_dtype"]

SHARD_VERSION = 1


def token_dtype(vocab_size: int) -> np.dtype[Any]:
    """uint16 where every id fits (GPT-2's 50,257 does), else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


# ------------------------------------------------------------------ reading
@dataclass(frozen=True)
class TokenDocs(Sequence[np.ndarray]):
    """Documents as one flat token array and its index: ``docs[i]`` is ``tokens[offsets[i]:offsets[i+1]]``
    (a view into the memory map, or into an in-memory array for a synthetic task)."""

    tokens: np.ndarray  # (N,) uint16 / uint32 / int64: every document's ids back to back
    offsets: np.ndarray  # (docs + 1,) int64

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, i: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[np.ndarray]: ...

    def __getitem__(self, i: int | slice) -> np.ndarray | Sequence[np.ndarray]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.tokens[int(self.offsets[i]):int(self.offsets[i + 1])]

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    @classmethod
    def from_lists(cls, docs: Sequence[Sequence[int]]) -> TokenDocs:
        lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        offsets = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.fromiter((t for d in docs for t in d), dtype=np.int64, count=int(offsets[-1]))
        return cls(tokens, offsets)


@dataclass(frozen=True)
class DocumentTexts(Sequence[str]):
    """Each document's text from one UTF-8 byte array and its index (decoded on access)."""

    raw: np.ndarray  # (bytes,) uint8
    offsets: np.ndarray  # (docs + 1,) int64

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return bytes(self.raw[int(self.offsets[i]):int(self.offsets[i + 1])]).decode("utf-8")


def _memmap(path: Path, dtype: np.dtype[Any]) -> np.ndarray:
    if path.stat().st_size == 0:  # mmap cannot map an empty file
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def open_split(folder: Path, split: str, dtype: str) -> tuple[TokenDocs, DocumentTexts | None]:
    """The memory-mapped documents (and texts, where written) of one split of a finished shard folder."""
    docs = TokenDocs(_memmap(folder / f"{split}.tokens", np.dtype(dtype)),
                     np.load(folder / f"{split}.index.npy", mmap_mode="r"))
    texts = None
    if (folder / f"{split}.text").is_file():
        texts = DocumentTexts(_memmap(folder / f"{split}.text", np.dtype(np.uint8)),
                              np.load(folder / f"{split}.text_index.npy", mmap_mode="r"))
    return docs, texts


# ------------------------------------------------------------------ writing
@contextmanager
def build_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock beside the shard folder: one builder at a time, the others wait for it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class SplitWriter:
    """Appends one split's documents to its part files; ``commit`` makes what was appended survive a kill.

    ``resume()`` returns how many documents an earlier, killed build already wrote (0 for a fresh one)
    after cutting the part files back to what its journal recorded."""

    PARTS = ("tokens", "lengths", "text", "text_lengths")

    def __init__(self, folder: Path, split: str, dtype: np.dtype[Any], keep_text: bool) -> None:
        self.folder, self.split, self.dtype, self.keep_text = folder, split, dtype, keep_text
        self.journal_path = folder / f"{split}.journal.json"
        self.state: dict[str, Any] = {"documents": 0, "tokens": 0, "bytes": 0, "text_bytes": 0, "done": False}
        self.handles: dict[str, IO[bytes]] = {}
        # what was appended: whole documents (recorded by commit), and the document still open
        self.done_docs = self.done_tokens = self.done_bytes = self.done_text = 0
        self.open_doc, self.open_tokens, self.open_bytes = False, 0, 0

    def _part(self, name: str) -> Path:
        return self.folder / f"{self.split}.{name}.part"

    def resume(self) -> int:
        if self.journal_path.is_file():
            self.state = json.loads(self.journal_path.read_text())
        if self.state["done"]:  # finished before the kill: its files are in place
            return int(self.state["documents"])
        sizes = {"tokens": self.state["tokens"] * self.dtype.itemsize, "lengths": self.state["documents"] * 8,
                 "text": self.state["text_bytes"],
                 "text_lengths": self.state["documents"] * 8 if self.keep_text else 0}
        for name in self.PARTS:
            if name.startswith("text") and not self.keep_text:
                continue
            handle = open(self._part(name), "ab")
            handle.truncate(sizes[name])  # what an unrecorded append left behind is dropped
            self.handles[name] = handle
        self.done_docs, self.done_tokens = int(self.state["documents"]), int(self.state["tokens"])
        self.done_bytes, self.done_text = int(self.state["bytes"]), int(self.state["text_bytes"])
        return self.done_docs

    @property
    def done(self) -> bool:
        return bool(self.state["done"])

    def counts(self) -> dict[str, int]:
        return {k: int(self.state[k]) for k in ("documents", "tokens", "bytes")}

    def append(self, ids: Sequence[Sequence[int]], pieces: Sequence[Piece]) -> int:
        """Write pieces' ids (and texts), a document's length once its last piece is in; returns the
        tokens written. A document's pieces are joined by one space (its text, its bytes)."""
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=self.dtype,
                           count=sum(len(d) for d in ids))
        self.handles["tokens"].write(flat.tobytes())
        lengths, text_lengths, chunks = [], [], []
        for piece_ids, piece in zip(ids, pieces, strict=True):
            encoded = piece.text.encode("utf-8")
            if self.open_doc:  # a later piece of the open document: one space before it
                encoded = b" " + encoded
            self.open_doc = True
            self.open_tokens += len(piece_ids)
            self.open_bytes += len(encoded)
            if self.keep_text:
                chunks.append(encoded)
            if piece.ends:
                lengths.append(self.open_tokens)
                text_lengths.append(self.open_bytes)
                self.done_docs += 1
                self.done_tokens += self.open_tokens
                self.done_bytes += self.open_bytes + 1  # its eos: a newline's worth
                self.open_doc, self.open_tokens, self.open_bytes = False, 0, 0
        self.handles["lengths"].write(np.array(lengths, dtype=np.int64).tobytes())
        if self.keep_text:
            self.handles["text"].write(b"".join(chunks))
            self.handles["text_lengths"].write(np.array(text_lengths, dtype=np.int64).tobytes())
            self.done_text += sum(text_lengths)
        return int(flat.size)

    def commit(self) -> None:
        """Flush and fsync the part files, then record their lengths (the order a kill needs); nothing is
        recorded while a document is open (a stream's pieces), so a resume never starts inside one."""
        if self.open_doc:
            return
        self.state.update(documents=self.done_docs, tokens=self.done_tokens, bytes=self.done_bytes,
                          text_bytes=self.done_text)
        for handle in self.handles.values():
            handle.flush()
            os.fsync(handle.fileno())
        atomic_write(self.journal_path, json.dumps(self.state).encode())

    def finish(self) -> dict[str, int]:
        """Turn the parts into the split's files; returns documents, tokens and bytes."""
        if self.open_doc:
            raise ValueError("the last document of the split never ended")
        self.commit()
        for handle in self.handles.values():
            handle.close()
        self.handles = {}
        os.replace(self._part("tokens"), self.folder / f"{self.split}.tokens")
        _write_index(self._part("lengths"), self.folder / f"{self.split}.index.npy")
        if self.keep_text:
            os.replace(self._part("text"), self.folder / f"{self.split}.text")
            _write_index(self._part("text_lengths"), self.folder / f"{self.split}.text_index.npy")
        self.state["done"] = True
        atomic_write(self.journal_path, json.dumps(self.state).encode())
        return self.counts()

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()
        self.handles = {}


def _write_index(lengths_path: Path, out: Path) -> None:
    lengths = np.fromfile(lengths_path, dtype=np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    np.save(out, offsets)
    lengths_path.unlink()


class ShardBuild:
    """The ``<key>.building/`` folder of one build: its split writers, then the rename to ``<key>/``."""

    def __init__(self, final: Path) -> None:
        self.final = final
        self.folder = final.with_name(f"{final.name}.building")
        self.folder.mkdir(parents=True, exist_ok=True)

    def writer(self, split: str, dtype: np.dtype[Any], keep_text: bool) -> SplitWriter:
        return SplitWriter(self.folder, split, dtype, keep_text)

    def publish(self, meta: dict[str, Any], tokenizer_json: str) -> None:
        """Write the tokenizer and meta.json, drop the journals, and rename the folder into place."""
        atomic_write(self.folder / "tokenizer.json", tokenizer_json.encode("utf-8"))
        atomic_write(self.folder / "meta.json", json.dumps(meta, indent=1, sort_keys=True).encode())
        for journal in self.folder.glob("*.journal.json"):
            journal.unlink()
        if self.final.exists():  # an unreadable older folder under the same key: replaced whole
            shutil.rmtree(self.final)
        os.replace(self.folder, self.final)


# ------------------------------------------------------------------ the progress bar
class PrepareProgress:
    """Documents, tokens/s and (where the input's size is known) the ETA, on stderr; quiet when stderr is
    not a terminal or under ``ablate -q`` (ABLATE_QUIET=1), like the trainer's bar."""

    def __init__(self, label: str, total_bytes: int | None) -> None:
        self.bar: Any = None
        self.started = time.monotonic()
        self.tokens = 0
        self.documents = 0
        if sys.stderr.isatty() and os.environ.get("ABLATE_QUIET") != "1":
            self.bar = tqdm(total=total_bytes, desc=label, unit="B", unit_scale=True, dynamic_ncols=True,
                            file=sys.stderr)

    def update(self, n_bytes: int, documents: int, tokens: int) -> None:
        self.documents += documents
        self.tokens += tokens
        if self.bar is not None:
            rate = self.tokens / max(time.monotonic() - self.started, 1e-9)
            self.bar.set_postfix(docs=f"{self.documents:,}", tok_s=f"{rate:,.0f}", refresh=False)
            self.bar.update(n_bytes)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def read_meta(folder: Path) -> dict[str, Any] | None:
    """A finished shard folder's meta.json, or None (absent, or not this version's)."""
    try:
        meta: dict[str, Any] = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    return meta if meta.get("version") == SHARD_VERSION else None


def check_tokenizer(folder: Path, meta: dict[str, Any], tokenizer_sha256: str) -> None:
    """A shard folder named for a run must hold that run's tokenizer's ids: one line when it does not."""
    if meta.get("tokenizer_sha256") != tokenizer_sha256:
        raise DataError(f"{folder}: these token shards were written with another tokenizer (sha256 "
                        f"{str(meta.get('tokenizer_sha256'))[:12]}, this run's {tokenizer_sha256[:12]}); "
                        "delete the folder to prepare it again")
