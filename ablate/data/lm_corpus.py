"""Language-modelling data: documents -> one tokenizer -> packed training blocks and evaluation windows.

``prepare_lm(spec)`` is the entry point for ``model.arch: decoder_only`` (``prepare_data`` hands over to
it). Text comes from local files (``source: text``, ``.gz`` accepted, read through ``datasets``' text
loader after our line-by-line check), a hub dataset's text column (``source: hub``, ``hub.field``), or a
synthetic LM task (ablate/data/lm_tasks.py). Text files are cut into documents as ``data.text.documents``
says: at blank lines (prose), every ``data.document_lines`` lines (Multi30k captions), one file per document,
or the whole file as one stream; a hub column or a synthetic task is grouped ``document_lines`` lines at a
time. The lines of a document are joined by a space. One tokenizer (``data.tokenizer``) is trained on
the training documents and cached under ``data.cache_dir/tokenizers`` like the translation ones.

Training blocks (nanoGPT's and GPT-2's packing, made document-aware as torchtune's packed datasets): each
document becomes ``[bos] d_1 .. d_n [eos]``, i.e. ``n + 1`` (input, target) pairs; the pairs of all
documents are concatenated and cut into blocks of ``data.max_len`` pairs (the last partial block is
dropped). A block carries one segment id per position, so the model masks attention between documents of a
block and restarts absolute positions at each document: no block mixes two documents' contexts, and no
token is padding (``data/padding_fraction`` is 0).

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
from ablate.data.corpus import DataError, atomic_write, check_text_file, expand_env, sha256_json
from ablate.data.prepared import PreparedData
from ablate.data.tokenize import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    Tokenizers,
    fixed_wordlevel,
    normalize,
    train_tokenizer,
)

if TYPE_CHECKING:
    from ablate.spec.experiment import DataSpec, ExperimentSpec

__all__ = ["IGNORE", "LMBatch", "LMData", "LMSplit", "PackedBatcher", "Window", "pack", "prepare_lm",
           "windows"]

IGNORE = -100  # a target that is not scored (cross_entropy's ignore_index)
LM_VERSION = 1


@dataclass
class LMSplit:
    docs: list[list[int]]  # token ids of each document, no bos/eos
    texts: list[str]  # each document's normalised text
    n_bytes: int  # UTF-8 bytes of all documents, plus one per document (its eos)

    @property
    def n_targets(self) -> int:
        """Predicted positions: every token and each document's eos."""
        return sum(len(d) + 1 for d in self.docs)


@dataclass
class LMData(PreparedData):
    """A :class:`PreparedData` whose ``splits`` are empty: the documents live in ``documents``."""

    documents: dict[str, LMSplit] = field(default_factory=dict)
    block_len: int = 128


# ------------------------------------------------------------------ loading
def _text_documents(data: DataSpec) -> dict[str, list[str]]:
    """The documents of each ``source: text`` split, cut as ``data.text.documents`` says (normalised)."""
    from ablate.data.check import text_named_paths, text_split_paths

    assert data.text is not None
    mode = data.text.documents or "lines"
    out: dict[str, list[str]] = {}
    for named in text_named_paths(data):
        split = named.field.rsplit(".", 1)[1]
        paths = text_split_paths(named, mode)
        if not paths or not all(p.is_file() for p in paths):
            raise DataError(f"{named.field}: file not found: {named.path}{named.explain()}")
        if mode == "files":  # one document per file, its lines joined like a paragraph's
            out[split] = [d for p in paths if (d := _joined(_read_lines(p, data), data.lowercase))]
            continue
        lines = _read_lines(paths[0], data)
        if mode == "lines" and split == "train":  # lines mode caps lines before grouping them (as it did)
            lines = lines[:data.max_train_examples]
        out[split] = cut_documents(lines, data)
    return out


def cut_documents(lines: Sequence[str], data: DataSpec) -> list[str]:
    """One text's lines cut into documents as the spec cuts its text (``data.text.documents``; a hub
    column or synthetic task: ``document_lines`` at a time); a ``files`` document is the whole text."""
    mode = (data.text.documents if data.text is not None else None) or "lines"
    if mode == "paragraphs":
        return paragraphs(lines, data.lowercase)
    if mode in ("stream", "files"):
        return [d] if (d := _joined(lines, data.lowercase)) else []
    return documents(lines, data.document_lines, data.lowercase)


