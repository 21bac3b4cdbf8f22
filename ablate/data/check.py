"""The data files a spec names, checked before anything runs or is written: `ablate validate`, `ablate run`,
every `--dry-run`, and the start of `ablate study` (local or ``--slurm``) and `ablate tune`, so that a
missing or malformed file is reported at once, in the same located lines by every command, rather than when
a run or the first cell starts training (and leaves a run folder behind).

Each named file must exist, be readable and hold a non-empty line; parallel ``src``/``tgt`` files must have
the same number of lines; a TSV or JSONL file (and any text file) must parse on its first ``HEAD_LINES``
lines. Only the line count reads a whole file (bytes counted, nothing decoded); the full line-by-line check
stays where the data is prepared. Every problem is one located line: the spec's file and line, the field,
and the path it resolved to (with what a relative path was resolved against).
"""

from __future__ import annotations

import glob
import gzip
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.data.corpus import check_jsonl_file, check_text_file, check_tsv_file, named_file_roles
from ablate.data.paths import DataError, DataPath, data_path, data_root
from ablate.data.tokenizer_file import tokenizer_file_check, tokenizer_vocab_size
from ablate.spec.commands import validate_specs
from ablate.spec.load import load_spec, load_spec_data
from ablate.spec.yamlsrc import Problem, SourceMap, SpecError

if TYPE_CHECKING:
    from ablate.spec.experiment import DataSpec, ExperimentSpec

HEAD_LINES = 50  # lines parsed per file here; the whole file is checked when the data is prepared
_GLOB = set("*?[")


def count_lines(path: Path) -> int:
    """Lines of a text file (.gz decompressed), a last line without a newline counted too."""
    opener = gzip.open if path.suffix == ".gz" else open
    count, last = 0, b"\n"
    with opener(path, "rb") as f:
        while chunk := f.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def text_split_paths(text_files: DataPath, documents: str) -> list[Path]:
    """The files of one ``source: text`` split: the file itself, or with ``documents: files`` every file
    of the folder (or glob) it names, sorted."""
    if documents != "files":
        return [text_files.path]
    if _GLOB & set(str(text_files.path)):
        return sorted(Path(p) for p in glob.glob(str(text_files.path)) if Path(p).is_file())
    if text_files.path.is_dir():
        return sorted(p for p in text_files.path.iterdir() if p.is_file() and not p.name.startswith("."))
    return []


def text_named_paths(data: DataSpec) -> list[DataPath]:
    """The splits a ``source: text`` section names, resolved (not checked)."""
    assert data.text is not None
    root = data_root(data.text.root, "data.text.root")
    named = [("train", data.text.train), ("val", data.text.val), ("test", data.text.test)]
    return [data_path(raw, root, f"data.text.{split}") for split, raw in named if raw is not None]


def _readable(named: DataPath, *, folder_ok: bool = False) -> str | None:
    """Why the path cannot serve as data, or None: exists, is a file, can be read."""
    path = named.path
    if not path.exists():
        return f"file not found: {path}{named.explain()}"
    if path.is_dir() and not folder_ok:
        return f"{path} is a folder, not a file{named.explain()}"
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        return f"{path}: cannot be read: {exc.strerror or exc}"
    return None


def _head(path: Path, check: str, spec: DataSpec) -> str | None:
    """Parse the first lines as the format says, and say if the file holds no sentence at all."""
    try:
        if check == "tsv":
            found, _ = check_tsv_file(path, spec.src_lang, spec.tgt_lang, HEAD_LINES)
        elif check == "jsonl":
            found, _ = check_jsonl_file(path, spec.src_lang, spec.tgt_lang, HEAD_LINES)
        else:
            found = check_text_file(path, HEAD_LINES, blank_lines=check == "lm")
            if found == 0 and check == "lm":  # blank lines first: look further before calling it empty
                found = check_text_file(path, None, blank_lines=True)
    except DataError as exc:
        return str(exc)
    return None if found else f"{path}: empty file (no line of text)"


def files_problems(data: DataSpec, lm: bool | None = None) -> list[tuple[str, str]]:
    """(field, message) for every problem of the files a ``files`` or ``text`` source names, and of a
    tokenizer file (``data.tokenizer.kind: file``; ``lm``: for a decoder-only model, default: the data's
    kind)."""
    problems = _tokenizer_problems(data, data.is_lm if lm is None else lm)
    if data.source == "files" and data.files is not None:
        return _parallel_problems(data) + problems
    if data.source == "text" and data.text is not None:
        return _text_problems(data) + problems
    return problems


def _tokenizer_problems(data: DataSpec, lm: bool) -> list[tuple[str, str]]:
    """A tokenizer file that is missing or not a tokenizer, or each special token it lacks: at its field."""
    if data.tokenizer.kind != "file":
        return []
    return tokenizer_file_check(data.tokenizer, lm=lm)[0]


def _parallel_problems(data: DataSpec) -> list[tuple[str, str]]:
    assert data.files is not None
    try:
        roles = named_file_roles(data.files)
    except DataError as exc:
        return [("data.files", str(exc))]
    problems: list[tuple[str, str]] = []
    counts: dict[tuple[str, str], tuple[int, DataPath]] = {}
    for role, named in roles:
        why = _readable(named) or _head(named.path, data.files.format, data)
        if why is not None:
            problems.append((named.field, why))
        elif data.files.format == "text":
            counts[(role.split, role.side)] = (count_lines(named.path), named)
    for split in ("train", "val", "test"):
        if (split, "src") in counts and (split, "tgt") in counts:
            (n_src, src), (n_tgt, tgt) = counts[(split, "src")], counts[(split, "tgt")]
            if n_src != n_tgt:
                problems.append((tgt.field, f"{tgt.path} has {n_tgt} lines but {src.field} ({src.path}) has "
                                 f"{n_src}: parallel files must align line by line"))
    return problems


