"""Language-modelling data: documents -> one tokenizer -> token shards -> packed training blocks and
evaluation windows.

``prepare_lm(spec)`` is the entry point for ``model.arch: decoder_only`` (``prepare_data`` hands over to
it). Text comes from local files (``source: text``, ``.gz`` accepted, read line by line after our
line-by-line check), a hub dataset's text column (``source: hub``, ``hub.field``; ``hub.streaming`` reads
it as it downloads), or a synthetic LM task (ablate/data/lm_tasks.py). Text files are cut into documents as
``data.text.documents`` says: at blank lines (prose), every ``data.document_lines`` lines (Multi30k
captions), one file per document, or the whole file as one stream; a hub column or a synthetic task is
grouped ``document_lines`` lines at a time (ablate/data/lm_sources.py). The lines of a document are joined
by a space. One tokenizer (``data.tokenizer``) is trained on the training documents and cached under
``data.cache_dir/tokenizers`` like the translation ones.

Text and hub corpora are tokenized once, streaming and in batches, into memory-mapped token shards under
``data.cache_dir/shards`` (ablate/data/token_shards.py, built by ablate/data/shard_build.py); a synthetic
task's few documents stay in memory, in the same form. Nothing else holds a corpus: a split is a flat
token array and its document index (:class:`LMSplit`), and batches gather their rows from it.

Training blocks (nanoGPT's and GPT-2's packing, made document-aware as torchtune's packed datasets): each
document becomes ``[bos] d_1 .. d_n [eos]``, i.e. ``n + 1`` (input, target) pairs; the pairs of all
documents are concatenated and cut into blocks of ``data.max_len`` pairs (the last partial block is
dropped). A block carries one segment id per position, so the model masks attention between documents of a
block and restarts absolute positions at each document: no block mixes two documents' contexts, and no
token is padding (``data/padding_fraction`` is 0). Block ``b`` is pairs ``b*T .. b*T + T - 1`` of that
stream, gathered from the memory map when a batch asks for it (:meth:`LMSplit.blocks`).

Evaluation (:func:`windows`) scores every target of every document exactly once: non-overlapping windows
of the evaluation length, or sliding windows that score ``stride`` new tokens each with the preceding
context (Press et al. 2022, section 4). Bits per byte divide the summed negative log-likelihood (in bits)
by the UTF-8 bytes of the documents plus one per document for its ``eos`` (a newline's worth).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from ablate.data import lm_tasks
from ablate.data.corpus import DataError, expand_env, sha256_json
from ablate.data.lm_sources import (
    DocumentSource,
    cut_documents,
    documents,
    hub_source,
    paragraphs,
    text_source,
)
from ablate.data.prepared import PreparedData
from ablate.data.shard_build import fingerprint_of, open_or_build
from ablate.data.token_shards import TokenDocs
from ablate.data.tokenize import BOS_ID, EOS_ID, PAD_ID, Tokenizers, fixed_wordlevel

if TYPE_CHECKING:
    from ablate.spec.experiment import DataSpec, ExperimentSpec

__all__ = ["IGNORE", "LMBatch", "LMData", "LMSplit", "PackedBatcher", "Window", "cut_documents", "documents",
           "pack", "paragraphs", "prepare_lm", "windows"]

IGNORE = -100  # a target that is not scored (cross_entropy's ignore_index)


@dataclass
class LMSplit:
    docs: TokenDocs  # token ids of each document, no bos/eos: views into a memory map (or an array)
    texts: Sequence[str] | None  # each document's normalised text (evaluation splits; None: not kept)
    n_bytes: int  # UTF-8 bytes of all documents, plus one per document (its eos)
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    _starts: np.ndarray | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_lists(cls, docs: Sequence[Sequence[int]], texts: Sequence[str] | None,
                   n_bytes: int | None = None, bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> LMSplit:
        """A split held in memory (a synthetic task, a held-out file)."""
        if n_bytes is None:
            n_bytes = sum(len(t.encode("utf-8")) + 1 for t in texts) if texts is not None else 0
        return cls(TokenDocs.from_lists(docs), texts, n_bytes, bos_id, eos_id)

    @property
    def n_targets(self) -> int:
        """Predicted positions: every token and each document's eos."""
        return self.docs.n_tokens + len(self.docs)

    def _pair_starts(self) -> np.ndarray:
        """(docs + 1,) where each document's pairs begin (its offset plus one pair per earlier document),
        computed once: 8 bytes a document, whatever the corpus's tokens."""
        if self._starts is None:
            self._starts = np.asarray(self.docs.offsets) + np.arange(len(self.docs.offsets))
        return self._starts

    def n_blocks(self, block_len: int) -> int:
        return self.n_targets // block_len

    def blocks(self, rows: np.ndarray, block_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(inputs, targets, segments) of blocks ``rows``, each (len(rows), block_len) int64, gathered from
        the documents: pair ``k`` of document ``j`` is (bos if k == 0 else d_j[k-1], d_j[k] if k < n_j else
        eos), block ``b`` holds pairs ``b*T .. b*T + T - 1`` of all documents' pairs in order, and a
        segment id is the document's index in the split."""
        offsets = np.asarray(self.docs.offsets)
        pair_starts = self._pair_starts()
        p = rows.astype(np.int64)[:, None] * block_len + np.arange(block_len)  # (B, T) pair indices
        doc = np.searchsorted(pair_starts, p, side="right") - 1  # (B, T)
        k = p - pair_starts[doc]  # position of the pair inside its document
        at = offsets[doc] + k  # the target's place in the flat tokens (its input's is one before)
        n_tokens = max(1, self.docs.n_tokens)
        tokens = self.docs.tokens
        before = np.asarray(tokens[np.clip(at - 1, 0, n_tokens - 1)], dtype=np.int64) if len(tokens) \
            else np.zeros_like(at)
        here = np.asarray(tokens[np.clip(at, 0, n_tokens - 1)], dtype=np.int64) if len(tokens) \
            else np.zeros_like(at)
        inputs = np.where(k == 0, self.bos_id, before)
        targets = np.where(at == offsets[doc + 1], self.eos_id, here)
        return inputs, targets, doc


@dataclass
class LMData(PreparedData):
    """A :class:`PreparedData` whose ``splits`` are empty: the documents live in ``documents``."""

    documents: dict[str, LMSplit] = field(default_factory=dict)
    block_len: int = 128


# ------------------------------------------------------------------ preparing
def _synthetic(data: DataSpec, seed: int) -> LMData:
    """A synthetic LM task: generated in memory (no shards), its lines grouped into documents."""
    cfg = data.synthetic
    assert cfg is not None
    lines = lm_tasks.generate(cfg, seed)
    if data.max_train_examples is not None:
        lines["train"] = lines["train"][:data.max_train_examples]
    texts = {split: documents(ls, data.document_lines, data.lowercase) for split, ls in lines.items()}
    tok = Tokenizers(fixed_wordlevel(lm_tasks.vocabulary(cfg)), None, kind="wordlevel")
    splits: dict[str, LMSplit] = {}
    for split, docs in texts.items():
        if not docs:
            raise DataError(f"the {split} split has no document")
        splits[split] = LMSplit.from_lists(tok.encode_tgt_batch(docs), docs, bos_id=tok.bos_id,
                                           eos_id=tok.eos_id)
    digests = {k: sha256_json(v) for k, v in texts.items()}
    fingerprint = fingerprint_of(digests, tok, data)
    return _lm_data(tok, splits, fingerprint, f"synthetic-{cfg.task}", False, f"synthetic:{cfg.task}", data)


def _lm_data(tok: Tokenizers, splits: dict[str, LMSplit], fingerprint: str, name: str, is_text: bool,
             source: str, data: DataSpec, cached: bool = False) -> LMData:
    stats = {f"{split}_documents": len(s.docs) for split, s in splits.items()}
    stats.update({f"{split}_tokens": s.n_targets for split, s in splits.items()})
    stats["vocab"] = tok.tgt_vocab_size
    return LMData(tok, {}, fingerprint, name, is_text, source, stats, cached=cached, documents=splits,
                  block_len=data.max_len)


def prepare_lm(spec: ExperimentSpec | DataSpec, seed: int = 0) -> LMData:
    """Load, group into documents, tokenize into shards (or open them): the splits of a language model
    (DataError, one line, on bad data)."""
    data = cast("DataSpec", getattr(spec, "data", spec))  # an ExperimentSpec or its DataSpec
    if data.source == "synthetic":
        return _synthetic(data, seed)
    source: DocumentSource = hub_source(data) if data.source == "hub" else text_source(data)
    cache = Path(expand_env(data.cache_dir, "data.cache_dir"))
    shards = open_or_build(source, data, cache)
    splits = {split: LMSplit(docs, texts, shards.n_bytes[split], shards.tokenizers.bos_id,
                             shards.tokenizers.eos_id)
              for split, (docs, texts) in shards.splits.items()}
    fingerprint = fingerprint_of(shards.digests, shards.tokenizers, data)
    return _lm_data(shards.tokenizers, splits, fingerprint, source.name, True, source.source, data,
                    cached=shards.cached)


# ------------------------------------------------------------------ training blocks
Docs = Sequence[Sequence[int]] | LMSplit  # documents as lists (tests, small data) or a prepared split


@dataclass
class LMBatch:
    ids: torch.Tensor  # (B, T) long: the inputs
    targets: torch.Tensor  # (B, T) long: the next tokens, IGNORE where not scored
    segments: torch.Tensor | None  # (B, T) long: the document of each position in a packed block
    n_tgt_tokens: int  # scored targets
    n_padded: int
    indices: list[int]

    @property
    def size(self) -> int:
        return int(self.ids.shape[0])

    def model_inputs(self) -> tuple[torch.Tensor, ...]:
        """What the model is called with: ``model(ids, segments)``."""
        return (self.ids,) if self.segments is None else (self.ids, self.segments)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> LMBatch:
        seg = None if self.segments is None else self.segments.to(device, non_blocking=non_blocking)
        return replace(self, ids=self.ids.to(device, non_blocking=non_blocking),
                       targets=self.targets.to(device, non_blocking=non_blocking), segments=seg)


def pack(docs: Docs, block_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs, targets, segments), each (blocks, block_len): every document's (input, target) pairs in
    order, cut into blocks; the last partial block is dropped (as nanoGPT's get_batch never reads past
    the end). Segment ids count documents over the whole stream. (All blocks at once: for small data and
    tests; training gathers the rows of each batch, :class:`PackedBatcher`.)"""
    split = docs if isinstance(docs, LMSplit) else LMSplit.from_lists(docs, None, 0)
    n = _checked_blocks(split, block_len)
    return split.blocks(np.arange(n), block_len)


def _checked_blocks(split: LMSplit, block_len: int) -> int:
    n = split.n_blocks(block_len)
    if n == 0:
        raise DataError(f"the training text has {split.n_targets} tokens, fewer than one block of "
                        f"data.max_len {block_len}")
    return n


class _Batches(Sequence[np.ndarray]):
    """An epoch's batches as slices of one permutation (no list of arrays for a corpus of millions of
    blocks): batch ``i`` is ``order[i*rows:(i+1)*rows]``."""

    def __init__(self, order: np.ndarray, rows: int, n: int) -> None:
        self.order, self.rows, self.n = order, rows, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]  # type: ignore[return-value]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.order[i * self.rows:(i + 1) * self.rows]


class PackedBatcher:
    """Batches of ``batch_tokens // block_len`` blocks, shuffled per epoch from (seed, epoch); the same
    interface as :class:`ablate.data.batching.TokenBatcher` (the trainer uses either). Only the epoch's
    permutation of block numbers is held; a batch's rows are gathered from the split when collated, so
    rank ``r`` of a DDP run reads only its own blocks."""

    def __init__(self, split: LMSplit, block_len: int, batch_tokens: int, seed: int, shuffle: bool = True,
                 rank: int = 0, world_size: int = 1) -> None:
        self.split, self.block_len = split, block_len
        self.n_blocks = _checked_blocks(split, block_len)
        self.rows = max(1, batch_tokens // block_len)
        self.seed, self.shuffle, self.rank, self.world_size = seed, shuffle, rank, world_size
        if self.n_blocks < world_size:
            raise ValueError(f"{self.n_blocks} blocks cannot feed {world_size} ranks")
        self._memo: tuple[int, _Batches] | None = None  # the trainer asks once per micro-batch

    def all_batches(self, epoch: int) -> Sequence[np.ndarray]:
        if self._memo is not None and self._memo[0] == epoch:
            return self._memo[1]
        n = self.n_blocks
        order = np.random.default_rng([self.seed, epoch]).permutation(n) if self.shuffle else np.arange(n)
        count = math.ceil(n / self.rows)
        usable = count - count % self.world_size  # every rank the same number of steps
        self._memo = (epoch, _Batches(order, self.rows, min(count, max(usable, self.world_size))))
        return self._memo[1]

    def num_batches(self, epoch: int = 0) -> int:
        return len(self.all_batches(epoch)) // self.world_size

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        batches = self.all_batches(epoch)
        return [batches[i].tolist() for i in range(self.rank, len(batches), self.world_size)]

    def collate(self, indices: Sequence[int]) -> LMBatch:
        rows = np.asarray(indices, dtype=np.int64)
        inputs, targets, segments = self.split.blocks(rows, self.block_len)
        return LMBatch(torch.from_numpy(inputs), torch.from_numpy(targets), torch.from_numpy(segments),
                       int(rows.size * self.block_len), 0, rows.tolist())

    def padding_fraction(self, epoch: int = 0) -> float:
        return 0.0  # packed: every position is a real token


# ------------------------------------------------------------------ evaluation windows
@dataclass
class Window:
    ids: list[int]  # inputs, at positions 0 .. len-1 of the window
    targets: list[int]  # next tokens, IGNORE where already scored by an earlier window


def windows(docs: Docs, length: int, stride: int | None = None) -> Iterator[Window]:
    """Evaluation windows of at most ``length`` positions over each document's (input, target) pairs,
    scoring every target once. ``stride`` None: non-overlapping windows (each starts without context);
    else windows start every ``stride`` pairs and score only the pairs no earlier window scored, with up
    to ``length - stride`` pairs of context before them (Press et al. 2022's sliding evaluation). A split's
    documents are read one at a time from its memory map."""
    bos, eos = (docs.bos_id, docs.eos_id) if isinstance(docs, LMSplit) else (BOS_ID, EOS_ID)
    step = length if stride is None else min(stride, length)
    for d in (docs.docs if isinstance(docs, LMSplit) else docs):
        ids = d.tolist() if isinstance(d, np.ndarray) else list(d)
        inputs = [bos, *ids]
        targets = [*ids, eos]
        n = len(inputs)
        scored = 0
        while scored < n:
            end = min(n, length if scored == 0 else scored + step)  # this window scores [scored, end)
            begin = scored if stride is None else max(0, end - length)  # the most context that fits
            yield Window(inputs[begin:end], [IGNORE] * (scored - begin) + targets[scored:end])
            scored = end


def window_batches(docs: Docs, length: int, stride: int | None, batch_tokens: int,
                   pad_id: int = PAD_ID) -> Iterator[LMBatch]:
    """The windows, right-padded into batches of about ``batch_tokens`` positions (a causal query never
    sees the padding after it, and padded targets are IGNORE)."""
    rows = max(1, batch_tokens // length)
    chunk: list[Window] = []
    for w in windows(docs, length, stride):
        chunk.append(w)
        if len(chunk) == rows:
            yield _collate_windows(chunk, pad_id)
            chunk = []
    if chunk:
        yield _collate_windows(chunk, pad_id)


def _collate_windows(chunk: list[Window], pad_id: int) -> LMBatch:
    width = max(len(w.ids) for w in chunk)
    ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
    targets = torch.full((len(chunk), width), IGNORE, dtype=torch.long)
    for r, w in enumerate(chunk):
        ids[r, :len(w.ids)] = torch.tensor(w.ids)
        targets[r, :len(w.targets)] = torch.tensor(w.targets)
    scored = int(targets.ne(IGNORE).sum())
    return LMBatch(ids, targets, None, scored, int(ids.numel()) - sum(len(w.ids) for w in chunk), [])


def bits_per_byte(nats: float, n_bytes: int) -> float:
    """Summed negative log-likelihood (nats) -> bits per UTF-8 byte of the text."""
    return nats / math.log(2) / max(1, n_bytes)
