"""Raw parallel text: where a corpus comes from and whether it is well-formed.

Two real sources feed ``ablate/data/prepare.py``:

* ``files``: the user's own parallel text, one sentence per line in two files
  (``.gz`` accepted), or one TSV (``src<TAB>tgt``) or JSONL file per split;
* ``hub``: any Hugging Face translation dataset (opus_books, iwslt2017, wmt:
  a ``translation`` dict column keyed by language code; bentrevett/multi30k:
  flat columns named by language code).

Both go through ``datasets.load_dataset`` (Arrow, memory-mapped, cached under
``data.cache_dir/hf``). Files are first checked line by line by our own reader,
because only it can say *which* line is bad: every problem is a one-line
``DataError`` naming the file and line.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import itertools
import json
import logging
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import datasets

from ablate.data.paths import DataError, DataPath, data_path, data_root, expand_env

__all__ = ["DataError", "expand_env"]  # defined in ablate/data/paths.py, read from here as before

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ablate.spec.experiment import FilePair, FilesData, HubData

SPLITS = ("train", "val", "test")


@dataclass
class TextPairs:
    """The sentence pairs of one split, as loaded (not yet normalised)."""

    src: list[str]
    tgt: list[str]
    origin: str  # for messages: "train.de.gz + train.en.gz", "hub:opus_books[train]"


@dataclass
class Corpus:
    splits: dict[str, TextPairs]  # 'train', 'val' and, when given, 'test'
    digest: str  # sha256 of the raw content (not of paths): the cache key of everything derived
    name: str  # short dataset name for mlflow.log_input
    source: str  # where it came from (folder, hub id)
    dropped: dict[str, int] = field(default_factory=dict)  # hub rows without text, per split


# ------------------------------------------------------------------ small helpers
def atomic_write(path: Path, data: bytes) -> None:
    """Write via a unique temporary file + os.replace, so concurrent workers never read half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def sha256_json(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


# ------------------------------------------------------------------ files: paths and digest
@dataclass(frozen=True)
class FileRole:
    split: str  # train / val / test
    side: str  # src / tgt (parallel text) or pair (one TSV/JSONL file)
    path: Path
    field: str = ""  # the spec field naming it, e.g. data.files.train.src


def named_file_roles(files: FilesData) -> list[tuple[FileRole, DataPath]]:
    """Every file a ``files`` source names, with its spec field and resolved path (not checked)."""
    root = data_root(files.root, "data.files.root")
    out: list[tuple[FileRole, DataPath]] = []
    for split in SPLITS:
        pair: FilePair | None = getattr(files, split)
        if pair is None:
            continue
        where = f"data.files.{split}"
        if files.format == "text":
            if pair.src is None or pair.tgt is None:
                raise DataError(f"{where}: format 'text' needs src and tgt (two parallel files); "
                                f"for one file holding both sides set data.files.format to tsv or jsonl")
            sides = [("src", "src", pair.src), ("tgt", "tgt", pair.tgt)]
        else:
            if pair.path is None:
                raise DataError(f"{where}: format {files.format!r} needs path (one file holding both sides); "
                                f"for two parallel files set data.files.format to text")
            sides = [("pair", "path", pair.path)]
        for side, key, raw in sides:
            named = data_path(raw, root, f"{where}.{key}")
            out.append((FileRole(split, side, named.path, named.field), named))
    return out


def resolve_files(files: FilesData) -> list[FileRole]:
    """The files a ``files`` source names, resolved against ``root``; a missing file is an error."""
    roles: list[FileRole] = []
    for role, named in named_file_roles(files):
        if not named.path.is_file():
            raise DataError(f"{named.field}: file not found: {named.path}{named.explain()}")
        roles.append(role)
    return roles


def files_digest(roles: Sequence[FileRole], files: FilesData, src_lang: str, tgt_lang: str) -> str:
    """sha256 over the raw bytes of every file (and its role), not its path: moving data keeps the cache."""
    h = hashlib.sha256(f"files:{files.format}:{src_lang}:{tgt_lang}".encode())
    for role in roles:
        with open(role.path, "rb") as f:
            content = hashlib.file_digest(f, "sha256").hexdigest()
        h.update(f"|{role.split}.{role.side}={content}".encode())
    return h.hexdigest()


# ------------------------------------------------------------------ files: line-by-line checks
def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 text file, .gz or not; bad bytes name file, line and byte."""
    opener = gzip.open if path.suffix == ".gz" else open
    offset = 0
    try:
        with opener(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    where = "decompressed byte" if path.suffix == ".gz" else "byte"
                    raise DataError(f"{path}:{lineno}: not valid UTF-8 at {where} {offset + e.start} "
                                    f"(column {e.start + 1}: {raw[e.start:e.start + 4]!r})") from None
                offset += len(raw)
                text = text.rstrip("\n")
                text = text[:-1] if text.endswith("\r") else text
                if lineno == 1:
                    text = text.lstrip("\ufeff")  # a UTF-8 byte-order mark is not part of the sentence
                if "\r" in text:
                    raise DataError(f"{path}:{lineno}: carriage return (\\r) inside the line: "
                                    f"it would be read as a line break and misalign the pairs")
                yield lineno, text
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise DataError(f"{path}: cannot be read: {e}") from None


def check_text_file(path: Path, limit: int | None = None, *, blank_lines: bool = False) -> int:
    """One sentence per line, no empty line (``blank_lines``: empty lines allowed, as between the
    paragraphs of language-modelling text); returns the count of non-empty lines (of the first ``limit``)."""
    count = 0
    for lineno, text in itertools.islice(_lines(path), limit):
        if not text.strip():
            if blank_lines:
                continue
            raise DataError(f"{path}:{lineno}: empty line (one sentence per line, aligned by line)")
        count += 1
    return count


def _is_header(fields: Sequence[str], src_lang: str, tgt_lang: str) -> bool:
    return tuple(fields) in (("src", "tgt"), (src_lang, tgt_lang))


def check_tsv_file(path: Path, src_lang: str, tgt_lang: str, limit: int | None = None) -> tuple[int, bool]:
    """``source<TAB>target`` per line (an optional header ``src<TAB>tgt`` or ``de<TAB>en``)."""
    count, header = 0, False
    for lineno, text in itertools.islice(_lines(path), limit):
        fields = text.split("\t")
        if lineno == 1 and _is_header(fields, src_lang, tgt_lang):
            header = True
            continue
        if not text.strip():
            raise DataError(f"{path}:{lineno}: empty line (expected source<TAB>target)")
        if len(fields) != 2:
            raise DataError(f"{path}:{lineno}: expected 2 tab-separated fields (source<TAB>target), "
                            f"found {len(fields)}")
        for side, value in zip(("source", "target"), fields, strict=True):
            if not value.strip():
                raise DataError(f"{path}:{lineno}: empty {side} sentence")
        count += 1
    return count, header


def _jsonl_layout(row: dict[str, Any], src_lang: str, tgt_lang: str) -> tuple[str, ...] | None:
    """Where the pair lives: ('translation', de, en), (de, en) or ('src', 'tgt')."""
    translation = row.get("translation")
    if isinstance(translation, dict) and src_lang in translation and tgt_lang in translation:
        return ("translation", src_lang, tgt_lang)
    if src_lang in row and tgt_lang in row:
        return (src_lang, tgt_lang)
    if "src" in row and "tgt" in row:
        return ("src", "tgt")
    return None


def _jsonl_pair(row: dict[str, Any], layout: tuple[str, ...]) -> tuple[Any, Any]:
    if layout[0] == "translation":
        return row["translation"][layout[1]], row["translation"][layout[2]]
    return row[layout[0]], row[layout[1]]


def check_jsonl_file(path: Path, src_lang: str, tgt_lang: str, limit: int | None = None
                     ) -> tuple[int, tuple[str, ...]]:
    """One JSON object per line: {"src","tgt"}, {src_lang, tgt_lang} or {"translation": {...}}."""
    count, layout = 0, None
    expected = (f'{{"src": .., "tgt": ..}}, {{"{src_lang}": .., "{tgt_lang}": ..}} '
                f'or {{"translation": {{..}}}}')
    for lineno, text in itertools.islice(_lines(path), limit):
        if not text.strip():
            raise DataError(f"{path}:{lineno}: empty line (one JSON object per line)")
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, found {type(row).__name__}")
        found = _jsonl_layout(row, src_lang, tgt_lang)
        layout = layout or found
        if found is None or found != layout:
            keys = ", ".join(sorted(row)) or "none"
            raise DataError(f"{path}:{lineno}: expected {expected} (as on the first line); keys: {keys}")
        for side, value in zip(("source", "target"), _jsonl_pair(row, layout), strict=True):
            if not isinstance(value, str):
                raise DataError(f"{path}:{lineno}: {side} is {type(value).__name__}, not a string")
            if not value.strip():
                raise DataError(f"{path}:{lineno}: empty {side} sentence")
        count = lineno
    return count, layout or ("src", "tgt")


# ------------------------------------------------------------------ files: load through datasets
def _column(ds: Any, name: str) -> list[str]:
    return ds.with_format("arrow")[:].column(name).to_pylist()  # type: ignore[no-any-return]


def load_files(files: FilesData, src_lang: str, tgt_lang: str, cache_dir: Path,
               roles: Sequence[FileRole] | None = None, digest: str | None = None) -> Corpus:
    """Check every file line by line, then load them all with one ``load_dataset`` call (Arrow cache)."""
    roles = list(roles) if roles is not None else resolve_files(files)
    digest = digest or files_digest(roles, files, src_lang, tgt_lang)
    counts: dict[FileRole, int] = {}
    extra: dict[FileRole, Any] = {}
    for role in roles:
        if files.format == "text":
            counts[role] = check_text_file(role.path)
        elif files.format == "tsv":
            counts[role], extra[role] = check_tsv_file(role.path, src_lang, tgt_lang)
        else:
            counts[role], extra[role] = check_jsonl_file(role.path, src_lang, tgt_lang)
        if counts[role] == 0:
            raise DataError(f"{role.path}: the {role.split} split is empty (no sentence in the file)")
    by_split: dict[str, list[FileRole]] = {}
    for role in roles:
        by_split.setdefault(role.split, []).append(role)
    if files.format == "text":
        for split, (src, tgt) in by_split.items():
            if counts[src] != counts[tgt]:
                raise DataError(f"{split} split: {src.path} has {counts[src]} lines but {tgt.path} has "
                                f"{counts[tgt]}: parallel files must align line by line")


    hf_cache = str(cache_dir / "hf")
    data_files = {f"{r.split}_{r.side}": str(r.path) for r in roles}
    splits: dict[str, TextPairs] = {}
    if files.format == "text":
        loaded = datasets.load_dataset("text", data_files=data_files, cache_dir=hf_cache)
        for split, (src, tgt) in by_split.items():
            splits[split] = TextPairs(_column(loaded[f"{split}_src"], "text"),
                                      _column(loaded[f"{split}_tgt"], "text"), f"{src.path} + {tgt.path}")
    else:
        for split, (role,) in by_split.items():  # one call per file: a header or a layout may differ
            splits[split] = _load_pair_file(datasets, role, files.format, extra[role], hf_cache)
    for split, pairs in splits.items():
        expected = counts[by_split[split][0]]
        if len(pairs.src) != expected or len(pairs.tgt) != expected:
            raise DataError(f"{pairs.origin}: read {len(pairs.src)} rows but the file has {expected} lines "
                            f"(unusual line separators?)")
        for side in (pairs.src, pairs.tgt):  # a BOM on line 1 is not part of the sentence
            if side and side[0].startswith("\ufeff"):
                side[0] = side[0].lstrip("\ufeff")
    first = by_split["train"][0].path
    folder = first.parent.name or first.stem
    return Corpus(splits, digest, f"{folder}.{src_lang}-{tgt_lang}", str(first.parent))


def _load_pair_file(datasets: Any, role: FileRole, fmt: str, extra: Any, hf_cache: str) -> TextPairs:
    name = f"{role.split}_{role.side}"
    if fmt == "tsv":
        features = datasets.Features({"src": datasets.Value("string"), "tgt": datasets.Value("string")})
        loaded = datasets.load_dataset(
            "csv", data_files={name: str(role.path)}, cache_dir=hf_cache, delimiter="\t",
            column_names=["src", "tgt"], header=None, skiprows=1 if extra else None,
            quoting=csv.QUOTE_NONE, na_filter=False, keep_default_na=False, features=features,
        )[name]
        return TextPairs(_column(loaded, "src"), _column(loaded, "tgt"), str(role.path))
    loaded = datasets.load_dataset("json", data_files={name: str(role.path)}, cache_dir=hf_cache)[name]
    if extra[0] == "translation":
        table = loaded.with_format("arrow")[:].column("translation").combine_chunks()
        return TextPairs(table.field(extra[1]).to_pylist(), table.field(extra[2]).to_pylist(), str(role.path))
    return TextPairs(_column(loaded, extra[0]), _column(loaded, extra[1]), str(role.path))


# ------------------------------------------------------------------ hub
def load_hub(hub: HubData, src_lang: str, tgt_lang: str, cache_dir: Path) -> Corpus:
    """``datasets.load_dataset(name, config, revision=...)``; splits may use slicing (``train[:-2000]``).

    A local folder works as ``name`` too (train.jsonl / validation.jsonl / test.jsonl), which is
    how this is tested offline. Rows whose text is missing or blank are dropped and counted.
    """
    label = hub.name if hub.config is None else f"{hub.name}/{hub.config}"
    try:
        loaded = datasets.load_dataset(hub.name, hub.config, revision=hub.revision,
                                       cache_dir=str(cache_dir / "hf"))
    except Exception as e:  # the hub raises many types; the user needs one line
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"data.hub: cannot load dataset {label!r}: {message}") from e
    wanted = {"train": hub.train_split, "val": hub.val_split, "test": hub.test_split}
    splits: dict[str, TextPairs] = {}
    dropped: dict[str, int] = {}
    fingerprints: list[str] = []
    for split, spec in wanted.items():
        if spec is None:
            continue
        base = spec.split("[", 1)[0]
        if base not in loaded:
            if split == "test" and spec == "test":  # the default name is optional (opus_books has only train)
                log.warning("dataset %s has no 'test' split: no test scores (splits: %s)", label,
                            ", ".join(loaded))
                continue
            raise DataError(f"data.hub.{split}_split: dataset {label!r} has no split {base!r}; "
                            f"splits: {', '.join(loaded)}")
        ds = loaded[base]
        if "[" in spec:
            try:
                (part,) = datasets.ReadInstruction.from_spec(spec).to_absolute({base: len(ds)})
            except Exception as e:
                raise DataError(f"data.hub.{split}_split: bad slice {spec!r}: {e}") from None
            ds = ds.select(range(part.from_, part.to))
        src, tgt = _hub_columns(ds, hub.field, src_lang, tgt_lang, f"{label}[{spec}]")
        keep = [i for i, (s, t) in enumerate(zip(src, tgt, strict=True))
                if isinstance(s, str) and isinstance(t, str) and s.strip() and t.strip()]
        dropped[split] = len(src) - len(keep)
        if dropped[split]:
            src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
        if not src:
            raise DataError(f"data.hub: split {spec!r} of {label!r} is empty")
        splits[split] = TextPairs(src, tgt, f"hub:{label}[{spec}]")
        fingerprints.append(f"{split}={spec}:{ds._fingerprint}")
    digest = sha256_json(["hub", label, hub.revision, hub.field, src_lang, tgt_lang, fingerprints])
    short = Path(hub.name).name if os.path.isdir(hub.name) else hub.name
    source = f"hf://{label}" + (f"@{hub.revision}" if hub.revision else "")
    return Corpus(splits, digest, f"{short}.{src_lang}-{tgt_lang}", source, dropped)


def _hub_columns(ds: Any, field_name: str | None, src_lang: str, tgt_lang: str, label: str
                 ) -> tuple[list[Any], list[Any]]:
    columns = list(ds.column_names)
    table = ds.with_format("arrow")[:]
    if field_name and field_name in columns:
        array = table.column(field_name).combine_chunks()
        keys = [array.type.field(i).name for i in range(array.type.num_fields)] \
            if hasattr(array.type, "num_fields") else []
        missing = [lang for lang in (src_lang, tgt_lang) if lang not in keys]
        if missing:
            raise DataError(f"data.hub: {label}: column {field_name!r} has languages "
                            f"{', '.join(keys) or 'none'}, not {', '.join(missing)} "
                            f"(set data.src_lang / data.tgt_lang)")
        return array.field(src_lang).to_pylist(), array.field(tgt_lang).to_pylist()
    if src_lang in columns and tgt_lang in columns:
        return table.column(src_lang).to_pylist(), table.column(tgt_lang).to_pylist()
    raise DataError(f"data.hub: {label}: no {field_name!r} column and no columns {src_lang!r}/{tgt_lang!r}; "
                    f"columns: {', '.join(columns)}")
