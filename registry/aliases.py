"""Common names of registered components, for "did you mean": what papers, tutorials and other libraries
call a variant, mapped to its key here (``LayerNorm`` is ``builtin``, ``RMSNorm`` is ``rms``).

Only a suggestion reads this table: a spec must still write the registered key, so that one variant has
one name in every spec, record and report. Matching ignores case, ``-``, ``_`` and spaces.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

COMMON_NAMES: dict[str, dict[str, str]] = {
    "norm": {"layernorm": "builtin", "ln": "builtin", "torchlayernorm": "builtin", "rmsnorm": "rms",
             "scalenorm": "scale", "handwritten": "custom", "customlayernorm": "custom"},
    "residual": {"prenorm": "pre_norm", "preln": "pre_norm", "postnorm": "post_norm", "postln": "post_norm",
                 "sandwichnorm": "sandwich", "sandwichln": "sandwich"},
    "positions": {"sinusoid": "sinusoidal", "sincos": "sinusoidal", "absolute": "learned",
                  "learnedabsolute": "learned", "rotary": "rope", "t5": "t5_bias", "relativebias": "t5_bias",
                  "nope": "none", "nopositions": "none"},
    "ffn": {"mlp": "linear", "dense": "linear", "swishglu": "swiglu", "gatedgelu": "geglu"},
    "activation": {"swish": "silu"},
    "attention": {"flash": "sdpa", "scaleddotproduct": "sdpa", "math": "explicit", "qknorm": "qk_norm"},
    "mask": {"neginf": "-inf", "minusinfinity": "-inf"},
}


def _folded(name: str) -> str:
    return re.sub(r"[-_\s]", "", name).lower()


def suggest(kind: str, name: str, registered: Sequence[str]) -> str | None:
    """The registered name ``name`` most likely means: its common name's key, else the closest spelling."""
    table = {_folded(k): v for k, v in COMMON_NAMES.get(kind, {}).items()}
    target = table.get(_folded(name))
    if target is not None and target in registered:
        return target
    folded = {_folded(r): r for r in registered}
    if _folded(name) in folded:
        return folded[_folded(name)]
    close = difflib.get_close_matches(name, list(registered), n=1)
    return close[0] if close else None


def did_you_mean(kind: str, name: str, registered: Sequence[str]) -> str:
    """``"; did you mean 'rms'?"`` or nothing."""
    hint = suggest(kind, name, registered)
    return f"; did you mean {hint!r}?" if hint else ""
