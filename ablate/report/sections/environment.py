"""What the runs of a study ran on: hardware, library versions, the code's commit, and the datasets.

Read from the tags every run carries (``ablate.device``, ``ablate.cpu``, ``ablate.host``,
``ablate.version.*``, ``mlflow.source.git.commit``), the first run's ``environment.json`` for what no tag
says, and each run's MLflow dataset inputs (name and digest), which are listed per seed or variant when
the runs did not all see the same data.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ablate.report.compute.loaded_study import design_params, padding_text
from ablate.report.render import Block, Section, Table
from ablate.report.section_api import Inputs, Part, section
from ablate.spec import metricnames
from ablate.tracking import record
from ablate.tracking.read import read_text_artifact

if TYPE_CHECKING:
    from ablate.report.compute.loaded_study import Study

# Tags every run carries -> the label shown; hardware first, then the software, then the code.
ENV_TAGS = {record.DEVICE: "device", record.PRECISION: "precision", record.CPU: "CPU", record.HOST: "host"}
CODE_TAGS = {record.GIT_COMMIT: "git commit", record.GIT_DIRTY: "uncommitted changes"}
# environment.json keys (the first run's) shown when no tag says the same.
ENV_JSON = {"cpu": "CPU", "cpu_count": "CPU cores (logical)", "gpu": "GPU", "platform": "platform"}
ORDER = ["device", "precision", "CPU", "CPU cores (logical)", "GPU", "host", "platform"]


def environment(study: Study) -> dict[str, list[str]]:
    """Distinct values across the runs of every environment tag, plus what the first run's
    environment.json adds (CPU model, core count, platform). Absent entries are simply not shown."""
    env: dict[str, set[str]] = {}
    for r in study.runs:
        for tag, value in r.tags.items():
            version = tag.startswith(record.VERSION_PREFIX)
            label = ENV_TAGS.get(tag) or CODE_TAGS.get(tag) or (
                tag.removeprefix(record.VERSION_PREFIX) + " version" if version else None)
            if label and value:
                env.setdefault(label, set()).add(value)
    if study.runs:
        text = read_text_artifact(study.runs[0].run_id, "environment.json")
        try:
            found = json.loads(text) if text else {}
        except ValueError:
            found = {}
        for key, shown in ENV_JSON.items():
            recorded = found.get(key) if isinstance(found, dict) else None
            if recorded not in (None, "") and shown not in env:
                env[shown] = {str(recorded)}
    return {k: sorted(v) for k, v in env.items()}


def hardware_rows(env: dict[str, list[str]]) -> list[list[str]]:
    """Hardware rows first (device, CPU, cores, host), then versions, then the code's commit."""
    code = list(CODE_TAGS.values())

    def rank(k: str) -> tuple[int, int, str]:
        return (0, ORDER.index(k), k) if k in ORDER else (2, code.index(k), k) if k in code else (1, 0, k)

    rows = [[k, "; ".join(env[k])] for k in sorted(env, key=rank)]
    return rows or [["(none recorded)", "—"]]


def unused(key: str, params: dict[str, str]) -> bool:
    """A resolved param that the run never read: the decoding settings (``eval.decode.*``) of a language
    model, which is evaluated by its loss alone, and the training settings of a tokenizer given as a file
    (``data.tokenizer.kind: file``: its vocabulary is the file's; `data_rows` says which). A language model
    has no source side either: its languages and source markers are not shown; nor is
    ``data.document_lines`` where ``data.text.documents`` is not ``lines`` (it counts only those)."""
    lm = params.get("model.arch") == "decoder_only"
    if lm and (key.startswith("eval.decode.") or key in SOURCE_FIELDS):
        return True
    if key == "data.document_lines" and params.get("data.text.documents") not in (None, "null", "lines"):
        return True  # text cut at blank lines, by file or as one stream: no line count is read
    return params.get("data.tokenizer.kind") == "file" and key in TRAINED_TOKENIZER_FIELDS


SOURCE_FIELDS = ("data.src_lang", "data.tgt_lang", "data.source_bos", "data.source_eos",
                 "data.reverse_source")
TRAINED_TOKENIZER_FIELDS = ("data.tokenizer.vocab_size", "data.tokenizer.min_freq", "data.tokenizer.joint")


def data_rows(ref: dict[str, str], study: Study) -> list[list[str]]:
    """The baseline's ``data.*`` params, with the vocabulary the runs had: for a tokenizer file, its own
    size (``data/vocab_size``, recorded by each run) in place of the spec's default, which it ignores."""
    rows = [[f"`{k}`", v] for k, v in sorted(design_params(ref).items())
            if k.startswith("data.") and v != "null" and not unused(k, ref)]
    sizes = sorted({int(r.metrics[metricnames.VOCAB_SIZE]) for r in study.runs
                    if metricnames.VOCAB_SIZE in r.metrics})
    if sizes:
        rows.append(["vocabulary (tokens the model embeds)", ", ".join(f"{n:,}" for n in sizes)])
    elif ref.get("data.tokenizer.kind") == "file":
        rows.append(["vocabulary (tokens the model embeds)",
                     "the tokenizer file's (not recorded by these runs)"])
    return rows


# ---------------------------------------------------------------- the section
@section(210, ("ablation", "search"))
def part(inp: Inputs) -> Part:
    """The reference tables (data, hardware and versions, the baseline's every param), after the results;
    ``data['datasets']``."""
    study = inp.study
    runs = study.runs
    ref = study.of(study.baseline)[0].params if study.baseline else (runs[0].params if runs else {})
    rows = data_rows(ref, study) + [["dataset", d.text] for d in inp.datasets]
    padding = padding_text(study)
    if padding:
        rows.append(["padding (`data/padding_fraction`)", padding])
    blocks: list[Block] = []
    if rows:
        blocks.append(Table(["data", "value"], rows, "ll", "Data"))
    blocks.append(Table(["environment", "value"], hardware_rows(environment(study)), "ll",
                        "Hardware, versions and code"))
    if ref:
        spec_rows = [[f"`{k}`", v] for k, v in sorted(design_params(ref).items()) if not unused(k, ref)]
        title = f"Baseline spec ({study.baseline or 'first run'}): every resolved param"
        blocks.append(Table(["param", "value"], spec_rows, "ll", title, collapsed=True))
    return Part("environment", [Section("Data, hardware and code", blocks)],
                data={"datasets": [d.text for d in inp.datasets]})