def _read_lines(path: Path, data: DataSpec) -> list[str]:
    """A text file's lines, blank ones kept (checked line by line first: UTF-8, no stray carriage return)."""
    if check_text_file(path, blank_lines=True) == 0:
        raise DataError(f"{path}: empty file (no line of text)")
    import datasets  # the same loader as translation files (Arrow, cached)

    loaded = datasets.load_dataset("text", data_files={"lines": str(path)},
                                   cache_dir=str(Path(expand_env(data.cache_dir)) / "hf"))["lines"]
    return [line.lstrip("\ufeff") if i == 0 else line for i, line in enumerate(loaded["text"])]


def _joined(lines: Sequence[str], lowercase: bool) -> str:
    """Non-blank lines joined by a space (the tokenizers do not model line breaks)."""
    return " ".join(clean for line in lines if (clean := normalize(line, lowercase)))


def paragraphs(lines: Sequence[str], lowercase: bool) -> list[str]:
    """One document per run of non-blank lines: a blank line (or several) ends a document."""
    docs: list[str] = []
    current: list[str] = []
    for line in [*lines, ""]:
        clean = normalize(line, lowercase)
        if clean:
            current.append(clean)
        elif current:
            docs.append(" ".join(current))
            current = []
    return docs


def _lines_of_hub(data: DataSpec) -> dict[str, list[str]]:
    assert data.hub is not None and data.hub.field is not None
    import datasets

    hub = data.hub
    label = hub.name if hub.config is None else f"{hub.name}/{hub.config}"
    try:
        loaded = datasets.load_dataset(hub.name, hub.config, revision=hub.revision,
                                       cache_dir=str(Path(expand_env(data.cache_dir)) / "hf"))
    except Exception as e:  # the hub raises many types; the user needs one line
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"data.hub: cannot load dataset {label!r}: {message}") from e
    out: dict[str, list[str]] = {}
    for split, name in (("train", hub.train_split), ("val", hub.val_split), ("test", hub.test_split)):
        if name is None or (split == "test" and name not in loaded):
            continue
        if name not in loaded:
            raise DataError(f"data.hub.{split}_split: dataset {label!r} has no split {name!r}; "
                            f"splits: {', '.join(loaded)}")
        if hub.field not in loaded[name].column_names:
            raise DataError(f"data.hub.field: {label}[{name}] has no column {hub.field!r}; columns: "
                            f"{', '.join(loaded[name].column_names)}")
        out[split] = [t for t in loaded[name][hub.field] if isinstance(t, str) and t.strip()]
    return out


def documents(lines: Sequence[str], per_document: int, lowercase: bool) -> list[str]:
    """Consecutive lines joined by a space, ``per_document`` at a time (the last document may be shorter)."""
    clean = [normalize(line, lowercase) for line in lines]
    clean = [line for line in clean if line]
    return [" ".join(clean[i:i + per_document]) for i in range(0, len(clean), per_document)]


def _tokenizer(data: DataSpec, docs: list[str], digest: str) -> Tokenizers:
    """One tokenizer for the language model, trained on the training documents (cached by content)."""
    spec = data.tokenizer
    cache = Path(expand_env(data.cache_dir, "data.cache_dir")) / "tokenizers"
    key = sha256_json({"v": LM_VERSION, "lm": digest, "tokenizer": spec.model_dump(mode="json")})[:24]
    path = cache / f"lm-{key}.json"
    if path.is_file():
        try:
            return Tokenizers.from_json(path.read_text(encoding="utf-8"))
        except Exception:  # noqa: BLE001 - a damaged cache file is rebuilt, never fatal
            pass
    if not docs:
        raise DataError("the train split is empty: nothing to train the tokenizer on")
    tok = Tokenizers(train_tokenizer(spec.kind, docs, spec.vocab_size, spec.min_freq), None, kind=spec.kind,
                     lowercase=data.lowercase)
    atomic_write(path, tok.to_json().encode())
    return tok


