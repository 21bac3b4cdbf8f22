"""Tokenizers trained with Hugging Face ``tokenizers``, cached on disk by fingerprint.

Kinds (``data.tokenizer.kind``):

* ``bpe`` (default): BPE over a Metaspace pre-tokenizer (SentencePiece style:
  spaces become ``▁`` and the Metaspace decoder restores them), so
  ``decode_tgt`` returns detokenized text. Preset A: joint BPE 30k.
* ``wordlevel``: whitespace/punctuation words with ``min_freq`` (the HF
  tutorial's WordLevel + Whitespace, one per language, as in preset e-notebook-2024-scalar-ln); decoding
  joins words by spaces.
* ``char``: one token per character (Metaspace keeps the spaces).
* ``file``: a tokenizer of one's own, a Hugging Face ``tokenizers`` JSON
  (``data.tokenizer.path``: GPT-2's, Llama's, one's own), used as it is for
  both sides (ablate/data/tokenizer_file.py); nothing is trained.

``joint`` trains one vocabulary on both sides; otherwise one per side. A
trained tokenizer's special tokens have the same ids everywhere: pad 0, bos 1,
eos 2, unk 3; a tokenizer file keeps its own, found by name (or named in
``data.tokenizer.specials``) and carried on the :class:`Tokenizers` object.
Text that *looks* like a special token (``<s>``) is never read as one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from ablate.data.corpus import DataError, atomic_write, sha256_json

if TYPE_CHECKING:
    from ablate.spec.experiment import TokenizerSpec

log = logging.getLogger(__name__)

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
CACHE_VERSION = 1


def normalize(text: str, lowercase: bool) -> str:
    """The text normalisation every sentence gets before tokenization (and that references get)."""
    text = text.strip()
    return text.lower() if lowercase else text


class Tokenizers:
    """The source and target tokenizers of a run (one object twice when joint).

    ``encode_src`` / ``encode_tgt`` normalise (strip, ``lowercase``) and
    tokenize; they never reverse. ``model_src`` gives what the model reads:
    ``encode_src`` reversed when ``reverse_source`` is set (preset d-multi30k-2019-postnorm-conv1d), then
    opened with bos when ``source_bos`` and ended with eos when ``source_eos`` (``data.source_bos`` /
    ``data.source_eos``), which is how ``Split.src_ids`` are built, so user text at translation time can be
    encoded exactly like the training data in one call.
    """

    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    unk_id: int | None = UNK_ID  # a byte-level tokenizer file has none

    def __init__(self, src: Tokenizer, tgt: Tokenizer | None = None, *, kind: str = "bpe",
                 lowercase: bool = False, reverse_source: bool = False, source_bos: bool = False,
                 source_eos: bool = False, specials: dict[str, int | None] | None = None) -> None:
        self.src = src
        self.tgt = tgt if tgt is not None else src
        self.joint = tgt is None or tgt is src
        self.kind = kind
        self.lowercase = lowercase
        self.reverse_source = reverse_source
        self.source_bos = source_bos
        self.source_eos = source_eos
        self.specials = specials  # a tokenizer file's ids (None: the trained layout, 0..3)
        if specials is not None:
            self.pad_id, self.bos_id, self.eos_id = (int(specials[k] or 0) for k in ("pad", "bos", "eos"))
            self.unk_id = specials.get("unk")
        for tok in {id(self.src): self.src, id(self.tgt): self.tgt}.values():
            tok.encode_special_tokens = True  # "<s>" in a sentence is text, not bos
            if specials is not None:
                continue
            found = [tok.token_to_id(s) for s in SPECIALS]
            if found != [PAD_ID, BOS_ID, EOS_ID, UNK_ID]:
                raise ValueError(f"special tokens {SPECIALS} must have ids 0..3, found {found}")

    @property
    def src_vocab_size(self) -> int:
        return int(self.src.get_vocab_size())

    @property
    def tgt_vocab_size(self) -> int:
        return int(self.tgt.get_vocab_size())

    # ---------------------------------------------------------- encoding
    def encode_src(self, text: str) -> list[int]:
        return self.encode_src_batch([text])[0]

    def encode_tgt(self, text: str) -> list[int]:
        """Target ids without bos/eos (the batcher adds them)."""
        return self.encode_tgt_batch([text])[0]

    def encode_src_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return _encode(self.src, [normalize(t, self.lowercase) for t in texts])

    def model_src(self, text: str, limit: int | None = None) -> list[int]:
        """The source ids the model reads: ``encode_src``, reversed when ``reverse_source``, cut to its first
        ``limit`` ids, then bos before and eos after when ``source_bos`` / ``source_eos`` (so a cut source
        keeps its markers)."""
        return self.model_src_batch([text], limit)[0]

    def model_src_batch(self, texts: Sequence[str], limit: int | None = None) -> list[list[int]]:
        ids = self.ordered_src_batch(texts)
        return self.mark_sources([row[:limit] for row in ids] if limit is not None else ids)

    def ordered_src_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode_src`` in the order the model reads (reversed when ``reverse_source``), without markers."""
        ids = self.encode_src_batch(texts)
        return [row[::-1] for row in ids] if self.reverse_source else ids

    def mark_sources(self, rows: list[list[int]]) -> list[list[int]]:
        """Ordered source ids as the model reads them: bos first when ``source_bos``, eos last when
        ``source_eos``."""
        if not (self.source_bos or self.source_eos):
            return rows
        head, tail = [self.bos_id] * self.source_bos, [self.eos_id] * self.source_eos
        return [[*head, *row, *tail] for row in rows]

    def encode_tgt_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return _encode(self.tgt, [normalize(t, self.lowercase) for t in texts])

    def encode_normalised_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Target-side ids of texts already normalised, as they are (a document's later piece keeps the
        space in front of it: ablate/data/lm_sources.py)."""
        return _encode(self.tgt, list(texts))

    # ---------------------------------------------------------- decoding
    def decode_tgt(self, ids: Sequence[int]) -> str:
        """Detokenized text; stops at eos, drops pad/bos, keeps unknowns visible as <unk>."""
        return self.tgt.decode(self._strip(ids), skip_special_tokens=False)

    def decode_src(self, ids: Sequence[int]) -> str:
        """The inverse of ``encode_src`` (pass ``model_src`` ids reversed back when reverse_source)."""
        return self.src.decode(self._strip(ids), skip_special_tokens=False)

    def _strip(self, ids: Sequence[int]) -> list[int]:
        """Up to the first eos, without pad and bos."""
        out: list[int] = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                out.append(i)
        return out

    # ---------------------------------------------------------- persistence
    def to_json(self) -> str:
        return json.dumps({
            "version": CACHE_VERSION, "kind": self.kind, "lowercase": self.lowercase,
            "reverse_source": self.reverse_source, "source_bos": self.source_bos,
            "source_eos": self.source_eos, "src": self.src.to_str(),
            "tgt": None if self.joint else self.tgt.to_str(),
            **({"specials": self.specials} if self.specials is not None else {}),
        })

    @classmethod
    def from_json(cls, text: str) -> Tokenizers:
        data = json.loads(text)
        tgt = Tokenizer.from_str(data["tgt"]) if data["tgt"] is not None else None
        return cls(Tokenizer.from_str(data["src"]), tgt, kind=data["kind"], lowercase=data["lowercase"],
                   reverse_source=data["reverse_source"], source_bos=data.get("source_bos", False),
                   source_eos=data.get("source_eos", False), specials=data.get("specials"))

    def save(self, path: str | Path) -> None:
        atomic_write(Path(path), self.to_json().encode())

    @classmethod
    def load(cls, path: str | Path) -> Tokenizers:
        return cls.from_json(Path(path).read_text(encoding="utf-8"))


def _encode(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)  # no offsets: ~2x faster
    return [e.ids for e in encode(texts, add_special_tokens=False)]


# ------------------------------------------------------------------ building and training
def fixed_wordlevel(words: Sequence[str]) -> Tokenizer:
    """A word-level tokenizer over a known vocabulary (synthetic tasks): nothing to train."""
    vocab = {token: i for i, token in enumerate([*SPECIALS, *words])}
    if len(vocab) != len(SPECIALS) + len(words):
        raise ValueError("duplicate words in the vocabulary")
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def train_tokenizer(kind: str, texts: Iterable[str], vocab_size: int, min_freq: int) -> Tokenizer:
    """Train one tokenizer of ``kind`` on ``texts`` (already normalised; a list, or a stream of them)."""
    common: dict[str, Any] = {"special_tokens": list(SPECIALS), "show_progress": False}
    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        trainer: Any = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_freq, **common)
    elif kind == "wordlevel":
        tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()  # words and punctuation; decode joins by spaces
        trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=min_freq, **common)
    elif kind == "char":
        tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
            pre_tokenizers.Split(Regex("."), behavior="isolated"),
        ])
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=min_freq, **common)
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}")
    tok.train_from_iterator(texts, trainer, length=len(texts) if isinstance(texts, Sized) else None)
    return tok


def tokenizer_key(source_digest: str, spec: TokenizerSpec, lowercase: bool,
                  max_train_examples: int | None) -> str:
    """What decides a trained tokenizer: the training text's content and the tokenizer settings."""
    return sha256_json({"v": CACHE_VERSION, "source": source_digest, "lowercase": lowercase,
                        "tokenizer": spec.model_dump(mode="json"),
                        "max_train_examples": max_train_examples})[:24]


