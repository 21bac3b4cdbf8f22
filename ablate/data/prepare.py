"""Corpora (synthetic | files | hub) -> tokenizers -> length-bucketed token batches.

``prepare_data(spec)`` is the one entry point: it returns the three splits as
token ids (and their normalised text, the references for BLEU), the
tokenizers, and a fingerprint of the data for ``mlflow.log_input``.

* synthetic (default): ``ablate/data/synthetic.py``; generated in memory, nothing written.
* files / hub: ``ablate/data/corpus.py`` loads and checks the text, ``ablate/data/tokenize.py``
  trains (or reloads) the tokenizers; the encoded splits are cached under
  ``data.cache_dir/prepared/<key>.npz``, keyed by the raw content digest and
  every option that changes the result, so a second run reads one file.

Preprocessing, in order: strip + ``lowercase`` (both sides), ``max_train_examples``
(the first N training pairs), tokenization, ``reverse_source`` (the source
token order is reversed, as in preset d-multi30k-2019-postnorm-conv1d), then the ``max_len`` filter on train
(pairs whose source or target ids plus bos/eos exceed ``max_len`` are dropped), then the source markers:
``source_bos`` opens and ``source_eos`` ends every source (fairseq's translation task appends eos; the
Annotated Transformer and tutorials a, d and e wrap the source in both). Val and test are never filtered
(scores stay comparable); their ids are truncated to ``max_len - 2`` before the markers so positions stay
in range, their text stays whole.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ablate.data import synthetic
from ablate.data.batching import Batch, TokenBatcher
from ablate.data.corpus import (
    Corpus,
    DataError,
    atomic_write,
    expand_env,
    files_digest,
    load_files,
    load_hub,
    resolve_files,
    sha256_json,
)
from ablate.data.lm_corpus import prepare_lm  # decoder-only language modelling: documents, blocks
from ablate.data.prepared import PreparedData, Split
from ablate.data.tokenize import Tokenizers, fixed_wordlevel, load_or_train, normalize, tokenizer_key
from ablate.data.tokenizer_file import load_tokenizer_file, tokenizer_file_identity

if TYPE_CHECKING:
    from ablate.spec.experiment import DataSpec, ExperimentSpec

__all__ = ["Batch", "DataError", "PreparedData", "Split", "TokenBatcher", "Tokenizers", "prepare_data"]

log = logging.getLogger(__name__)
PREPARED_VERSION = 1


def prepare_data(spec: ExperimentSpec | DataSpec, seed: int | None = None) -> PreparedData:
    """Load, check, tokenize and split the data a spec names; raises DataError (one line) on bad data."""
    data = cast("DataSpec", getattr(spec, "data", spec))  # an ExperimentSpec or its DataSpec
    seed = seed if seed is not None else int(getattr(spec, "seed", 0))
    start = time.perf_counter()
    model = getattr(spec, "model", None)
    if data.is_lm or getattr(model, "arch", "") == "decoder_only":
        prepared: PreparedData = prepare_lm(data, seed)
    elif data.source == "synthetic":
        prepared = _prepare_synthetic(data, seed)
    else:
        prepared = _prepare_corpus(data)
    log.info("data %s: %s in %.2fs (%s)", prepared.name, prepared.stats,
             time.perf_counter() - start, "cached" if prepared.cached else "built")
    return prepared


# ------------------------------------------------------------------ synthetic
def _prepare_synthetic(data: DataSpec, seed: int) -> PreparedData:
    cfg = data.synthetic
    assert cfg is not None
    texts = synthetic.generate(cfg, seed)
    tok = fixed_wordlevel(synthetic.vocabulary(cfg))
    tokenizers = Tokenizers(tok, None, kind="wordlevel", lowercase=data.lowercase,
                            reverse_source=data.reverse_source, source_bos=data.source_bos,
                            source_eos=data.source_eos)
    pairs = {split: ([normalize(s, data.lowercase) for s in src], [normalize(t, data.lowercase) for t in tgt])
             for split, (src, tgt) in texts.items()}
    if data.max_train_examples is not None:
        src, tgt = pairs["train"]
        pairs["train"] = (src[:data.max_train_examples], tgt[:data.max_train_examples])
    splits, stats = _encode_splits(pairs, tokenizers, data.max_len)
    content = hashlib.sha256()
    for split in sorted(splits):
        for line in (*splits[split].src_text, *splits[split].tgt_text):
            content.update(line.encode() + b"\n")
    options = {"v": PREPARED_VERSION, "content": content.hexdigest(), "reverse": data.reverse_source,
               "max_len": data.max_len, **_marker_key(data)}
    return PreparedData(tokenizers, splits, sha256_json(options)[:16], f"synthetic-{cfg.task}", False,
                        f"synthetic:{cfg.task}", stats)


# ------------------------------------------------------------------ files and hub
def _prepare_corpus(data: DataSpec) -> PreparedData:
    cache_dir = Path(expand_env(data.cache_dir, "data.cache_dir"))
    corpus: Corpus | None = None
    if data.source == "files":
        assert data.files is not None
        roles = resolve_files(data.files)
        digest = files_digest(roles, data.files, data.src_lang, data.tgt_lang)
    else:
        assert data.hub is not None
        corpus = load_hub(data.hub, data.src_lang, data.tgt_lang, cache_dir)
        digest = corpus.digest
    key = _prepared_key(digest, data)
    path = cache_dir / "prepared" / f"{key}.npz"
    cached = _read_prepared(path, key)
    if cached is not None:
        return cached
    if corpus is None:
        assert data.files is not None
        corpus = load_files(data.files, data.src_lang, data.tgt_lang, cache_dir, roles, digest)
    pairs = _normalized_in_place(corpus, data.lowercase)
    if data.max_train_examples is not None:
        src, tgt = pairs["train"]
        pairs["train"] = (src[:data.max_train_examples], tgt[:data.max_train_examples])
    tok_key = tokenizer_key(digest, data.tokenizer, data.lowercase, data.max_train_examples)
    if data.tokenizer.kind == "file":  # one's own tokenizer, for both sides: nothing to train
        tokenizers = load_tokenizer_file(data.tokenizer, lowercase=data.lowercase,
                                         reverse_source=data.reverse_source, source_bos=data.source_bos,
                                         source_eos=data.source_eos)
        trained = False
    else:
        tokenizers, trained = load_or_train(cache_dir, tok_key, data.tokenizer, *pairs["train"],
                                            lowercase=data.lowercase, reverse_source=data.reverse_source,
                                            source_bos=data.source_bos, source_eos=data.source_eos)
    splits, stats = _encode_splits(pairs, tokenizers, data.max_len)
    stats.update({f"{split}_dropped_empty": n for split, n in corpus.dropped.items() if n})
    prepared = PreparedData(tokenizers, splits, key[:16], corpus.name, True, corpus.source, stats)
    _write_prepared(path, key, prepared)
    log.info("tokenizer %s (%s)", tok_key, "trained" if trained else "cached")
    return prepared


def _normalized_in_place(corpus: Corpus, lowercase: bool) -> dict[str, tuple[list[str], list[str]]]:
    """Each split's sentences normalised where they are loaded, one sentence at a time: the corpus is held
    once, never beside a normalised copy of itself."""
    pairs: dict[str, tuple[list[str], list[str]]] = {}
    for split in list(corpus.splits):
        loaded = corpus.splits.pop(split)
        for side in (loaded.src, loaded.tgt):
            for i, text in enumerate(side):
                side[i] = normalize(text, lowercase)
        pairs[split] = (loaded.src, loaded.tgt)
    return pairs


def _prepared_key(digest: str, data: DataSpec) -> str:
    """Everything that changes the prepared splits: raw content and the preprocessing/tokenizer options."""
    return sha256_json({
        "v": PREPARED_VERSION, "digest": digest, "lowercase": data.lowercase,
        "reverse_source": data.reverse_source, "max_len": data.max_len,
        "max_train_examples": data.max_train_examples, "tokenizer": data.tokenizer.model_dump(mode="json"),
        "langs": [data.src_lang, data.tgt_lang], **_marker_key(data), **_file_key(data),
    })[:32]


def _file_key(data: DataSpec) -> dict[str, str]:
    """A tokenizer file's sha256 in the key (only then: trained tokenizers keep their keys)."""
    sha = tokenizer_file_identity(data.tokenizer)
    return {"tokenizer_file": sha} if sha is not None else {}