def _source_documents(data: DataSpec, seed: int) -> tuple[dict[str, list[str]], Tokenizers | None, str, str]:
    """Each split's documents, the tokenizer a synthetic task fixes (else None), the data's name, source."""
    if data.source == "synthetic":
        cfg = data.synthetic
        assert cfg is not None
        lines = lm_tasks.generate(cfg, seed)
        tok = Tokenizers(fixed_wordlevel(lm_tasks.vocabulary(cfg)), None, kind="wordlevel")
        return _grouped(lines, data), tok, f"synthetic-{cfg.task}", f"synthetic:{cfg.task}"
    if data.source == "hub":
        assert data.hub is not None
        return _grouped(_lines_of_hub(data), data), None, data.hub.name, f"hf://{data.hub.name}"
    assert data.text is not None
    folder = Path(expand_env(data.text.root)).name if data.text.root else ""
    train = Path(data.text.train).name
    name = f"{folder}/{train}" if folder else train  # e.g. 'multi30k/train.en.gz'
    source = str(Path(expand_env(data.text.root or "")) / data.text.train)
    texts = _text_documents(data)
    if data.max_train_examples is not None and data.text.documents != "lines":
        texts["train"] = texts["train"][:data.max_train_examples]  # documents (lines mode caps lines)
    return texts, None, name, source


def _grouped(lines: dict[str, list[str]], data: DataSpec) -> dict[str, list[str]]:
    """Lines (a hub column, a synthetic task) grouped ``document_lines`` at a time, the train lines capped."""
    if data.max_train_examples is not None:
        lines["train"] = lines["train"][:data.max_train_examples]
    return {split: documents(ls, data.document_lines, data.lowercase) for split, ls in lines.items()}


def prepare_lm(spec: ExperimentSpec | DataSpec, seed: int = 0) -> LMData:
    """Load, group into documents, tokenize: the splits of a language model (DataError on bad data)."""
    data = cast("DataSpec", getattr(spec, "data", spec))  # an ExperimentSpec or its DataSpec
    texts, fixed, name, source = _source_documents(data, seed)
    digest = sha256_json({"v": LM_VERSION, **{k: sha256_json(v) for k, v in texts.items()}})
    tok = fixed or _tokenizer(data, texts["train"], digest)
    splits: dict[str, LMSplit] = {}
    for split, docs in texts.items():
        if not docs:
            raise DataError(f"the {split} split has no document")
        ids = tok.encode_tgt_batch(docs)
        splits[split] = LMSplit(ids, docs, sum(len(d.encode("utf-8")) + 1 for d in docs))
    stats = {f"{split}_documents": len(s.docs) for split, s in splits.items()}
    stats.update({f"{split}_tokens": s.n_targets for split, s in splits.items()})
    stats["vocab"] = tok.tgt_vocab_size
    fingerprint = sha256_json({"digest": digest, "tok": sha256_json(tok.to_json()),
                               "block": data.max_len, "lines": data.document_lines})[:16]
    return LMData(tok, {}, fingerprint, name, data.source != "synthetic", source, stats,
                  documents=splits, block_len=data.max_len)


# ------------------------------------------------------------------ training blocks
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


