"""One's own data, checked before anything runs: `ablate validate` and `ablate study --dry-run` look at every
data file a spec names (exists, readable, not empty, parallel files aligned, TSV/JSONL parsing on their
first lines) and say what is wrong in one located line each, exit 2, writing nothing. Language-model text
is cut into documents as the spec says (blank lines, lines, files, one stream); the committed LM specs keep
their data and their run identities."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest

from ablate.cli import main
from ablate.data.check import count_lines
from ablate.data.lm_corpus import prepare_lm
from ablate.spec.load import load_spec

REPO = Path(__file__).resolve().parents[2]

FILES_SPEC = """\
name: own-data
data:
  source: files
  files:
    format: {fmt}
    train: {train}
    val: {val}
  tokenizer: {{kind: char, vocab_size: 60}}
  max_len: 32
model: {{d_model: 16, heads: 2, encoder_layers: 1, decoder_layers: 1, d_ff: 32}}
train: {{max_steps: 2}}
tracking: {{enabled: false}}
ablation:
  axes:
    model.norm: [builtin, rms]
  seeds: [0]
"""


def write_files_spec(folder: Path, fmt: str = "text", train: str = "{src: train.de, tgt: train.en}",
                     val: str = "{src: val.de, tgt: val.en}") -> Path:
    spec = folder / "spec.yaml"
    spec.write_text(FILES_SPEC.format(fmt=fmt, train=train, val=val))
    return spec


def write_pairs(folder: Path, split: str, n_src: int, n_tgt: int | None = None) -> None:
    (folder / f"{split}.de").write_text("".join(f"satz {i}\n" for i in range(n_src)))
    (folder / f"{split}.en").write_text("".join(f"sentence {i}\n" for i in range(n_tgt or n_src)))


def errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error: ")]


def test_a_missing_file_is_one_located_line_naming_the_absolute_path_and_its_base(
        bare_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_pairs(bare_workdir, "train", 5)
    spec = write_files_spec(bare_workdir)  # val.de / val.en do not exist
    assert main(["validate", str(spec)]) == 2
    lines = errors(capsys.readouterr().err)
    assert len(lines) == 2
    assert lines[0] == (f"error: {spec}:7: data.files.val.src: file not found: {bare_workdir / 'val.de'} "
                        f"(resolved against the working directory {bare_workdir})")
    assert lines[1].startswith(f"error: {spec}:7: data.files.val.tgt: file not found: "
                               f"{bare_workdir / 'val.en'}")
    assert sorted(p.name for p in bare_workdir.iterdir()) == ["spec.yaml", "train.de", "train.en"]


def test_a_root_from_the_environment_is_named_with_its_value(
        bare_workdir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = write_files_spec(bare_workdir)
    text = spec.read_text().replace("  files:\n", "  files:\n    root: ${ABLATE_DATA_DIR:-corpus}\n")
    spec.write_text(text)
    monkeypatch.setenv("ABLATE_DATA_DIR", str(bare_workdir / "elsewhere"))
    assert main(["validate", str(spec)]) == 2
    first = errors(capsys.readouterr().err)[0]
    assert f"file not found: {bare_workdir / 'elsewhere' / 'train.de'}" in first
    assert f"(ABLATE_DATA_DIR={bare_workdir / 'elsewhere'})" in first
    monkeypatch.delenv("ABLATE_DATA_DIR")
    assert main(["validate", str(spec)]) == 2
    first = errors(capsys.readouterr().err)[0]
    assert f"file not found: {bare_workdir / 'corpus' / 'train.de'}" in first
    assert f"(ABLATE_DATA_DIR unset) under the working directory {bare_workdir}" in first


def test_parallel_files_of_different_lengths_are_named_with_both_counts(
        bare_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_pairs(bare_workdir, "train", 5, 4)
    write_pairs(bare_workdir, "val", 2)
    spec = write_files_spec(bare_workdir)
    assert main(["validate", str(spec)]) == 2
    (line,) = errors(capsys.readouterr().err)
    assert line.startswith(f"error: {spec}:6: data.files.train.tgt: {bare_workdir / 'train.en'} has 4 lines "
                           f"but data.files.train.src ({bare_workdir / 'train.de'}) has 5")


def test_an_empty_file_and_an_empty_line_are_reported(bare_workdir: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    write_pairs(bare_workdir, "train", 3)
    (bare_workdir / "train.en").write_text("one\n\nthree\n")
    (bare_workdir / "val.de").write_text("")
    (bare_workdir / "val.en").write_text("")
    spec = write_files_spec(bare_workdir)
    assert main(["validate", str(spec)]) == 2
    lines = errors(capsys.readouterr().err)
    assert lines[0] == f"error: {spec}:6: data.files.train.tgt: {bare_workdir / 'train.en'}:2: empty line " \
                       "(one sentence per line, aligned by line)"
    assert lines[1] == f"error: {spec}:7: data.files.val.src: {bare_workdir / 'val.de'}: empty file " \
                       "(no line of text)"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_reported(bare_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_pairs(bare_workdir, "train", 3)
    write_pairs(bare_workdir, "val", 3)
    (bare_workdir / "val.en").chmod(0)
    spec = write_files_spec(bare_workdir)
    assert main(["validate", str(spec)]) == 2
    (line,) = errors(capsys.readouterr().err)
    assert line == f"error: {spec}:7: data.files.val.tgt: {bare_workdir / 'val.en'}: cannot be read: " \
                   "Permission denied"


def test_tsv_and_jsonl_must_parse_on_their_first_lines(bare_workdir: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (bare_workdir / "train.tsv").write_text("hallo\thello\nnur eine spalte\nx\ty\n")
    (bare_workdir / "val.tsv").write_text("a\tb\n")
    spec = write_files_spec(bare_workdir, "tsv", "{path: train.tsv}", "{path: val.tsv}")
    assert main(["validate", str(spec)]) == 2
    (line,) = errors(capsys.readouterr().err)
    assert line == f"error: {spec}:6: data.files.train.path: {bare_workdir / 'train.tsv'}:2: expected 2 " \
                   "tab-separated fields (source<TAB>target), found 1"

    (bare_workdir / "train.jsonl").write_text('{"src": "a", "tgt": "b"}\n{"src": "a", \n')
    (bare_workdir / "val.jsonl").write_text('{"src": "a", "tgt": "b"}\n')
    spec = write_files_spec(bare_workdir, "jsonl", "{path: train.jsonl}", "{path: val.jsonl}")
    assert main(["validate", str(spec)]) == 2
    (line,) = errors(capsys.readouterr().err)
    assert line.startswith(f"error: {spec}:6: data.files.train.path: {bare_workdir / 'train.jsonl'}:2: "
                           "not valid JSON")


def test_good_files_validate(bare_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_pairs(bare_workdir, "train", 5)
    write_pairs(bare_workdir, "val", 2)
    spec = write_files_spec(bare_workdir)
    assert main(["validate", str(spec)]) == 0
    assert capsys.readouterr().out.startswith(f"ok {spec} (")


def test_the_dry_run_checks_the_data_before_anything_and_writes_nothing(
        bare_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_pairs(bare_workdir, "train", 5)
    spec = write_files_spec(bare_workdir)
    assert main(["ablate", str(spec), "--dry-run"]) == 2
    lines = errors(capsys.readouterr().err)
    assert [line.split(": ")[2] for line in lines] == ["data.files.val.src", "data.files.val.tgt"]
    assert sorted(p.name for p in bare_workdir.iterdir()) == ["spec.yaml", "train.de", "train.en"]
    write_pairs(bare_workdir, "val", 2)
    assert main(["ablate", str(spec), "--dry-run"]) == 0


def test_count_lines_counts_a_last_line_without_newline(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("x\ny")
    (tmp_path / "b").write_text("x\ny\n")
    (tmp_path / "c").write_text("")
    with gzip.open(tmp_path / "d.gz", "wt") as f:
        f.write("1\n2\n3\n")
    assert [count_lines(tmp_path / n) for n in ("a", "b", "c", "d.gz")] == [2, 2, 0, 3]


# ---------------------------------------------------------------- language-model text
PROSE = "The first paragraph,\nwrapped over two lines.\n\nA second one.\n\n\ndef f(x):\n    return x\n"
LM_SPEC = """\
name: lm-own-text
data:
  source: text
  text: {{train: train.txt, val: val.txt{extra}}}
  tokenizer: {{kind: char, vocab_size: 80}}
  max_len: 8
  batch_tokens: 64