def _marker_key(data: DataSpec) -> dict[str, bool]:
    """``data.source_bos`` / ``source_eos`` in a data fingerprint only when set: data prepared before they
    existed keeps its key."""
    return {name: True for name in ("source_bos", "source_eos") if getattr(data, name)}


def _encode_splits(pairs: dict[str, tuple[list[str], list[str]]], tokenizers: Tokenizers, max_len: int
                   ) -> tuple[dict[str, Split], dict[str, int]]:
    splits: dict[str, Split] = {}
    stats: dict[str, int] = {}
    limit = max_len - 2  # room for bos and eos (a source's own markers, data.source_bos/eos, take them)
    for split, (src_text, tgt_text) in pairs.items():
        src_ids = tokenizers.ordered_src_batch(src_text)  # reversed when reverse_source; markers come last
        tgt_ids = tokenizers.encode_tgt_batch(tgt_text)
        if split == "train":
            keep = [i for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True))
                    if len(s) <= limit and len(t) <= limit]
            stats["train_filtered"] = len(src_ids) - len(keep)
            if not keep:
                raise DataError(f"the train split is empty after the max_len filter: no pair of "
                                f"{len(src_ids)} fits data.max_len {max_len} (ids incl. bos/eos); "
                                f"raise data.max_len")
            if len(keep) < len(src_ids):
                src_ids, tgt_ids = [src_ids[i] for i in keep], [tgt_ids[i] for i in keep]
                src_text, tgt_text = [src_text[i] for i in keep], [tgt_text[i] for i in keep]
        else:
            stats[f"{split}_truncated"] = sum(len(s) > limit or len(t) > limit
                                              for s, t in zip(src_ids, tgt_ids, strict=True))
            src_ids = [s[:limit] for s in src_ids]
            tgt_ids = [t[:limit] for t in tgt_ids]
        if not src_ids:
            raise DataError(f"the {split} split is empty")
        splits[split] = Split(tokenizers.mark_sources(src_ids), tgt_ids, src_text, tgt_text)
        stats[split] = len(src_ids)
    stats["src_vocab"] = tokenizers.src_vocab_size
    stats["tgt_vocab"] = tokenizers.tgt_vocab_size
    return splits, stats


