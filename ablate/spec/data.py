"""The spec's `data` section: where sentence pairs (or, for a language model, documents) come from and
how they are tokenized and batched.

Read by ablate/data/prepare.py (synthetic tasks, local files, the Hugging Face Hub), ablate/data/lm.py
(language-modelling text: ``source: text``, a hub text column, the synthetic LM tasks) and
ablate/data/tokenize.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from ablate.spec.base import BIG, Bool, Checks, Int, SpecFieldError, Strict

# Synthetic tasks of a decoder-only language model (ablate/data/lm_tasks.py); the others are translation.
LM_TASKS = ("recall", "copy_far")


class SyntheticData(Strict):
    task: Literal["copy", "reverse", "sort", "grammar", "recall", "copy_far"] = "reverse"
    vocab_size: Annotated[Int, Field(ge=4, le=10_000)] = 20
    min_len: Annotated[Int, Field(ge=1, le=1000)] = 3
    max_len: Annotated[Int, Field(ge=1, le=1000)] = 12
    train_size: Annotated[Int, Field(ge=1, le=10_000_000)] = 5000
    val_size: Annotated[Int, Field(ge=1, le=1_000_000)] = 200
    test_size: Annotated[Int, Field(ge=1, le=1_000_000)] = 200

    @model_validator(mode="after")
    def _lengths(self) -> SyntheticData:
        if self.min_len > self.max_len:
            raise SpecFieldError.single(
                "min_len", f"min_len {self.min_len} is above max_len {self.max_len}", "max_len"
            )
        return self


class FilePair(Strict):
    """One split: either two parallel text files, or one TSV/JSONL file holding both sides."""

    src: str | None = None
    tgt: str | None = None
    path: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> FilePair:
        if self.path is None and (self.src is None or self.tgt is None):
            raise ValueError("give either src and tgt (parallel text files) or path (a TSV or JSONL file)")
        if self.path is not None and (self.src is not None or self.tgt is not None):
            raise ValueError("give either src and tgt or path, not both")
        return self


class FilesData(Strict):
    format: Literal["text", "tsv", "jsonl"] = "text"
    train: FilePair
    val: FilePair
    test: FilePair | None = None
    # Base folder for relative paths; ${ABLATE_DATA_DIR} style env vars are expanded at load time.
    root: str | None = None


class HubData(Strict):
    name: str
    config: str | None = None
    revision: str | None = None
    train_split: str = "train"
    val_split: str = "validation"
    test_split: str | None = "test"
    # Where the pair lives in each row: "translation" dict (opus style) or flat columns (multi30k style).
    field: str | None = "translation"


class TextFiles(Strict):
    """Language-modelling text (``source: text``): one file per split (``.gz`` or not), cut into documents
    as ``documents`` says: at blank lines (prose, the default), every ``data.document_lines`` lines, one
    file per document (the split names a folder or a glob), or the whole file as one stream (nanoGPT)."""

    train: str
    val: str
    test: str | None = None
    root: str | None = None  # base folder of relative paths; ${VAR} expanded at load time
    # None: "lines" when the spec sets data.document_lines (the specs written before this field), else
    # "paragraphs"; resolved by DataSpec, so a resolved spec always says which.
    documents: Literal["paragraphs", "lines", "files", "stream"] | None = None


class TokenizerSpec(Strict):
    kind: Literal["bpe", "wordlevel", "char"] = "bpe"
    vocab_size: Annotated[Int, Field(ge=8, le=1_000_000)] = 8000
    joint: Bool = True
    min_freq: Annotated[Int, Field(ge=1, le=BIG)] = 1


class DataSpec(Strict):
    source: Literal["synthetic", "files", "hub", "text"] = "synthetic"
    synthetic: SyntheticData | None = None
    files: FilesData | None = None
    hub: HubData | None = None
    text: TextFiles | None = None  # language modelling only (model.arch: decoder_only)
    # Language modelling: consecutive lines (captions, task instances) joined into one document; attention
    # never crosses documents inside a training block (ablate/data/lm.py).
    document_lines: Annotated[Int, Field(ge=1, le=BIG)] = 1
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    lowercase: Bool = False
    reverse_source: Bool = False
    # Source markers: bos opens and eos ends every source sequence (fairseq's translation task appends eos;
    # the Annotated Transformer and tutorials a, d and e wrap the source in both). Without one a model whose
    # positions are only relative (ALiBi) has no anchor to count a token's place from. Off by default:
    # specs written before them keep their data and run identities. The decoding budget
    # (eval.decode.max_len_a * source length + max_len_b) counts them, as fairseq's does.
    source_bos: Bool = False
    source_eos: Bool = False
    max_len: Annotated[Int, Field(ge=2, le=100_000)] = 128
    max_train_examples: Annotated[Int, Field(ge=1, le=BIG)] | None = None
    tokenizer: TokenizerSpec = TokenizerSpec()
    batch_tokens: Annotated[Int, Field(ge=16, le=10_000_000)] = 4096
    cache_dir: str = ".ablate_cache"

    @model_validator(mode="after")
    def _source_section(self) -> DataSpec:
        if self.source == "synthetic" and self.synthetic is None:
            self.synthetic = SyntheticData()
        checks = Checks()
        if getattr(self, self.source) is None:
            missing = f"source is {self.source!r} but the data.{self.source} section is missing"
            checks.fail(self.source, missing, "source")
        self._document_mode(checks)
        synthetic = self.synthetic if self.source == "synthetic" else None
        # An LM task's instances flow across blocks of max_len tokens: no length bound between the two.
        if synthetic is not None and synthetic.task not in LM_TASKS and self.max_len < synthetic.max_len + 2:
            checks.fail("max_len", f"max_len {self.max_len} is too short for synthetic max_len "
                        f"{synthetic.max_len} plus bos/eos", "synthetic.max_len")
        checks.raise_any()
        return self

    def _document_mode(self, checks: Checks) -> None:
        """Resolve ``text.documents`` (see TextFiles); ``document_lines`` only counts lines of ``lines``."""
        if self.text is None:
            return
        if self.text.documents is None:
            self.text.documents = "lines" if "document_lines" in self.model_fields_set else "paragraphs"
        elif self.text.documents != "lines" and self.document_lines != 1:
            checks.fail("document_lines", f"document_lines {self.document_lines} counts the lines of a "
                        f"document, but text.documents is {self.text.documents!r}; drop it or set "
                        "text.documents: lines", "text.documents")

    @property
    def is_lm(self) -> bool:
        """Language-modelling data: text files, or a synthetic LM task (a hub source can be either; the
        model's ``arch`` decides, see ExperimentSpec)."""
        return self.source == "text" or (self.source == "synthetic" and self.synthetic is not None
                                         and self.synthetic.task in LM_TASKS)

    @property
    def is_text(self) -> bool:
        """Text data (scored with BLEU/chrF) rather than a synthetic task (exact match)."""
        return self.source != "synthetic"

    @property
    def has_test(self) -> bool:
        """Whether runs evaluate a test split (a synthetic task always has one)."""
        if self.source == "files":
            return self.files is not None and self.files.test is not None
        if self.source == "text":
            return self.text is not None and self.text.test is not None
        if self.source == "hub":
            return self.hub is not None and self.hub.test_split is not None
        return True
