"""The spec's `data` section: where sentence pairs (or, for a language model, documents) come from and
how they are tokenized and batched.

Read by ablate/data/prepare.py (synthetic tasks, local files, the Hugging Face Hub), ablate/data/lm_corpus.py
(language-modelling text: ``source: text``, a hub text column, the synthetic LM tasks) and
ablate/data/tokenize.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from ablate.spec.base import BIG, Bool, Checks, Int, SpecFieldError, Strict

# Synthetic tasks of a decoder-only language model (ablate/data/lm_tasks.py); the others are translation.
LM_TASKS = ("recall", "copy_far", "captions")


class SyntheticData(Strict):
    """A generated task (no download): random token sequences and their targets, drawn from the run's
    seed, so each seed trains on its own data and every variant of that seed on the same."""

    task: Literal["copy", "reverse", "sort", "grammar", "recall", "copy_far", "captions"] = "reverse"
    """translation tasks: copy, reverse, sort the sequence, or grammar (a rule-based
    SVO-to-SOV "translation" with agreement); language-model
    tasks (model.arch: decoder_only): recall (associative recall), copy_far (a copy at a distance) and
    captions (generated English sentences with subject-verb agreement, its own fixed vocabulary: the sizes
    below count sentences; vocab_size and the lengths do not apply)"""
    vocab_size: Annotated[Int, Field(ge=4, le=10_000)] = 20
    """distinct tokens the sequences are drawn from"""
    min_len: Annotated[Int, Field(ge=1, le=1000)] = 3
    """shortest sequence, in tokens"""
    max_len: Annotated[Int, Field(ge=1, le=1000)] = 12
    """longest sequence, in tokens (data.max_len must leave room for it plus bos/eos)"""
    train_size: Annotated[Int, Field(ge=1, le=10_000_000)] = 5000
    """training examples"""
    val_size: Annotated[Int, Field(ge=1, le=1_000_000)] = 200
    """validation examples (what evaluations and studies compare on)"""
    test_size: Annotated[Int, Field(ge=1, le=1_000_000)] = 200
    """test examples (scored once, at the end, with the best checkpoint)"""

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
    """format text: the source-side file, one sentence per line (.gz read too)"""
    tgt: str | None = None
    """format text: the target-side file, line N translating line N of src"""
    path: str | None = None
    """format tsv or jsonl: the one file holding both sides"""

    @model_validator(mode="after")
    def _one_form(self) -> FilePair:
        if self.path is None and (self.src is None or self.tgt is None):
            raise ValueError("give either src and tgt (parallel text files) or path (a TSV or JSONL file)")
        if self.path is not None and (self.src is not None or self.tgt is not None):
            raise ValueError("give either src and tgt or path, not both")
        return self


class FilesData(Strict):
    """One's own parallel corpus (``source: files``). Relative paths resolve against ``root``, else the
    working directory (not the spec's folder); ``${VAR}`` and ``${VAR:-default}`` are expanded."""

    format: Literal["text", "tsv", "jsonl"] = "text"
    """text: two parallel files per split (src, tgt); tsv: one file of source<TAB>target lines (an optional
    header 'src<TAB>tgt' or the language codes); jsonl: one JSON object a line, {"src": .., "tgt": ..},
    {"<src_lang>": .., "<tgt_lang>": ..} or {"translation": {"<src_lang>": .., "<tgt_lang>": ..}}"""
    train: FilePair
    """the training split's file(s)"""
    val: FilePair
    """the validation split's file(s): evaluations, early stopping and study verdicts read it"""
    test: FilePair | None = None
    """the test split's file(s), scored once with the best checkpoint; left out: no test scores"""
    root: str | None = None
    """base folder of relative paths, e.g. ${ABLATE_DATA_DIR:-data}; left out: the working directory"""


class HubData(Strict):
    """A Hugging Face Hub dataset (``source: hub``), read through ``datasets`` and cached under
    ``data.cache_dir``."""

    name: str
    """the dataset's Hub id, e.g. bentrevett/multi30k or opus_books"""
    config: str | None = None
    """the dataset's configuration (subset), e.g. en-it for opus_books"""
    revision: str | None = None
    """a git revision (tag, branch or commit) of the dataset, for a fixed copy"""
    train_split: str = "train"
    """the split to train on"""
    val_split: str = "validation"
    """the split evaluations and verdicts read"""
    test_split: str | None = "test"
    """the split scored once at the end; null: none"""
    streaming: Bool = False
    """a language model's corpus read as it downloads (datasets' streaming=True) and tokenized into token
    shards on the way, for corpora too large to download whole (FineWeb-style); name a revision to keep it
    fixed"""
    field: str | None = "translation"
    """where a row holds its text: translation (a dict keyed by language code, opus style), null (flat
    columns named data.src_lang and data.tgt_lang, multi30k style), or a text column's name (a language
    model, e.g. text)"""


class TextFiles(Strict):
    """Language-modelling text (``source: text``): one file per split (``.gz`` or not), cut into documents
    as ``documents`` says: at blank lines (prose, the default), every ``data.document_lines`` lines, one
    file per document (the split names a folder or a glob), or the whole file as one stream (nanoGPT)."""

    train: str
    """the training text file"""
    val: str
    """the validation text file (perplexity, bits per byte)"""
    test: str | None = None
    """the test text file; left out: no test scores"""
    root: str | None = None
    """base folder of relative paths, ${VAR} expanded; left out: the working directory"""
    documents: Literal["paragraphs", "lines", "files", "stream"] | None = None
    """how the text is cut into documents: paragraphs (a blank line ends one, the default), lines (every
    data.document_lines lines; the default when document_lines is set), files (one file per document: a
    folder or glob) or stream (the whole file as one stream, nanoGPT's way)"""


class SpecialTokens(Strict):
    """The tokens of a tokenizer file that play the model's special roles, where their names are not the
    usual ones (<pad>/[PAD], <s>/<|begin_of_text|>, </s>/<|endoftext|>, <unk>/[UNK])."""

    pad: str | None = None
    """the padding token, e.g. <|endoftext|> for GPT-2's tokenizer, which has none of its own (a language
    model's file whose one special is its end of text uses it as pad and bos unasked)"""
    bos: str | None = None
    """the token that opens a document (a language model) or a target sentence"""
    eos: str | None = None
    """the token that ends a document or a sentence"""
    unk: str | None = None
    """the unknown token (a byte-level tokenizer has none)"""


class TokenizerSpec(Strict):
    """The tokenizer(s), trained on the training split and cached under ``data.cache_dir``, or one's own
    tokenizer file."""

    kind: Literal["bpe", "wordlevel", "char", "file"] = "bpe"
    """bpe: byte-pair encoding; wordlevel: whitespace words; char: characters; file: a Hugging Face
    tokenizers JSON of one's own (path), used as it is for both sides"""
    path: str | None = None
    """kind file: the tokenizer.json (GPT-2's, Llama's, one's own), relative to the working directory,
    ${VAR} expanded; its sha256 is part of the data identity"""
    specials: SpecialTokens | None = None
    """kind file: which of the file's tokens are pad, bos, eos and unk, where the usual names do not find
    them"""
    vocab_size: Annotated[Int, Field(ge=8, le=1_000_000)] = 8000
    """the largest vocabulary (per language unless joint), special tokens included"""
    joint: Bool = True
    """one vocabulary for both languages (needed by embeddings: shared and tied)"""
    min_freq: Annotated[Int, Field(ge=1, le=BIG)] = 1
    """a token seen fewer times in training is left out of the vocabulary (read as <unk>)"""

    @model_validator(mode="after")
    def _file(self) -> TokenizerSpec:
        if self.kind == "file" and not self.path:
            raise SpecFieldError.single("path", "kind file needs path: the tokenizer.json to use", "kind")
        if self.kind != "file" and (self.path is not None or self.specials is not None):
            field = "path" if self.path is not None else "specials"
            raise SpecFieldError.single(field, f"{field} names a tokenizer file, but kind is {self.kind!r}; "
                                        "set kind: file", "kind")
        return self


class DataSpec(Strict):
    """Where sentence pairs (or a language model's documents) come from, how they are tokenized and
    batched."""

    source: Literal["synthetic", "files", "hub", "text"] = "synthetic"
    """which section below holds the data: synthetic (a generated task), files (one's own parallel
    corpus), hub (a Hugging Face dataset), text (language-model text files, model.arch: decoder_only)"""
    synthetic: SyntheticData | None = None
    """the generated task (source: synthetic; left out: the defaults)"""
    files: FilesData | None = None
    """one's own parallel files (source: files)"""
    hub: HubData | None = None
    """a Hugging Face Hub dataset (source: hub)"""
    text: TextFiles | None = None  # language modelling only (model.arch: decoder_only)
    """language-model text files (source: text, model.arch: decoder_only)"""
    # Language modelling: consecutive lines (captions, task instances) joined into one document; attention
    # never crosses documents inside a training block (ablate/data/lm_corpus.py).
    document_lines: Annotated[Int, Field(ge=1, le=BIG)] = 1
    """language models: this many consecutive lines form one document (attention never crosses documents)"""
    src_lang: str = "src"
    """the source language's code: names the columns or keys of hub and jsonl rows (e.g. de)"""
    tgt_lang: str = "tgt"
    """the target language's code (e.g. en)"""
    lowercase: Bool = False
    """lowercase every sentence before tokenizing (the 2019 Multi30k blog does)"""
    reverse_source: Bool = False
    """reverse each source sentence's tokens (the 2019 Multi30k blog, after Sutskever et al. 2014)"""
    # Source markers: bos opens and eos ends every source sequence (fairseq's translation task appends eos;
    # the Annotated Transformer and tutorials a, d and e wrap the source in both). Without one a model whose
    # positions are only relative (ALiBi) has no anchor to count a token's place from. Off by default:
    # specs written before them keep their data and run identities. The decoding budget
    # (eval.decode.max_len_a * source length + max_len_b) counts them, as fairseq's does.
    source_bos: Bool = False
    """open every source sequence with bos"""
    source_eos: Bool = False
    """end every source sequence with eos (fairseq does; relative positions such as ALiBi count from it)"""
    max_len: Annotated[Int, Field(ge=2, le=100_000)] = 128
    """longest sequence in tokens, bos/eos included: longer training pairs are dropped, val and test
    truncated; a language model's training block length"""
    max_train_examples: Annotated[Int, Field(ge=1, le=BIG)] | None = None
    """train on the first N training pairs only; left out: all of them"""
    tokenizer: TokenizerSpec = TokenizerSpec()
    """the tokenizer trained on the training split"""
    batch_tokens: Annotated[Int, Field(ge=16, le=10_000_000)] = 4096
    """tokens per batch (padding included): batches are built by a token budget from length buckets"""
    cache_dir: str = ".ablate_cache"
    """where prepared datasets and trained tokenizers are cached, relative to the working directory"""

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
