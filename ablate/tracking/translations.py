"""A text run's final translations as an MLflow artifact: written by the run, read back by the report.

One gzipped file per split (``record.translations_artifact``): one JSON object ``{"hyp": ..., "ref": ...}``
a line, in corpus order, for every sentence the run's final BLEU was computed on. The reference travels
with its hypothesis, so a report made from an export alone (``ablate import``) can rescore and resample
the runs without the corpus. Hypothesis and reference of a sentence sit side by side, where gzip finds
their shared words: a Multi30k split (about 1,000 sentences) takes about 25 KB.

The bytes depend only on the sentences (no timestamp or file name in the gzip header).
"""

from __future__ import annotations

import gzip
import io
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ablate.tracking import record
from ablate.tracking.read import download_artifact


@dataclass(frozen=True)
class SplitTranslations:
    """One split's final hypotheses and their references, in corpus order."""

    hypotheses: list[str]
    references: list[str]


def encode(hypotheses: Sequence[str], references: Sequence[str]) -> bytes:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    text = "".join(json.dumps({"hyp": h, "ref": r}, ensure_ascii=False) + "\n"
                   for h, r in zip(hypotheses, references, strict=True))
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:
        gz.write(text.encode("utf-8"))
    return buf.getvalue()


def decode(data: bytes) -> SplitTranslations:
    lines = gzip.decompress(data).decode("utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line]
    return SplitTranslations([str(r["hyp"]) for r in rows], [str(r["ref"]) for r in rows])


def write(folder: Path, split: str, hypotheses: Sequence[str], references: Sequence[str]) -> Path:
    """The split's artifact file under ``folder`` (its name as in the run: ``<split>.jsonl.gz``)."""
    path = folder / Path(record.translations_artifact(split)).name
    path.write_bytes(encode(hypotheses, references))
    return path


def read(run_id: str, split: str) -> SplitTranslations | None:
    """The run's translations of ``split``; None when the run has none (recorded before they were logged,
    an LM or synthetic-task run, or a run that did not finish)."""
    with tempfile.TemporaryDirectory() as tmp:
        local = download_artifact(run_id, record.translations_artifact(split), tmp)
        return decode(local.read_bytes()) if local is not None and local.is_file() else None
