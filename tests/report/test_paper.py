"""Into a paper: `ablate report STUDY --format latex|csv` writes the report's effects as a booktabs table or
CSV rows (read from what the report computed, never decided again), and the verdict figure comes as PDF and
SVG too. Each file is parsed: the CSV by pandas, the LaTeX by pdflatex where Debian's TeX Live (with
booktabs) is installed, the PDF and SVG by their own readers."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from mlflow import MlflowClient

from ablate.cli import main
from ablate.report import plots as figs
from ablate.report.paper import effect_rows, latex_escape, write_table
from tests.report_studies import COMMON, EXPORTS
from tests.stores import mlflow_store

REPO = Path(__file__).resolve().parents[2]
SEQUENTIAL = REPO / "reports" / "tutorial-axes-multi30k"  # adaptive seeds: sequential verdicts, a test look
FIXED = REPO / "reports" / "quick-axes"  # a fixed seed list: fixed-sample effects


def _tex_reason() -> str | None:
    if shutil.which("pdflatex") is None or shutil.which("kpsewhich") is None:
        return "pdflatex is not installed (Debian: apt-get install texlive-latex-recommended)"
    found = subprocess.run(["kpsewhich", "booktabs.sty"], capture_output=True, text=True)
    return None if found.stdout.strip() else "booktabs.sty is not installed (texlive-latex-recommended)"


TEX_MISSING = _tex_reason()


def copied_report(folder: Path, source: Path) -> Path:
    """A report folder holding a committed report.json (the committed one is never written to)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(source / "report.json", folder / "report.json")
    return folder


def test_sequential_rows_are_the_reports_own_verdicts(tmp_path: Path) -> None:
    report = json.loads((SEQUENTIAL / "report.json").read_text())
    rows = effect_rows(report)
    comparisons = report["sequential"]["comparisons"]
    verdicts = {v["variant"]: v for v in report["verdicts"]}
    assert [r.variant for r in rows] == [c["variant"] for c in comparisons]
    for row, c in zip(rows, comparisons, strict=True):
        v = verdicts[row.variant]
        assert (row.diff, row.lo, row.hi, row.seeds) == (c["diff"], c["lo"], c["hi"], c["seeds"])
        assert (row.verdict, row.test_verdict) == (v["val_answer"], v["test_answer"])
        assert (row.test_diff, row.test_lo, row.test_hi) == (v["test_diff"], v["test_lo"], v["test_hi"])
        assert (row.metric, row.test_metric) == ("val/bleu", "test/bleu")


def test_fixed_rows_are_the_reports_effects_with_the_test_means_beside(tmp_path: Path) -> None:
    report = json.loads((FIXED / "report.json").read_text())
    rows = effect_rows(report)
    effects = [e for e in report["effects"] if e["metric"] == report["primary_metric"]]
    assert [r.variant for r in rows] == [e["variant"] for e in effects] and rows
    test = report["primary_metric"].replace("val/", "test/")
    base = report["variants"][report["baseline"]]["metrics"][test]["mean"]
    for row, e in zip(rows, effects, strict=True):
        assert (row.diff, row.lo, row.hi) == (e["diff"], e["lo"], e["hi"])
        assert row.seeds == min(e["n_base"], e["n_variant"])
        assert e["verdict"] == f"{row.variant}: {row.verdict}"  # the report's verdict, not a new one
        assert row.test_diff == pytest.approx(report["variants"][row.variant]["metrics"][test]["mean"] - base)


def test_fixed_rows_give_the_short_verdict_word_and_the_test_splits_interval(tmp_path: Path) -> None:
    """The LaTeX verdict column held the report's whole verdict line, and the test columns were "--": a
    report.json with the verdict's word (``answer``) and the test split's own effects gives both."""
    effect = {"variant": "rms", "metric": "val/loss", "diff": -0.05, "lo": -0.08, "hi": -0.02, "n_base": 4,
              "n_variant": 4, "verdict": "rms: -0.050 loss [-0.080, -0.020], significant at 5% (paired t, "
              "p=0.01): better than the baseline", "answer": "better"}
    report = {"study": "s", "baseline": "base", "primary_metric": "val/loss", "effects": [effect],
              "variants": {}, "test_effects": [{"variant": "rms", "metric": "test/loss", "diff": -0.04,
                                                "lo": -0.09, "hi": 0.01, "answer": "no detectable effect"}]}
    (row,) = effect_rows(report)
    assert (row.verdict, row.test_verdict) == ("better", "no detectable effect")
    assert (row.test_metric, row.test_diff, row.test_lo, row.test_hi) == ("test/loss", -0.04, -0.09, 0.01)
    (tmp_path / "report.json").write_text(json.dumps(report))
    cells = write_table(tmp_path, "latex").read_text().split("\\midrule\n")[1].split(" & ")
    assert cells[4] == "better" and cells[-1].startswith("no detectable effect")
    assert cells[6] == "$[-0.090,\\ +0.010]$"  # the test interval, filled
    del effect["answer"], report["test_effects"]  # a report.json from before: its verdict line as it was
    (old,) = effect_rows(report)
    assert old.verdict == effect["verdict"].removeprefix("rms: ") and old.test_lo is None


