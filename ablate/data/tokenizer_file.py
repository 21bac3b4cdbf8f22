"""A tokenizer of one's own (``data.tokenizer: {kind: file, path: tokenizer.json}``): a Hugging Face
``tokenizers`` JSON, GPT-2's, Llama's or one's own, for language models and translation alike.

The file is used as it is (its normalizer, pre-tokenizer, model and decoder), for both sides of a
translation pair, and nothing is trained. Its sha256 is part of the data identity: the token shards' key,
the translation cache's key and the data fingerprint change when the file does. Its special tokens are
found by name and become the model's pad, bos and eos (and unk, where it has one): the names of
``SPECIAL_NAMES`` in that order, or the tokens ``data.tokenizer.specials`` names; a role that neither
finds is one located line naming it (every missing role at once). A language model's file whose one
special is its end-of-text token uses it as pad and bos too (GPT-2's ``<|endoftext|>``, as nanoGPT and
litgpt do). Ids stay the file's own, so a model trained here indexes the same vocabulary as the model the
file came with.
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

__all__ = ["SPECIAL_NAMES", "load_tokenizer_file", "tokenizer_file_check", "tokenizer_file_identity",
           "tokenizer_path", "tokenizer_specials", "tokenizer_vocab_size"]

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
                        source_bos: bool = False, source_eos: bool = False, lm: bool = False) -> Tokenizers:
    """The run's :class:`Tokenizers` from the file; DataError (one line per problem) when it is missing, is
    not a tokenizer, or lacks a special token the model needs. ``lm``: a decoder-only language model's, whose
    end-of-text token may serve as pad and bos too (`tokenizer_specials`)."""
    path, tok = _read(spec)
    ids, problems, _ = tokenizer_specials(tok, spec, path, lm=lm)
    if problems:
        raise DataError("\n".join(f"{field}: {message}" for field, message in problems))
    return Tokenizers(tok, None, kind="file", lowercase=lowercase, reverse_source=reverse_source,
                      source_bos=source_bos, source_eos=source_eos, specials=ids)


def _read(spec: TokenizerSpec) -> tuple[Path, Tokenizer]:
    path = tokenizer_path(spec)
    try:
        return path, Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception with serde's message
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{FIELD}: {path} is not a Hugging Face tokenizers JSON ({reason})") from None


def tokenizer_specials(tok: Tokenizer, spec: TokenizerSpec, path: Path, *, lm: bool
                       ) -> tuple[dict[str, int | None], list[tuple[str, str]], str | None]:
    """(the id of each role, every (field, problem) at once, a note or None). A role is the token
    ``data.tokenizer.specials`` names, else the first of ``SPECIAL_NAMES`` the file has. For a language
    model, a file whose one special is its end-of-text token (GPT-2's ``<|endoftext|>``) uses it as pad and
    bos too, as nanoGPT and litgpt do: a language model's padding is never scored, and a document starts
    after the previous one's end. A translation model needs a pad of its own (its padding is masked out of
    attention and loss, which would drop every end of sentence)."""
    named = spec.specials.model_dump(exclude_none=True) if spec.specials is not None else {}
    ids: dict[str, int | None] = {}
    problems: list[tuple[str, str]] = []
    for role, candidates in SPECIAL_NAMES.items():
        if role in named:
            ids[role] = tok.token_to_id(named[role])
            if ids[role] is None:
                problems.append((f"data.tokenizer.specials.{role}",
                                 f"{named[role]!r} is not a token of {path}"))
            continue
        ids[role] = next((i for name in candidates if (i := tok.token_to_id(name)) is not None), None)
    missing = [role for role in REQUIRED if ids[role] is None and role not in named]
    note = None
    eot = ids["eos"]
    if lm and eot is not None and missing:
        for role in missing:
            ids[role] = eot
        note = (f"{FIELD}: {path} has one end-of-text token, {tok.id_to_token(eot)!r}: it serves as "
                f"{' and '.join(missing)} too (as in nanoGPT and litgpt; a language model's padding is never "
                "scored)")
        missing = []
    for role in missing:
        why = (" (a translation model needs its own: padding is masked out of attention and loss)"
               if eot is not None and role == "pad" else "")
        problems.append((FIELD, f"{path} has no {role} token (looked for {', '.join(SPECIAL_NAMES[role])})"
                                f"{why}; name one in data.tokenizer.specials.{role}"))
    return ids, problems, note


def tokenizer_vocab_size(spec: TokenizerSpec) -> int:
    """The file's vocabulary, added tokens included (what the model's embedding table holds)."""
    return int(_read(spec)[1].get_vocab_size(with_added_tokens=True))


def tokenizer_file_check(spec: TokenizerSpec, *, lm: bool) -> tuple[list[tuple[str, str]], str | None]:
    """Every (field, problem) of a ``kind: file`` tokenizer at once, and its note (an end-of-text token
    serving as pad and bos), for `ablate validate`."""
    try:
        path, tok = _read(spec)
    except DataError as exc:
        field, _, message = str(exc).partition(": ")
        return [(field, message)], None
    _, problems, note = tokenizer_specials(tok, spec, path, lm=lm)
    return problems, note