# ------------------------------------------------------------------ the prepared cache (one .npz)
def _pack_ints(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = np.fromiter((i for r in rows for i in r), dtype=np.int32, count=int(offsets[-1]))
    return flat, offsets


def _pack_text(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [t.encode("utf-8") for t in texts]
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in encoded], dtype=np.int64)])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def _write_prepared(path: Path, key: str, prepared: PreparedData) -> None:
    arrays: dict[str, np.ndarray] = {}
    for split, s in prepared.splits.items():
        arrays[f"{split}.src"], arrays[f"{split}.src_off"] = _pack_ints(s.src_ids)
        arrays[f"{split}.tgt"], arrays[f"{split}.tgt_off"] = _pack_ints(s.tgt_ids)
        arrays[f"{split}.srct"], arrays[f"{split}.srct_off"] = _pack_text(s.src_text)
        arrays[f"{split}.tgtt"], arrays[f"{split}.tgtt_off"] = _pack_text(s.tgt_text)
    meta = {"key": key, "splits": list(prepared.splits), "fingerprint": prepared.fingerprint,
            "name": prepared.name, "is_text": prepared.is_text, "source": prepared.source,
            "stats": prepared.stats, "tokenizers": prepared.tokenizers.to_json()}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    atomic_write(path, buffer.getvalue())


def _read_prepared(path: Path, key: str) -> PreparedData | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            meta: dict[str, Any] = json.loads(npz["meta"].tobytes())
            if meta["key"] != key:
                return None
            splits = {split: Split(_unpack_ints(npz, f"{split}.src"), _unpack_ints(npz, f"{split}.tgt"),
                                   _unpack_text(npz, f"{split}.srct"), _unpack_text(npz, f"{split}.tgtt"))
                      for split in meta["splits"]}
        tokenizers = Tokenizers.from_json(meta["tokenizers"])
    except Exception as e:  # a damaged cache is rebuilt, never fatal
        log.warning("ignoring unreadable data cache %s: %s", path, e)
        return None
    return PreparedData(tokenizers, splits, meta["fingerprint"], meta["name"], meta["is_text"],
                        meta["source"], meta["stats"], cached=True)


def _unpack_ints(npz: Any, name: str) -> list[list[int]]:
    """The rows of a packed array, each made a list from its own slice (no list of the whole flat array
    beside the rows)."""
    flat: np.ndarray = npz[name]
    offsets: list[int] = npz[f"{name}_off"].tolist()
    return [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def _unpack_text(npz: Any, name: str) -> list[str]:
    raw: bytes = npz[name].tobytes()
    offsets: list[int] = npz[f"{name}_off"].tolist()
    return [raw[a:b].decode("utf-8") for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