@pytest.mark.parametrize("source", [SEQUENTIAL, FIXED], ids=["sequential", "fixed"])
def test_the_csv_parses_with_pandas_into_the_same_rows(tmp_path: Path, source: Path) -> None:
    folder = copied_report(tmp_path / "r", source)
    path = write_table(folder, "csv")
    assert path == folder / "effects.csv"
    frame = pd.read_csv(path)
    rows = effect_rows(json.loads((folder / "report.json").read_text()))
    assert list(frame["variant"]) == [r.variant for r in rows]
    assert list(frame["verdict"]) == [r.verdict for r in rows]
    for got, row in zip(frame.to_dict("records"), rows, strict=True):
        for key in ("diff", "lo", "hi", "test_diff", "test_lo", "test_hi"):
            want = getattr(row, key)
            assert (math.isnan(got[key]) if want is None else got[key] == pytest.approx(want, rel=1e-12)), key
        assert int(got["seeds"]) == row.seeds


def test_a_report_without_effects_has_no_table(tmp_path: Path) -> None:
    from ablate.errors import AblateError

    (tmp_path / "report.json").write_text(json.dumps({"kind": "search", "study": "s", "effects": []}))
    with pytest.raises(AblateError, match=r"no effects against a baseline to tabulate \(a search report\)"):
        write_table(tmp_path, "csv")
    (tmp_path / "report.json").write_text(json.dumps({"kind": "ablation", "study": "s", "effects": []}))
    with pytest.raises(AblateError, match=r"\(an ablation report\)"):  # it read "(a ablation report)"
        write_table(tmp_path, "csv")
    assert not (tmp_path / "effects.csv").exists()


def test_latex_escapes_what_tex_would_read_as_commands() -> None:
    assert latex_escape("model.norm=rms_x & 50% #1 {a}") == r"model.norm=rms\_x \& 50\% \#1 \{a\}"


@pytest.mark.skipif(TEX_MISSING is not None, reason=TEX_MISSING or "")
@pytest.mark.parametrize("source", [SEQUENTIAL, FIXED], ids=["sequential", "fixed"])
def test_the_latex_table_compiles_with_booktabs(tmp_path: Path, source: Path) -> None:
    folder = copied_report(tmp_path / "r", source)
    table = write_table(folder, "latex")
    text = table.read_text()
    assert r"\toprule" in text and r"\midrule" in text and r"\bottomrule" in text
    rows = effect_rows(json.loads((folder / "report.json").read_text()))
    assert text.count(r" \\" + "\n") == len(rows) + 2  # two header lines, one line per comparison
    (folder / "paper.tex").write_text("\\documentclass{article}\n\\usepackage{booktabs}\n"
                                      "\\begin{document}\n\\input{effects.tex}\n\\end{document}\n")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper.tex"],
                          cwd=folder, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (folder / "paper.pdf").read_bytes()[:5] == b"%PDF-"
    assert "Overfull" not in done.stdout or "Table" not in done.stdout


def test_the_verdict_figure_is_also_pdf_and_svg_and_reruns_identically(tmp_path: Path) -> None:
    rows = [("norm=rms", (0.5, -0.2, 1.2), (0.4, -0.5, 1.3)),
            ("residual=post_norm", (-1.0, -1.8, -0.2), None)]
    paths = []
    for run in ("a", "b"):
        png = figs.verdict_forest(rows, 0.5, "Δ BLEU", ("val/bleu", "test/bleu"),
                                  tmp_path / run / "verdicts.png")
        paths.append([png, png.with_suffix(".pdf"), png.with_suffix(".svg")])
    png, pdf, svg = paths[0]
    assert pdf.read_bytes()[:5] == b"%PDF-" and b"%%EOF" in pdf.read_bytes()[-32:]
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and len(list(root.iter())) > 50
    for a, b in zip(*paths, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


# ---------------------------------------------------------------- through the command, on a real study
@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("paper")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder / 'mlflow.db'}")
        assert main(["import", str(EXPORTS / "rep-abl")]) == 0
        yield folder


