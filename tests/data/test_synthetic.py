"""Synthetic tasks: deterministic, disjoint splits, and each task's rule holds on every sample."""

from __future__ import annotations

import pytest

from ablate.data.corpus import DataError
from ablate.data.synthetic import Lexicon, generate, vocabulary
from ablate.spec.experiment import SyntheticData

SMALL = {"train_size": 400, "val_size": 60, "test_size": 60}


def _all_pairs(out: dict[str, tuple[list[str], list[str]]]) -> list[tuple[list[str], list[str]]]:
    return [(s.split(), t.split()) for src, tgt in out.values() for s, t in zip(src, tgt, strict=True)]


@pytest.mark.parametrize("task", ["copy", "reverse", "sort", "grammar"])
def test_deterministic_sized_and_disjoint(task: str) -> None:
    cfg = SyntheticData(task=task, **SMALL)
    first, again, other = generate(cfg, 7), generate(cfg, 7), generate(cfg, 8)
    assert first == again
    assert first["train"] != other["train"]
    assert {k: len(v[0]) for k, v in first.items()} == {"train": 400, "val": 60, "test": 60}
    sources = {k: set(v[0]) for k, v in first.items()}
    assert all(len(s) == len(first[k][0]) for k, s in sources.items())  # no duplicate inside a split
    assert not sources["train"] & sources["val"]
    assert not sources["train"] & sources["test"]
    assert not sources["val"] & sources["test"]
    words = set(vocabulary(cfg))
    for src, tgt in _all_pairs(first):
        assert set(src) <= words and set(tgt) <= words
        assert cfg.min_len <= len(src) <= cfg.max_len and len(tgt) <= cfg.max_len


def test_held_out_splits_do_not_move_when_train_grows() -> None:
    small = generate(SyntheticData(task="reverse", **SMALL), 3)
    big = generate(SyntheticData(task="reverse", **{**SMALL, "train_size": 900}), 3)
    assert small["val"] == big["val"] and small["test"] == big["test"]


def test_copy_reverse_sort_rules() -> None:
    for task in ("copy", "reverse", "sort"):
        out = generate(SyntheticData(task=task, vocab_size=30, **SMALL), 0)
        for src, tgt in _all_pairs(out):
            if task == "copy":
                assert tgt == src
            elif task == "reverse":
                assert tgt == list(reversed(src))
            else:
                numbers = [int(w[1:]) for w in tgt]
                assert numbers == sorted(numbers)  # numeric order: w2 before w10
                assert sorted(tgt) == sorted(src)  # a permutation of the source
    # lengths span the configured range
    lengths = {len(s) for s, _ in _all_pairs(generate(SyntheticData(task="copy", **SMALL), 0))}
    assert min(lengths) == 3 and max(lengths) == 12


def _noun_phrases(src: list[str], lex: Lexicon) -> list[dict[str, object]]:
    """Parse source NPs independently of the generator: DET ADJ* NOUN [pl]."""
    phrases, i = [], 0
    while i < len(src):
        if src[i] in ("the", "a", "some"):
            det, j = src[i], i + 1
            adjs = []
            while src[j] in lex.adjectives:
                adjs.append(src[j])
                j += 1
            noun = src[j]
            plural = j + 1 < len(src) and src[j + 1] == "pl"
            phrases.append({"det": det, "adjs": adjs, "noun": noun, "plural": plural, "end": j + 1 + plural})
            i = j + 1 + plural
        else:
            i += 1
    return phrases


def test_grammar_rules_hold_on_samples() -> None:
    cfg = SyntheticData(task="grammar", vocab_size=30, train_size=500, val_size=50, test_size=50)
    lex = Lexicon.build(cfg.vocab_size)
    seen_translation: dict[str, str] = {}
    negations = plurals = 0
    for src, tgt in _all_pairs(generate(cfg, 11)):
        subj, obj = _noun_phrases(src, lex)
        verb_at = subj["end"] + (1 if src[subj["end"]] == "not" else 0)
        verb = src[verb_at]
        assert verb in lex.verbs and obj["end"] == len(src)  # SVO source
        negated = "not" in src
        # SOV: the target ends with the verb group; agreement follows the SUBJECT's number
        marker = "@pl" if subj["plural"] else "@sg"
        tail = ["ne", lex.translation[verb], marker, "pas"] if negated else [lex.translation[verb], marker]
        assert tgt[-len(tail):] == tail
        negations += negated
        plurals += bool(subj["plural"])
        # each NP becomes DET' NOUN' ADJ'* with the determiner inflected for number
        body, k = tgt[:-len(tail)], 0
        for np_ in (subj, obj):
            det = {("the", False): "le", ("the", True): "les", ("a", False): "un", ("some", True): "des"}
            assert body[k] == det[np_["det"], np_["plural"]]
            assert body[k + 1] == lex.translation[np_["noun"]]  # type: ignore[index]
            adjs = [lex.translation[a] for a in np_["adjs"]]  # type: ignore[attr-defined]
            assert body[k + 2:k + 2 + len(adjs)] == adjs  # adjectives follow the noun
            k += 2 + len(adjs)
        assert k == len(body)
        assert "pl" not in tgt and not set(tgt) & set(lex.nouns)  # everything is translated
        for word in [w for w in src if w in lex.translation]:  # one fixed lexicon
            assert seen_translation.setdefault(word, lex.translation[word]) == lex.translation[word]
    assert negations > 20 and plurals > 100  # both phenomena are exercised
    assert Lexicon.build(30) == lex  # the "language" does not depend on the seed


def test_grammar_needs_room_and_small_spaces_are_errors() -> None:
    with pytest.raises(DataError, match="too short for the grammar task"):
        generate(SyntheticData(task="grammar", min_len=1, max_len=5), 0)
    with pytest.raises(DataError, match=r"has only 84 distinct sentences but the splits need 5400"):
        generate(SyntheticData(task="copy", vocab_size=4, min_len=1, max_len=3), 0)
    with pytest.raises(DataError, match="could draw only"):
        generate(SyntheticData(task="grammar", vocab_size=4, train_size=100_000), 0)
