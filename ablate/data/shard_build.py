"""A language model's corpus tokenized once into token shards (ablate/data/token_shards.py), or the shards
of an earlier run opened.

The shards' key names the raw input (the bytes of the text files, or the hub dataset's identity), how it is
cut into documents and the tokenizer's settings (a tokenizer file: its sha256), so that the same spec opens
the same folder and any change prepares a new one. The tokenizer is trained first (streaming the training
documents) and cached under ``data.cache_dir/tokenizers``, then every split is tokenized in batches of
about a megabyte of text: ``tokenizers``' batch encoding, which spreads a batch over every core. A build
killed mid-corpus resumes from its journal with the same tokenizer; a finished one is read back by memory
map, its tokenizer from the folder itself.

The data's fingerprint (what ``mlflow.log_input`` records) is the one the in-memory loader computed: a
digest of each split's document strings, streamed (:class:`~ablate.data.lm_sources.StreamDigest`), with the
tokenizer's JSON, the block length and ``document_lines``.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.data.corpus import DataError, atomic_write, sha256_json
from ablate.data.lm_sources import DocumentSource, Piece, StreamDigest
from ablate.data.token_shards import (
    SHARD_VERSION,
    DocumentTexts,
    PrepareProgress,
    ShardBuild,
    SplitWriter,
    TokenDocs,
    build_lock,
    check_tokenizer,
    open_split,
    read_meta,
    token_dtype,
)
from ablate.data.tokenize import Tokenizers, train_tokenizer
from ablate.data.tokenizer_file import load_tokenizer_file, tokenizer_file_identity

if TYPE_CHECKING:
    from ablate.spec.experiment import DataSpec

__all__ = ["LM_VERSION", "Shards", "fingerprint_of", "open_or_build", "tokenizer_sha256"]

log = logging.getLogger(__name__)
LM_VERSION = 1  # the fingerprint's version: documents digested as the in-memory loader digested them
BATCH_CHARS = 1 << 20  # text per encode_batch call: large enough for every core, small in memory
BATCH_PIECES = 8192


@dataclass
class Shards:
    tokenizers: Tokenizers
    splits: dict[str, tuple[TokenDocs, DocumentTexts | None]]
    n_bytes: dict[str, int]
    digests: dict[str, str]  # sha256_json of each split's document strings
    folder: Path
    cached: bool


def fingerprint_of(digests: dict[str, str], tok: Tokenizers, data: DataSpec) -> str:
    """The data's fingerprint: documents, tokenizer, block length and document_lines (as it always was)."""
    digest = sha256_json({"v": LM_VERSION, **digests})
    return sha256_json({"digest": digest, "tok": sha256_json(tok.to_json()), "block": data.max_len,
                        "lines": data.document_lines})[:16]


def tokenizer_sha256(tok: Tokenizers) -> str:
    return sha256_json(tok.to_json())


def _tokenizer_identity(data: DataSpec) -> dict[str, object]:
    return {"spec": data.tokenizer.model_dump(mode="json", exclude_none=True),
            "file": tokenizer_file_identity(data.tokenizer), "lowercase": data.lowercase}


def _train_texts(pieces: Iterator[Piece]) -> Iterator[str]:
    for piece in pieces:  # a stream's pieces train like the whole: words never cross a joining space
        yield piece.text


def lm_tokenizer(source: DocumentSource, data: DataSpec, cache: Path) -> Tokenizers:
    """The run's trained tokenizer: trained on the training documents, streamed (cached by content)."""
    spec = data.tokenizer
    key = sha256_json({"v": 2, "source": source.key, "tokenizer": _tokenizer_identity(data)})[:24]
    path = cache / "tokenizers" / f"lm-{key}.json"
    if path.is_file():
        try:
            return Tokenizers.from_json(path.read_text(encoding="utf-8"))
        except Exception:  # noqa: BLE001 - a damaged cache file is rebuilt, never fatal
            pass
    texts = _train_texts(source.splits["train"]())
    first = next(texts, None)
    if first is None:
        raise DataError(f"{source.origins['train']}: the train split has no document: nothing to train the "
                        "tokenizer on")
    tok = Tokenizers(train_tokenizer(spec.kind, _chain(first, texts), spec.vocab_size, spec.min_freq), None,
                     kind=spec.kind, lowercase=data.lowercase)
    atomic_write(path, tok.to_json().encode())
    return tok