model: {{arch: decoder_only, d_model: 16, heads: 2, decoder_layers: 1, d_ff: 32, max_positions: 64}}
train: {{max_steps: 2, eval_every: 2}}
tracking: {{enabled: false}}
"""


def lm_folder(folder: Path, extra: str = "") -> Path:
    (folder / "train.txt").write_text(PROSE)
    (folder / "val.txt").write_text(PROSE)
    spec = folder / "lm.yaml"
    spec.write_text(LM_SPEC.format(extra=extra))
    return spec


def test_prose_with_blank_lines_is_cut_into_paragraphs_by_default(bare_workdir: Path) -> None:
    spec = load_spec(lm_folder(bare_workdir))
    assert spec.data.text is not None and spec.data.text.documents == "paragraphs"
    data = prepare_lm(spec)
    assert list(data.documents["train"].texts or []) == ["The first paragraph, wrapped over two lines.",
                                                         "A second one.", "def f(x): return x"]


@pytest.mark.parametrize(("extra", "expected"), [
    (", documents: stream", ["The first paragraph, wrapped over two lines. A second one. "
                             "def f(x): return x"]),
    (", documents: lines", ["The first paragraph,", "wrapped over two lines.", "A second one.", "def f(x):",
                            "return x"]),
])
def test_the_spec_says_how_text_is_cut(bare_workdir: Path, extra: str, expected: list[str]) -> None:
    data = prepare_lm(load_spec(lm_folder(bare_workdir, extra)))
    assert list(data.documents["train"].texts or []) == expected


def test_document_lines_means_lines_and_clashes_with_another_mode(bare_workdir: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    spec = lm_folder(bare_workdir)
    two = load_spec(spec, ["data.document_lines=2"])
    assert two.data.text is not None and two.data.text.documents == "lines"
    assert prepare_lm(two).documents["train"].texts[0] == "The first paragraph, wrapped over two lines."
    assert main(["validate", str(spec), "--set", "data.document_lines=2", "--set",
                 "data.text.documents=paragraphs"]) == 2
    assert "data.document_lines: document_lines 2 counts the lines of a document, but text.documents is " \
           "'paragraphs'" in capsys.readouterr().err


def test_one_file_per_document_from_a_folder_or_a_glob(bare_workdir: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    for split in ("train", "val"):
        (bare_workdir / split).mkdir()
        (bare_workdir / split / "b.txt").write_text("second\n\nfile\n")
        (bare_workdir / split / "a.txt").write_text("first file\n")
    spec = bare_workdir / "lm.yaml"
    spec.write_text(LM_SPEC.format(extra="").replace("train.txt, val: val.txt", "train, val: 'val/*.txt'")
                    .replace("text: {", "text: {documents: files, "))
    assert list(prepare_lm(load_spec(spec)).documents["train"].texts or []) == ["first file", "second file"]
    (bare_workdir / "val" / "a.txt").unlink()
    (bare_workdir / "val" / "b.txt").unlink()
    assert main(["validate", str(spec)]) == 2
    (line,) = errors(capsys.readouterr().err)
    assert f"data.text.val: no file in {bare_workdir / 'val' / '*.txt'}" in line


def test_an_lm_on_prose_with_blank_lines_trains(bare_workdir: Path) -> None:
    from ablate.run.runner import run_experiment

    result = run_experiment(load_spec(lm_folder(bare_workdir)), quiet=True)
    assert result.status == "finished"
    assert result.metrics["val/ppl"] > 1.0


@pytest.mark.parametrize("name", ["lm-cell"])
def test_committed_lm_specs_keep_their_line_documents(name: str) -> None:
    spec = load_spec(REPO / "experiments" / f"{name}.yaml")
    assert spec.data.text is not None and spec.data.text.documents == "lines"
    assert "documents" not in spec.identity()["data"]["text"]


def test_the_positions_study_keeps_the_identity_of_its_exported_cells() -> None:
    """The cells the committed positions-extrapolation export holds are the cells the spec plans today, and
    each exported cell's spec.yaml still hashes to its key."""
    from ablate.study.designs import plan_study

    export = REPO / "reports" / "positions-extrapolation" / "export"
    recorded = set(json.loads((export / "study.json").read_text())["cells"])
    plan = plan_study(str(REPO / "experiments" / "ablations" / "positions-extrapolation.yaml"), [])
    assert {c.key for c in plan.cells} == recorded
    for key in sorted(recorded)[:3]:
        cell = load_spec(export / "cells" / key / "artifacts" / "spec.yaml", check_hardware=False)
        assert f"{cell.spec_hash}-s{cell.seed}" == key
        assert re.fullmatch(r"[0-9a-f]{12}-s\d", key)