def pack(docs: Sequence[Sequence[int]], block_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs, targets, segments), each (blocks, block_len): every document's (input, target) pairs in
    order, cut into blocks; the last partial block is dropped (as nanoGPT's get_batch never reads past
    the end). Segment ids count documents over the whole stream."""
    lengths = np.fromiter((len(d) + 1 for d in docs), dtype=np.int64, count=len(docs))
    total = int(lengths.sum())
    seq = np.empty(total + len(docs), dtype=np.int64)  # [bos] d [eos] per document
    at = 0
    for d in docs:
        seq[at] = BOS_ID
        seq[at + 1:at + 1 + len(d)] = d
        seq[at + 1 + len(d)] = EOS_ID
        at += len(d) + 2
    starts = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]])  # where each document's bos sits
    pair = np.ones(len(seq), dtype=bool)
    pair[starts + lengths] = False  # an eos is never an input
    inputs = seq[pair]
    targets = seq[np.roll(pair, 1)]  # the token after each input
    segments = np.repeat(np.arange(len(docs)), lengths)
    n = total // block_len
    if n == 0:
        raise DataError(f"the training text has {total} tokens, fewer than one block of data.max_len "
                        f"{block_len}")
    cut = n * block_len
    return (inputs[:cut].reshape(n, block_len), targets[:cut].reshape(n, block_len),
            segments[:cut].reshape(n, block_len))


class PackedBatcher:
    """Batches of ``batch_tokens // block_len`` blocks, shuffled per epoch from (seed, epoch); the same
    interface as :class:`ablate.data.batching.TokenBatcher` (the trainer uses either)."""

    def __init__(self, split: LMSplit, block_len: int, batch_tokens: int, seed: int, shuffle: bool = True,
                 rank: int = 0, world_size: int = 1) -> None:
        self.inputs, self.targets, self.segments = pack(split.docs, block_len)
        self.rows = max(1, batch_tokens // block_len)
        self.seed, self.shuffle, self.rank, self.world_size = seed, shuffle, rank, world_size
        if len(self.inputs) < world_size:
            raise ValueError(f"{len(self.inputs)} blocks cannot feed {world_size} ranks")
        self._memo: tuple[int, list[np.ndarray]] | None = None  # the trainer asks once per micro-batch

    def all_batches(self, epoch: int) -> list[np.ndarray]:
        if self._memo is not None and self._memo[0] == epoch:
            return self._memo[1]
        n = len(self.inputs)
        order = np.random.default_rng([self.seed, epoch]).permutation(n) if self.shuffle else np.arange(n)
        batches = [order[i:i + self.rows] for i in range(0, n, self.rows)]
        usable = len(batches) - len(batches) % self.world_size  # every rank the same number of steps
        self._memo = (epoch, batches[:max(usable, self.world_size)])
        return self._memo[1]

    def num_batches(self, epoch: int = 0) -> int:
        return len(self.all_batches(epoch)) // self.world_size

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        return [b.tolist() for b in self.all_batches(epoch)[self.rank::self.world_size]]

    def collate(self, indices: Sequence[int]) -> LMBatch:
        rows = np.asarray(indices, dtype=np.int64)
        return LMBatch(torch.from_numpy(self.inputs[rows]), torch.from_numpy(self.targets[rows]),
                       torch.from_numpy(self.segments[rows]), int(rows.size * self.inputs.shape[1]), 0,
                       rows.tolist())

    def padding_fraction(self, epoch: int = 0) -> float:
        return 0.0  # packed: every position is a real token


# ------------------------------------------------------------------ evaluation windows
@dataclass
class Window:
    ids: list[int]  # inputs, at positions 0 .. len-1 of the window
    targets: list[int]  # next tokens, IGNORE where already scored by an earlier window


def windows(docs: Sequence[Sequence[int]], length: int, stride: int | None = None) -> Iterator[Window]:
    """Evaluation windows of at most ``length`` positions over each document's (input, target) pairs,
    scoring every target once. ``stride`` None: non-overlapping windows (each starts without context);
    else windows start every ``stride`` pairs and score only the pairs no earlier window scored, with up
    to ``length - stride`` pairs of context before them (Press et al. 2022's sliding evaluation)."""
    step = length if stride is None else min(stride, length)
    for d in docs:
        inputs = [BOS_ID, *d]
        targets = [*d, EOS_ID]
        n = len(inputs)
        scored = 0
        while scored < n:
            end = min(n, length if scored == 0 else scored + step)  # this window scores [scored, end)
            begin = scored if stride is None else max(0, end - length)  # the most context that fits
            yield Window(inputs[begin:end], [IGNORE] * (scored - begin) + targets[scored:end])
            scored = end


def window_batches(docs: Sequence[Sequence[int]], length: int, stride: int | None, batch_tokens: int
                   ) -> Iterator[LMBatch]:
    """The windows, right-padded into batches of about ``batch_tokens`` positions (a causal query never
    sees the padding after it, and padded targets are IGNORE)."""
    rows = max(1, batch_tokens // length)
    chunk: list[Window] = []
    for w in windows(docs, length, stride):
        chunk.append(w)
        if len(chunk) == rows:
            yield _collate_windows(chunk)
            chunk = []
    if chunk:
        yield _collate_windows(chunk)


def _collate_windows(chunk: list[Window]) -> LMBatch:
    width = max(len(w.ids) for w in chunk)
    ids = torch.full((len(chunk), width), PAD_ID, dtype=torch.long)
    targets = torch.full((len(chunk), width), IGNORE, dtype=torch.long)
    for r, w in enumerate(chunk):
        ids[r, :len(w.ids)] = torch.tensor(w.ids)
        targets[r, :len(w.targets)] = torch.tensor(w.targets)
    scored = int(targets.ne(IGNORE).sum())
    return LMBatch(ids, targets, None, scored, int(ids.numel()) - sum(len(w.ids) for w in chunk), [])


def bits_per_byte(nats: float, n_bytes: int) -> float:
    """Summed negative log-likelihood (nats) -> bits per UTF-8 byte of the text."""
    return nats / math.log(2) / max(1, n_bytes)