def _chain(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest


def open_or_build(source: DocumentSource, data: DataSpec, cache: Path) -> Shards:
    """The corpus's shards: opened when a finished folder holds them, else built (and published) now."""
    # a tokenizer file is read first: a bad one is one line before anything is written
    own = (load_tokenizer_file(data.tokenizer, lowercase=data.lowercase, lm=True)
           if data.tokenizer.kind == "file" else None)
    key = sha256_json({"v": SHARD_VERSION, "source": source.key, "tokenizer": _tokenizer_identity(data)})[:24]
    final = cache / "shards" / key
    opened = _open(final, own)
    if opened is not None:
        return opened
    with build_lock(final):
        opened = _open(final, own)  # another process may have built it while this one waited
        if opened is not None:
            return opened
        tok = own if own is not None else lm_tokenizer(source, data, cache)
        _build(source, tok, final)
    built = _open(final, own)
    assert built is not None
    built.cached = False
    return built


def _open(final: Path, own: Tokenizers | None) -> Shards | None:
    meta = read_meta(final)
    if meta is None:
        return None
    try:
        tok = Tokenizers.from_json((final / "tokenizer.json").read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - a damaged folder is prepared again, never fatal
        log.warning("token shards %s: unreadable tokenizer.json; preparing them again", final)
        return None
    check_tokenizer(final, meta, tokenizer_sha256(tok))
    if own is not None:  # the shards must hold the ids of the file the spec names now
        check_tokenizer(final, meta, tokenizer_sha256(own))
    splits = {split: open_split(final, split, meta["dtype"]) for split in meta["splits"]}
    return Shards(tok, splits, {s: int(c["bytes"]) for s, c in meta["splits"].items()}, dict(meta["digests"]),
                  final, cached=True)


def _build(source: DocumentSource, tok: Tokenizers, final: Path) -> None:
    dtype = token_dtype(tok.tgt_vocab_size)
    build = ShardBuild(final)
    counts: dict[str, dict[str, int]] = {}
    digests: dict[str, str] = {}
    started = time.perf_counter()
    try:
        for split, pieces in source.splits.items():
            writer = build.writer(split, dtype, keep_text=True)
            counts[split], digests[split] = _build_split(writer, pieces(), tok, source, split)
    except DataError:
        shutil.rmtree(build.folder, ignore_errors=True)  # bad data: nothing half-written stays
        raise
    meta = {"version": SHARD_VERSION, "key": final.name, "dtype": dtype.name, "vocab": tok.tgt_vocab_size,
            "tokenizer_sha256": tokenizer_sha256(tok), "digests": digests, "splits": counts,
            "name": source.name, "source": source.source}
    build.publish(meta, tok.to_json())
    tokens = sum(c["tokens"] for c in counts.values())
    log.info("token shards %s: %s tokens in %.1fs", final, f"{tokens:,}", time.perf_counter() - started)


def _build_split(writer: SplitWriter, pieces: Iterator[Piece], tok: Tokenizers, source: DocumentSource,
                 split: str) -> tuple[dict[str, int], str]:
    """Tokenize one split into its writer (resuming after the documents an earlier build wrote)."""
    skip = writer.resume()
    digest = StreamDigest()
    if writer.done:
        return writer.counts(), str(writer.state["digest"])
    progress = PrepareProgress(f"{split} tokens", source.total_bytes.get(split))
    seen = 0
    batch: list[Piece] = []
    chars = 0
    try:
        for piece in pieces:
            digest.add(piece)
            if seen < skip:  # written before the kill: read (for the digest), not tokenized again
                seen += piece.ends
                continue
            batch.append(piece)
            chars += len(piece.text)
            if chars >= BATCH_CHARS or len(batch) >= BATCH_PIECES:
                _write_batch(writer, batch, tok, progress)
                batch, chars = [], 0
        if batch:
            _write_batch(writer, batch, tok, progress)
        if writer.done_docs == 0:
            raise DataError(f"{source.origins[split]}: the {split} split has no document")
        writer.state["digest"] = digest.hexdigest()
        return writer.finish(), digest.hexdigest()
    finally:
        writer.close()
        progress.close()


def _write_batch(writer: SplitWriter, batch: list[Piece], tok: Tokenizers, progress: PrepareProgress) -> None:
    ids = tok.encode_normalised_batch([p.text if p.first else f" {p.text}" for p in batch])  # lm_sources
    tokens = writer.append(ids, batch)
    writer.commit()  # at a document boundary (else it waits for the stream's next one)
    progress.update(sum(len(p.text) + 1 for p in batch), sum(p.ends for p in batch), tokens)
