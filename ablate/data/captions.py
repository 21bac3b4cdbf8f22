"""A small English corpus the project generates: image-caption-like sentences (``data.synthetic.task:
captions``), the language-model quickstart's data on a fresh clone, with no file to download.

Each sentence follows one small grammar, drawn from a numpy Generator seeded by (seed, split)::

    SUBJECT [in|wearing a COLOUR GARMENT] VERB-PHRASE [PLACE] .

    a man in a blue shirt is riding a bike on the beach .
    two dogs are playing with a ball in the snow .

so a model has something to learn that a unigram model does not: the verb agrees with its subject
(``is`` after a singular subject, ``are`` after a plural one, however long the phrase between them), a dog
does not read a book, and an article precedes a colour. Words are the tokens (a fixed word-level
vocabulary), like Multi30k's lower-cased English captions, which the Multi30k specs read instead.
"""

from __future__ import annotations

import numpy as np

PEOPLE_ONE = ("a man", "a woman", "a boy", "a girl", "a little girl", "an old man", "a young woman",
              "a child", "a worker", "a musician", "a cyclist", "a teenager")
PEOPLE_MANY = ("two men", "two women", "three children", "some boys", "two girls", "several workers",
               "four friends", "two musicians")
DOGS_ONE = ("a dog", "a brown dog", "a small dog", "a black dog")
DOGS_MANY = ("two dogs", "three dogs", "two puppies")
COLOURS = ("blue", "red", "black", "white", "green", "yellow", "orange", "gray")
GARMENTS = ("shirt", "jacket", "hat", "dress", "coat", "sweater", "helmet")
PEOPLE_DO = ("riding a bike", "playing a guitar", "walking", "sitting on a bench", "reading a book",
             "climbing a rock", "running", "cooking food", "selling fruit", "painting a wall",
             "talking on a phone", "holding a camera")
DOGS_DO = ("running", "playing with a ball", "jumping", "swimming", "sleeping", "carrying a stick")
PLACES = ("on the beach", "in the park", "on a busy street", "near the water", "in front of a building",
          "in the snow", "at night", "on a stage", "in a kitchen", "outside")
END = "."


def vocabulary() -> list[str]:
    """Every word a caption can hold, in a fixed order: the word-level vocabulary."""
    phrases = [*PEOPLE_ONE, *PEOPLE_MANY, *DOGS_ONE, *DOGS_MANY, *COLOURS, *GARMENTS, *PEOPLE_DO, *DOGS_DO,
               *PLACES, "in wearing is are", END]
    return list(dict.fromkeys(word for phrase in phrases for word in phrase.split()))


def _pick(rng: np.random.Generator, choices: tuple[str, ...]) -> str:
    return choices[int(rng.integers(len(choices)))]


def caption(rng: np.random.Generator) -> str:
    """One sentence of the grammar above."""
    dog, many = bool(rng.random() < 0.25), bool(rng.random() < 0.35)
    subjects = (DOGS_MANY if many else DOGS_ONE) if dog else (PEOPLE_MANY if many else PEOPLE_ONE)
    words = [_pick(rng, subjects)]
    if not dog and rng.random() < 0.6:
        words.append(f"{_pick(rng, ('in', 'wearing'))} a {_pick(rng, COLOURS)} {_pick(rng, GARMENTS)}")
    words.append(f"{'are' if many else 'is'} {_pick(rng, DOGS_DO if dog else PEOPLE_DO)}")
    if rng.random() < 0.7:
        words.append(_pick(rng, PLACES))
    words.append(END)
    return " ".join(words)


def generate(sizes: dict[str, int], seed: int) -> dict[str, list[str]]:
    """``sizes[split]`` captions of each split, from generators seeded by (seed, split): the same seed gives
    the same corpus, and the splits are drawn apart."""
    out: dict[str, list[str]] = {}
    for i, (split, n) in enumerate(sizes.items()):
        rng = np.random.default_rng([seed, 104_729, i])  # 104729: apart from the other tasks' streams
        out[split] = [caption(rng) for _ in range(n)]
    return out