def _text_problems(data: DataSpec) -> list[tuple[str, str]]:
    assert data.text is not None
    documents = data.text.documents or "lines"
    problems: list[tuple[str, str]] = []
    for named in text_named_paths(data):
        if documents == "files":
            paths = text_split_paths(named, documents)
            if not paths:
                problems.append((named.field, f"no file in {named.path}{named.explain()} (text.documents: "
                                 "files reads every file of the folder, or of the glob, as one document)"))
                continue
        else:
            why = _readable(named)
            if why is not None:
                problems.append((named.field, why))
                continue
            paths = [named.path]
        why = next((w for p in paths if (w := _head(p, "lm", data)) is not None), None)
        if why is not None:
            problems.append((named.field, why))
    return problems


def data_problems(spec: ExperimentSpec, smap: SourceMap, origin: str) -> list[Problem]:
    """Every problem of the spec's data files, each located at the field that names the file."""
    try:
        found = files_problems(spec.data, spec.is_lm)
    except DataError as exc:  # an environment variable of a path is not set
        field, _, message = str(exc).partition(": ")
        found = [(field, message)]
    return [Problem(smap.where(field, origin), field, message) for field, message in found]


def check_data(spec_path: str, overrides: Sequence[str], spec: ExperimentSpec) -> None:
    """Raise SpecError (exit 2, one located line each) when a data file the spec names is unusable."""
    if spec.data.source not in ("files", "text") and spec.data.tokenizer.kind != "file":
        return
    _, smap = load_spec_data(spec_path, overrides)
    problems = data_problems(spec, smap, str(spec_path))
    if problems:
        raise SpecError(problems)


def checked_spec(spec_path: str, overrides: Sequence[str] = ()) -> ExperimentSpec:
    """The spec every command starts from: loaded and validated (ablate/spec/load.py), then its data files
    checked (`check_data`); SpecError (exit 2, one located line per problem) before anything is written."""
    spec = load_spec(spec_path, list(overrides))
    check_data(spec_path, overrides, spec)
    return spec


def data_notes(spec: ExperimentSpec) -> list[str]:
    """What `ablate validate` says of a valid spec's data beside its ok: a tokenizer file's end-of-text token
    serving as pad and bos, and a vocabulary far larger than the model's width (`vocabulary_warning`)."""
    notes: list[str] = []
    vocab: int | None = None
    if spec.data.tokenizer.kind == "file":
        try:
            _, note = tokenizer_file_check(spec.data.tokenizer, lm=spec.is_lm)
            vocab = tokenizer_vocab_size(spec.data.tokenizer)
        except DataError:  # reported as a problem already
            return notes
        notes += [f"note: {note}"] if note else []
    elif spec.data.tokenizer.kind in ("bpe", "wordlevel") and spec.data.source != "synthetic":
        vocab = spec.data.tokenizer.vocab_size
    warning = vocabulary_warning(spec, vocab) if vocab is not None else None
    return notes + ([f"warning: {warning}"] if warning else [])


# A vocabulary this many times the width, whose embedding tables hold most of the model, is mostly types the
# corpus shows a few times each: GPT-2 small's (50,257 at width 768, 65x, a third of its weights) is not.
VOCAB_PER_WIDTH = 32
EMBEDDING_SHARE = 0.5


def vocabulary_warning(spec: ExperimentSpec, vocab: int) -> str | None:
    """A warning where the vocabulary is more than VOCAB_PER_WIDTH times d_model and the embedding tables
    hold more than EMBEDDING_SHARE of the weights (about: 4d^2 per attention, 2 d d_ff per FFN), else None."""
    m = spec.model
    d = m.d_model
    if vocab <= VOCAB_PER_WIDTH * d:
        return None
    attention = 4 * d * d
    ffn = 2 * d * m.d_ff
    if spec.is_lm:
        body = m.decoder_layers * (attention + ffn)
    else:
        body = m.encoder_layers * (attention + ffn) + m.decoder_layers * (2 * attention + ffn)
    # the vocabulary-sized matrices (input embeddings, output projection), as the embeddings axis shares them
    lm_tables, pair_tables = {"tied": 1, "tied_decoder": 1}, {"tied": 1, "shared": 2, "tied_decoder": 2}
    tables = lm_tables.get(m.embeddings, 2) if spec.is_lm else pair_tables.get(m.embeddings, 3)
    embedding = tables * vocab * d
    share = embedding / (embedding + body)
    if share <= EMBEDDING_SHARE:
        return None
    field = "data.tokenizer.path" if spec.data.tokenizer.kind == "file" else "data.tokenizer.vocab_size"
    fits = VOCAB_PER_WIDTH * d
    held = f"the embedding table{'s hold' if tables > 1 else ' holds'} about {share:.0%} of the weights"
    return (f"{field}: a vocabulary of {vocab:,} types at model.d_model {d} ({vocab / d:.0f}x the width): "
            f"{held}, most of them for types seen a few times each; a vocabulary near {fits:,} (or a wider "
            "model) spends them on the model")


def cmd_validate(specs: Sequence[str], overrides: Sequence[str] = ()) -> int:
    """The spec commands' validation, plus the data files each valid spec names (`ablate validate` itself
    adds a study's design: ablate/study/validate_study.py)."""
    return validate_specs(specs, overrides, check=lambda path, spec: check_data(path, overrides, spec))
