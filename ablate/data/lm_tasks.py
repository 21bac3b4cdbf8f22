"""Synthetic language-modelling tasks: two that need positions (``data.synthetic.task: recall | copy_far``)
and generated English captions (``captions``: ablate/data/captions.py, the LM quickstart's data).

Each task draws *instances* (one line of space-separated tokens each); ``data.document_lines`` instances
make one document, so a document can be far longer than the training blocks and an evaluation at 2x or 8x
the training length still sees the same kind of text (ablate/data/lm_corpus.py).

* ``recall``, associative recall (Ba et al. 2016, "Using Fast Weights to Attend to the Recent Past";
  the in-context recall of Olsson et al. 2022's induction heads): ``n`` key-value pairs, then ``?`` and
  one of the keys; the next token is its value. The value follows its key, so recalling it is attending to
  "the token one after the earlier copy of this one": a relative position.
* ``copy_far``, copy at a distance: ``m`` random tokens, ``|``, then the same ``m`` tokens. Token ``i`` of
  the copy is the token ``m + 1`` positions back: attention at a fixed offset.

Only the answer tokens (the value; the copy) are predictable; the rest is uniform noise, so the loss of a
perfect model is a known floor and the gap to it measures what was learned.
"""

from __future__ import annotations

import numpy as np

from ablate.data import captions
from ablate.spec.data import SyntheticData

SEPARATOR, QUERY = "|", "?"


def vocabulary(cfg: SyntheticData) -> list[str]:
    """The task's words: ``t0 .. t{V-1}`` and the two markers; the captions' own words."""
    if cfg.task == "captions":
        return captions.vocabulary()
    return [f"t{i}" for i in range(cfg.vocab_size)] + [SEPARATOR, QUERY]


def recall_instance(rng: np.random.Generator, cfg: SyntheticData) -> list[str]:
    """``k1 v1 ... kn vn ? kq vq`` with distinct keys, ``n`` in [min_len, max_len] (at most vocab_size)."""
    n = int(rng.integers(cfg.min_len, cfg.max_len + 1))
    n = min(n, cfg.vocab_size)
    keys = rng.choice(cfg.vocab_size, size=n, replace=False)
    values = rng.integers(0, cfg.vocab_size, size=n)
    q = int(rng.integers(0, n))
    words = [w for k, v in zip(keys, values, strict=True) for w in (f"t{k}", f"t{v}")]
    return [*words, QUERY, f"t{keys[q]}", f"t{values[q]}"]


def copy_far_instance(rng: np.random.Generator, cfg: SyntheticData) -> list[str]:
    """``x1 .. xm | x1 .. xm`` with ``m`` in [min_len, max_len]."""
    m = int(rng.integers(cfg.min_len, cfg.max_len + 1))
    tokens = [f"t{i}" for i in rng.integers(0, cfg.vocab_size, size=m)]
    return [*tokens, SEPARATOR, *tokens]


def generate(cfg: SyntheticData, seed: int) -> dict[str, list[str]]:
    """Instances (lines of text) of each split, from generators seeded by (seed, split)."""
    sizes = {"train": cfg.train_size, "val": cfg.val_size, "test": cfg.test_size}
    if cfg.task == "captions":
        return captions.generate(sizes, seed)
    draw = recall_instance if cfg.task == "recall" else copy_far_instance
    out: dict[str, list[str]] = {}
    for i, (split, n) in enumerate(sizes.items()):
        rng = np.random.default_rng([seed, 7919, i])  # 7919: apart from the translation tasks' streams
        out[split] = [" ".join(draw(rng, cfg)) for _ in range(n)]
    return out
