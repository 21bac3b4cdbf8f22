"""A tokenizer of one's own (``data.tokenizer: {kind: file, path: tokenizer.json}``): a Hugging Face
``tokenizers`` JSON, GPT-2's, Llama's or one's own, for language models and translation alike.

The file is used as it is (its normalizer, pre-tokenizer, model and decoder), for both sides of a
translation pair, and nothing is trained. Its sha256 is part of the data identity: the token shards' key,
the translation cache's key and the data fingerprint change when the file does. Its special tokens are
found by name and become the model's pad, bos and eos (and unk, where it has one): the names of
``SPECIAL_NAMES`` in that order, or the tokens ``data.tokenizer.specials`` names; a role that neither
finds is one located line naming it. Ids stay the file's own, so a model trained here indexes the same
vocabulary as the model the file came with.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from ablate.data.paths import DataError, data_path, data_root
from ablate.data.tokenize import Tokenizers

if TYPE_CHECKING:
    from ablate.spec.experiment import TokenizerSpec

__all__ = ["SPECIAL_NAMES", "load_tokenizer_file", "tokenizer_file_identity", "tokenizer_path"]

FIELD = "data.tokenizer.path"
# The names each role goes by in the common tokenizers (SentencePiece, BERT, GPT-2, Llama 3, ChatML).
SPECIAL_NAMES: dict[str, tuple[str, ...]] = {
    "pad": ("<pad>", "[PAD]", "<|pad|>", "<|padding|>", "<|finetune_right_pad_id|>"),
    "bos": ("<s>", "[BOS]", "<bos>", "<|begin_of_text|>", "<|startoftext|>", "[CLS]"),
    "eos": ("</s>", "[EOS]", "<eos>", "<|end_of_text|>", "<|endoftext|>", "[SEP]"),
    "unk": ("<unk>", "[UNK]", "<|unk|>"),
}
REQUIRED = ("pad", "bos", "eos")


def tokenizer_path(spec: TokenizerSpec) -> Path:
    """The file ``data.tokenizer.path`` names, resolved as the data paths are (the working directory)."""
    assert spec.path is not None
    named = data_path(spec.path, data_root(None, FIELD), FIELD)
    if not named.path.is_file():
        raise DataError(f"{FIELD}: tokenizer file not found: {named.path}{named.explain()}")
    return named.path


def tokenizer_file_identity(spec: TokenizerSpec) -> str | None:
    """The sha256 of a ``kind: file`` tokenizer's JSON (part of the data identity); None for a trained one."""
    if spec.kind != "file":
        return None
    with open(tokenizer_path(spec), "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def load_tokenizer_file(spec: TokenizerSpec, *, lowercase: bool, reverse_source: bool = False,
                        source_bos: bool = False, source_eos: bool = False) -> Tokenizers:
    """The run's :class:`Tokenizers` from the file; DataError (one line) when it is missing, is not a
    tokenizer, or lacks a special token the model needs."""
    path = tokenizer_path(spec)
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception with serde's message
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{FIELD}: {path} is not a Hugging Face tokenizers JSON ({reason})") from None
    named = spec.specials.model_dump(exclude_none=True) if spec.specials is not None else {}
    ids: dict[str, int | None] = {}
    for role, candidates in SPECIAL_NAMES.items():
        if role in named:
            found = tok.token_to_id(named[role])
            if found is None:
                raise DataError(f"data.tokenizer.specials.{role}: {named[role]!r} is not a token of {path}")
            ids[role] = found
            continue
        ids[role] = next((i for name in candidates if (i := tok.token_to_id(name)) is not None), None)
        if ids[role] is None and role in REQUIRED:
            raise DataError(f"{FIELD}: {path} has no {role} token (looked for {', '.join(candidates)}); "
                            f"name one in data.tokenizer.specials.{role}")
    return Tokenizers(tok, None, kind="file", lowercase=lowercase, reverse_source=reverse_source,
                      source_bos=source_bos, source_eos=source_eos, specials=ids)