SEARCH_SECTION = """\
search:
  trials: 2
  space:
    train.optimizer.lr: {low: 1.0e-4, high: 1.0e-2, log: true}
"""
EVERY_COMMAND = {
    "validate": ["validate"], "run": ["run"], "study": ["study"], "study --dry-run": ["study", "--dry-run"],
    "study --slurm": ["study", "--slurm", "--storage", "study.journal"],
    "study --slurm --dry-run": ["study", "--slurm", "--dry-run", "--storage", "study.journal"],
    "tune": ["tune"],
}


@pytest.mark.parametrize("command", list(EVERY_COMMAND))
def test_every_command_gives_the_same_located_lines_for_a_missing_file_and_writes_nothing(
        command: str, bare_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One validation path (ablate/data/check.py): `ablate run` used to say `data.files.val.src: file not
    found` unlocated, from inside the run, after making runs/<name>/<hash>-s0/."""
    write_pairs(bare_workdir, "train", 5)
    spec = write_files_spec(bare_workdir)  # val.de / val.en do not exist
    if command == "tune":
        spec.write_text(spec.read_text().split("ablation:")[0] + SEARCH_SECTION)
    before = sorted(p.name for p in bare_workdir.iterdir())
    args = EVERY_COMMAND[command]
    assert main([args[0], str(spec), *args[1:]]) == 2
    err = capsys.readouterr().err
    assert errors(err) == [
        f"error: {spec}:7: data.files.val.src: file not found: {bare_workdir / 'val.de'} (resolved against "
        f"the working directory {bare_workdir})",
        f"error: {spec}:7: data.files.val.tgt: file not found: {bare_workdir / 'val.en'} (resolved against "
        f"the working directory {bare_workdir})"], err
    assert "Traceback" not in err
    assert sorted(p.name for p in bare_workdir.iterdir()) == before  # no runs/, no store, no journal


@pytest.mark.slow
def test_a_searchs_best_yaml_reads_its_data_from_any_folder(bare_workdir: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """best.yaml said "retrain it with: ablate run best.yaml", which failed from its own folder: its data
    paths were relative to the folder the search ran in."""
    corpus = bare_workdir / "corpus"
    corpus.mkdir()
    for split in ("train", "val"):
        write_pairs(corpus, split, 6)
    spec = write_files_spec(bare_workdir, train="{src: corpus/train.de, tgt: corpus/train.en}",
                            val="{src: corpus/val.de, tgt: corpus/val.en}")
    text = spec.read_text().split("ablation:")[0].replace("max_steps: 2", "max_steps: 2, eval_every: 2")
    spec.write_text(text + SEARCH_SECTION.replace("trials: 2", "trials: 1"))
    assert main(["tune", str(spec)]) == 0
    (best,) = bare_workdir.glob("runs/own-data/*/best.yaml")
    hint = next(line for line in best.read_text().splitlines() if line.startswith("# retrain it with:"))
    where = best.relative_to(bare_workdir)
    assert hint.startswith(f"# retrain it with: ablate run {where}  (from {bare_workdir}")
    os.chdir(best.parent)  # its own folder (bare_workdir's monkeypatch restores the working directory)
    capsys.readouterr()
    assert main(["validate", "best.yaml"]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith("ok best.yaml")
