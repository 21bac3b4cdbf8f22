"""What prepared data is: the splits, tokenizers and fingerprint that ``ablate/data/prepare.py`` (translation)
and ``ablate/data/lm_corpus.py`` (language modelling) hand to the engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from ablate.data.tokenize import Tokenizers

__all__ = ["PreparedData", "Split"]


@dataclass
class Split:
    src_ids: list[list[int]]  # what the model reads: reversed when reverse_source, then source_bos/_eos
    tgt_ids: list[list[int]]  # target ids, no bos/eos
    # normalised source sentence, never reversed: model_src(src_text[i], max_len - 2) == src_ids[i]
    src_text: list[str]
    tgt_text: list[str]  # normalised target sentence: the reference

    def __len__(self) -> int:
        return len(self.src_ids)


@dataclass
class PreparedData:
    tokenizers: Tokenizers
    splits: dict[str, Split]  # 'train', 'val' and 'test' (test absent when a files source gives none)
    fingerprint: str  # digest of the prepared data (content + every option that shapes it)
    name: str  # dataset name for mlflow.log_input, e.g. 'multi30k.de-en', 'synthetic-reverse'
    is_text: bool  # True: BLEU/chrF; False (synthetic): exact match
    source: str = ""  # where it came from: folder, hf://name, synthetic:task
    stats: dict[str, int] = field(default_factory=dict)  # pair counts, filtered, vocab sizes
    cached: bool = False  # True when read from the prepared cache