@pytest.mark.parametrize("fmt", ["csv", "latex"])
def test_report_format_writes_the_table(
    imported: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    monkeypatch.chdir(imported)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{imported / 'mlflow.db'}")
    assert main(["report", "rep-abl", "--out", fmt, "--format", fmt]) == 0
    path = imported / fmt / f"effects.{'tex' if fmt == 'latex' else 'csv'}"
    assert f"table: {Path(fmt) / path.name}" in capsys.readouterr().out
    report = json.loads((imported / fmt / "report.json").read_text())
    variants = [e["variant"] for e in report["effects"] if e["metric"] == report["primary_metric"]]
    if fmt == "csv":
        assert list(pd.read_csv(path)["variant"]) == variants
    else:
        assert all(latex_escape(v) in path.read_text() for v in variants)


def test_both_tables_come_from_one_build_of_the_report(
        imported: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Each `--format` run rebuilt the whole report (7.8 s for a small study): both formats at once build it
    once."""
    monkeypatch.chdir(imported)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{imported / 'mlflow.db'}")
    assert main(["report", "rep-abl", "--out", "both", "--format", "latex", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert out.count("report: ") == 1 and out.count("table: ") == 2
    assert (imported / "both" / "effects.tex").is_file() and (imported / "both" / "effects.csv").is_file()


@pytest.mark.slow  # trains the study's two cells (a second or two each)
def test_a_table_of_a_study_without_a_finished_cell_names_the_study_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A LaTeX export of a study with no finished cell exited 2 but wrote report.md, .html, .json, runs.csv
    and figures/, and its message pointed at report.json rather than at the study."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_store(tmp_path))
    spec = "name: all-diverged\nseed: 0\n" + COMMON.replace(", ATTN", "").replace("lr: 0.01", "lr: 50") + (
        "ablation:\n  design: variants\n  variants:\n    - {model: {residual: post_norm}}\n  seeds: [0]\n")
    (tmp_path / "study.yaml").write_text(spec)
    assert main(["study", "study.yaml", "-q"]) == 0  # a diverged cell is a result
    capsys.readouterr()
    assert main(["report", "all-diverged", "--format", "latex"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        "error: study all-diverged: no effects to tabulate as latex: no variant and its baseline both have "
        "a finished cell yet (0 of 2 runs finished); nothing written (`ablate status all-diverged` shows "
        "where its cells stand)"], err
    assert not (tmp_path / "reports").exists()


def _stamp(folder: Path) -> str:
    lines = (folder / "report.md").read_text().splitlines()
    return next(line for line in lines if "Report generated on" in line)


def test_a_table_of_a_current_report_reuses_it_and_a_changed_study_rebuilds_it(
        imported: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Each `--format` run rebuilt the whole report (7.8 s): a table of a folder whose report was built from
    the study as it stands is written from that report.json; a run changed since, or a file missing, and
    the report is built again (the date line tells a rebuilt report.md from a kept one)."""
    monkeypatch.chdir(imported)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{imported / 'mlflow.db'}")
    folder = imported / "fresh"

    def table(epoch: int) -> str:
        monkeypatch.setenv("SOURCE_DATE_EPOCH", str(epoch))
        assert main(["report", "rep-abl", "--out", "fresh", "--format", "csv"]) == 0
        return capsys.readouterr().out

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1000000000")
    assert main(["report", "rep-abl", "--out", "fresh"]) == 0
    capsys.readouterr()
    built = _stamp(folder)
    out = table(1100000000)
    assert "is current" in out and "not rebuilt" in out and "table: fresh/effects.csv" in out, out
    assert _stamp(folder) == built and list(pd.read_csv(folder / "effects.csv")["variant"])

    (folder / "report.html").unlink()  # a folder missing a file is not a whole report
    assert "is current" not in table(1200000000) and _stamp(folder) != built
    rebuilt = _stamp(folder)
    assert "is current" in table(1300000000) and _stamp(folder) == rebuilt

    client = MlflowClient()
    experiments = [e.experiment_id for e in client.search_experiments()]
    baseline = client.search_runs(experiments, "tags.`ablate.variant` = 'baseline'", max_results=1)[0]
    client.set_tag(baseline.info.run_id, "reviewed", "yes")  # the study changed since the report was built
    assert "is current" not in table(1400000000) and _stamp(folder) != rebuilt
