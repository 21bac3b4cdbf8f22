"""Synthetic seq2seq tasks: the embedded default source (no download, no file).

Every task is drawn from a numpy Generator seeded by the spec seed, so the same
seed gives the same sentences; train, val and test never share a source
sentence. Tokens are words (``w7``) and the vocabulary is word-level, so no
tokenizer is trained and the metric is exact match.

* ``copy``: target = source.
* ``reverse``: target = source reversed.
* ``sort``: target = the source words sorted by their number (``w2`` < ``w10``).
* ``grammar``: a small rule-based "translation" with the phenomena that make
  architecture choices matter (reordering, long-distance agreement, lexical
  substitution, one word to two)::

      source (SVO):  DET ADJ* NOUN [pl] [not] VERB DET ADJ* NOUN [pl]
      target (SOV):  DET' NOUN' ADJ'*  DET' NOUN' ADJ'*  [ne] VERB' AGR [pas]

  - the verb moves to the end (SVO -> SOV) and adjectives follow their noun;
  - AGR is ``@pl`` when the *subject* carries ``pl``, else ``@sg`` (agreement
    across the whole object phrase);
  - determiners agree in number: the -> le / les, a -> un, some -> des
    (``some`` only with plurals, ``a`` only with singulars); ``pl`` is dropped;
  - nouns ``n3`` / verbs ``v3`` / adjectives ``j3`` map to ``x*`` / ``y*`` / ``z*``
    through a fixed permutation (the language does not change with the seed);
  - ``not`` becomes ``ne ... pas`` around the verb and its agreement marker.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ablate.data.corpus import DataError

if TYPE_CHECKING:
    from ablate.spec.experiment import SyntheticData

TASKS = ("copy", "reverse", "sort", "grammar")
LEXICON_SEED = 1_234_567  # fixed: the grammar task's "language" is the same for every run seed
SOURCE_DETERMINERS = {False: ("the", "a"), True: ("the", "some")}  # by plural
TARGET_DETERMINER = {("the", False): "le", ("the", True): "les", ("a", False): "un", ("some", True): "des"}
FUNCTION_WORDS_SRC = ("the", "a", "some", "pl", "not")
FUNCTION_WORDS_TGT = ("le", "les", "un", "des", "ne", "pas", "@sg", "@pl")
Pairs = tuple[list[str], list[str]]


@dataclass(frozen=True)
class Lexicon:
    """Content words of the grammar task and their fixed translations."""

    nouns: tuple[str, ...]
    verbs: tuple[str, ...]
    adjectives: tuple[str, ...]
    translation: dict[str, str]

    @classmethod
    def build(cls, vocab_size: int) -> Lexicon:
        n_noun = max(2, round(0.4 * vocab_size))
        n_verb = max(1, round(0.3 * vocab_size))
        n_adj = max(1, vocab_size - n_noun - n_verb)
        rng = np.random.default_rng(LEXICON_SEED)
        translation: dict[str, str] = {}
        words: list[tuple[str, ...]] = []
        for src_prefix, tgt_prefix, n in (("n", "x", n_noun), ("v", "y", n_verb), ("j", "z", n_adj)):
            perm = rng.permutation(n)
            words.append(tuple(f"{src_prefix}{i}" for i in range(n)))
            translation.update({f"{src_prefix}{i}": f"{tgt_prefix}{perm[i]}" for i in range(n)})
        return cls(words[0], words[1], words[2], translation)

    def vocabulary(self) -> list[str]:
        source = [*FUNCTION_WORDS_SRC, *self.nouns, *self.verbs, *self.adjectives]
        content = source[len(FUNCTION_WORDS_SRC):]
        return source + [*FUNCTION_WORDS_TGT, *(self.translation[w] for w in content)]


def vocabulary(cfg: SyntheticData) -> list[str]:
    """Every word the task can produce (both sides), in a fixed order: the word-level vocabulary."""
    if cfg.task == "grammar":
        return Lexicon.build(cfg.vocab_size).vocabulary()
    return [f"w{i}" for i in range(cfg.vocab_size)]


def transform(task: str, words: list[str]) -> list[str]:
    """The target of a copy / reverse / sort source sentence."""
    if task == "copy":
        return list(words)
    if task == "reverse":
        return words[::-1]
    if task == "sort":
        return sorted(words, key=lambda w: int(w[1:]))
    raise ValueError(f"no word-list transform for task {task!r}")


def _pick(options: tuple[str, ...], u: float) -> str:
    return options[int(u * len(options))]


def _noun_phrase(u: list[float], lex: Lexicon) -> tuple[list[str], list[str], bool]:
    """One NP from 6 uniform numbers: number 40% plural; 0/1/2 adjectives with 50/30/20%."""
    plural = u[0] < 0.4
    det = SOURCE_DETERMINERS[plural][int(u[1] * 2)]
    n_adj = 0 if u[2] < 0.5 else 1 if u[2] < 0.8 else 2
    adjectives = [_pick(lex.adjectives, u[3 + k]) for k in range(n_adj)]
    noun = _pick(lex.nouns, u[5])
    src = [det, *adjectives, noun] + (["pl"] if plural else [])
    tgt = [TARGET_DETERMINER[det, plural], lex.translation[noun], *(lex.translation[a] for a in adjectives)]
    return src, tgt, plural


def grammar_sentence(rng: np.random.Generator, lex: Lexicon) -> tuple[list[str], list[str]]:
    u = rng.random(14).tolist()  # one draw per sentence: fast, and the stream stays simple
    subj_src, subj_tgt, subj_plural = _noun_phrase(u[0:6], lex)
    obj_src, obj_tgt, _ = _noun_phrase(u[6:12], lex)
    negated = u[12] < 0.25
    verb = _pick(lex.verbs, u[13])
    src = subj_src + (["not"] if negated else []) + [verb] + obj_src
    verb_group = [lex.translation[verb], "@pl" if subj_plural else "@sg"]
    tgt = subj_tgt + obj_tgt + (["ne", *verb_group, "pas"] if negated else verb_group)
    return src, tgt


def _capacity(cfg: SyntheticData) -> float:
    """Distinct source sentences the task can produce (inf for grammar: checked by drawing)."""
    if cfg.task == "grammar":
        return float("inf")
    return float(sum(cfg.vocab_size ** n for n in range(cfg.min_len, cfg.max_len + 1)))


def _draw(cfg: SyntheticData, rng: np.random.Generator, n: int, taken: set[str]) -> Pairs:
    """n new pairs whose source is not in ``taken`` (which grows); rejection sampling."""
    src_out: list[str] = []
    tgt_out: list[str] = []
    lex = Lexicon.build(cfg.vocab_size) if cfg.task == "grammar" else None
    # Give up after many draws in a row found nothing new (the space is nearly exhausted).
    attempts, since_new = 0, 0
    while len(src_out) < n:
        if attempts >= 50 * n + 1000 or since_new > max(10_000, 20 * len(taken)):
            raise DataError(f"data.synthetic: could draw only {len(taken)} distinct {cfg.task!r} sentences "
                            f"(vocab_size {cfg.vocab_size}, lengths {cfg.min_len}..{cfg.max_len}); "
                            f"raise vocab_size or max_len, or lower the split sizes")
        if lex is not None:
            attempts += 1
            since_new += 1
            src, tgt = grammar_sentence(rng, lex)
            if not (cfg.min_len <= len(src) <= cfg.max_len and len(tgt) <= cfg.max_len):
                continue
        else:
            block = max(16, (n - len(src_out)) * 5 // 4)  # vectorised draws, checked one by one
            attempts += block
            since_new += block
            lengths = rng.integers(cfg.min_len, cfg.max_len + 1, size=block)
            ids = rng.integers(cfg.vocab_size, size=(block, cfg.max_len))
            for length, row in zip(lengths, ids, strict=True):
                src = [f"w{i}" for i in row[:length]]
                text = " ".join(src)
                if text not in taken and len(src_out) < n:
                    since_new = 0
                    taken.add(text)
                    src_out.append(text)
                    tgt_out.append(" ".join(transform(cfg.task, src)))
            continue
        text = " ".join(src)
        if text not in taken:
            since_new = 0
            taken.add(text)
            src_out.append(text)
            tgt_out.append(" ".join(tgt))
    return src_out, tgt_out


def generate(cfg: SyntheticData, seed: int) -> dict[str, Pairs]:
    """{'train','val','test'} -> (sources, targets) as space-separated words; splits are disjoint.

    Test is drawn first, then val, then train, each from its own child generator,
    so growing train_size leaves val and test unchanged.
    """
    if cfg.task == "grammar" and cfg.max_len < 6:
        raise DataError(f"data.synthetic.max_len {cfg.max_len} is too short for the grammar task "
                        f"(its shortest sentences have 5 source and 6 target words)")
    if cfg.task == "grammar" and cfg.min_len > 12:
        raise DataError(f"data.synthetic.min_len {cfg.min_len} is too long for the grammar task "
                        f"(its sentences have at most 12 source words)")
    needed = cfg.train_size + cfg.val_size + cfg.test_size
    if _capacity(cfg) < needed:
        raise DataError(f"data.synthetic: the {cfg.task!r} task with vocab_size {cfg.vocab_size} and lengths "
                        f"{cfg.min_len}..{cfg.max_len} has only {int(_capacity(cfg))} distinct sentences but "
                        f"the splits need {needed}: raise vocab_size or max_len, or lower the split sizes")
    root = np.random.SeedSequence([seed, zlib.crc32(cfg.task.encode())])
    test_seq, val_seq, train_seq = root.spawn(3)
    taken: set[str] = set()
    out: dict[str, Pairs] = {}
    for split, seq, size in (("test", test_seq, cfg.test_size), ("val", val_seq, cfg.val_size),
                             ("train", train_seq, cfg.train_size)):
        out[split] = _draw(cfg, np.random.default_rng(seq), size, taken)
    return {split: out[split] for split in ("train", "val", "test")}