def load_or_train(cache_dir: Path, key: str, spec: TokenizerSpec, src_texts: Sequence[str],
                  tgt_texts: Sequence[str], *, lowercase: bool, reverse_source: bool,
                  source_bos: bool = False, source_eos: bool = False) -> tuple[Tokenizers, bool]:
    """Tokenizers from ``cache_dir/tokenizers/<key>.json``, else trained now and cached.

    Returns (tokenizers, whether they were trained now).
    """
    path = cache_dir / "tokenizers" / f"{key}.json"

    def make(src: Tokenizer, tgt: Tokenizer | None) -> Tokenizers:
        return Tokenizers(src, tgt, kind=spec.kind, lowercase=lowercase, reverse_source=reverse_source,
                          source_bos=source_bos, source_eos=source_eos)

    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            tgt = Tokenizer.from_str(data["tgt"]) if data["tgt"] is not None else None
            return make(Tokenizer.from_str(data["src"]), tgt), False
        except Exception as e:  # a damaged cache file is rebuilt, never fatal
            log.warning("ignoring unreadable tokenizer cache %s: %s", path, e)
    if not src_texts or not tgt_texts:
        raise DataError("the train split is empty: nothing to train the tokenizer on")
    if spec.joint:
        src = train_tokenizer(spec.kind, [*src_texts, *tgt_texts], spec.vocab_size, spec.min_freq)
        tgt = None
    else:
        src = train_tokenizer(spec.kind, src_texts, spec.vocab_size, spec.min_freq)
        tgt = train_tokenizer(spec.kind, tgt_texts, spec.vocab_size, spec.min_freq)
    payload = {"src": src.to_str(), "tgt": None if tgt is None else tgt.to_str(),
               "tokenizer": spec.model_dump(mode="json")}
    atomic_write(path, json.dumps(payload).encode())
    return make(src, tgt), True

