"""README.md keeps working as a user reads it: each spec it shows validates (and a study's cells expand as
`ablate study --dry-run` expands them), each `ablate ...` command parses with the real command line
parser and names files that exist, its set-up commands are the ones CI runs, and its links lead somewhere."""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path

import pytest
import yaml

from ablate.cli import build_parser
from ablate.spec.load import load_spec
from ablate.study.designs import plan_study

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
# Linked from the README, written on another branch of this wave (several workers, machines and SLURM).
LINKED_BEFORE_WRITTEN = {"docs/scaling.md"}


def blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(README) if lang == language]


def ablate_commands() -> list[list[str]]:
    """The arguments of every `ablate ...` command in the README's bash blocks (comments, `&&` chains,
    `\\` continuations and leading VAR=value assignments handled)."""
    commands = []
    for block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                    words = words[1:]
                if words[:1] == ["ablate"]:
                    commands.append(words[1:])
    return commands


def readme_spec_names() -> set[str]:
    return {yaml.safe_load(block)["name"] + ".yaml" for block in blocks("yaml")}


def test_readme_is_short_and_shows_a_whole_study_spec_on_files() -> None:
    assert len(README.splitlines()) <= 300
    specs = [yaml.safe_load(block) for block in blocks("yaml")]
    studies = [s for s in specs if "ablation" in s and s["data"]["source"] == "files"]
    assert studies and studies[0]["ablation"]["design"] == "full_factorial"


def _write_data_files(spec: dict, folder: Path) -> None:
    """Two sentence pairs in each file the spec's `data.files` names, under its root."""
    files = spec.get("data", {}).get("files") or {}
    root = folder / files.get("root", ".")
    for split in ("train", "val", "test"):
        for side, name in (files.get(split) or {}).items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            text = "ein Hund läuft .\nzwei Männer .\n" if side == "src" else "a dog runs .\ntwo men .\n"
            path.write_text(text)


@pytest.mark.parametrize("block", blocks("yaml"), ids=lambda b: b.split("name: ", 1)[-1].split("\n", 1)[0])
def test_each_readme_spec_validates(block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec_data = yaml.safe_load(block)
    _write_data_files(spec_data, tmp_path)
    path = tmp_path / f"{spec_data['name']}.yaml"
    path.write_text(block)
    spec = load_spec(path)
    if spec.ablation is not None:  # every variant a valid spec, as `ablate study --dry-run` checks
        plan = plan_study(str(path))
        if spec.ablation.design == "full_factorial":  # every combination of the axes
            assert len(plan.variants) == math.prod(len(values) for values in spec.ablation.axes.values())


def test_readme_has_the_commands_a_user_runs() -> None:
    verbs = {args[0] for args in ablate_commands()}
    assert {"run", "study", "status", "tune", "report", "ui", "validate"} <= verbs


@pytest.mark.parametrize("args", ablate_commands(), ids=lambda a: " ".join(a)[:60])
def test_each_readme_command_parses_and_names_real_files(args: list[str]) -> None:
    parsed = build_parser().parse_args(args)
    spec = getattr(parsed, "spec_path", None) or (parsed.specs[0] if hasattr(parsed, "specs") else None)
    if spec is not None:  # a committed spec, or the spec the README shows whole
        assert (REPO / spec).is_file() or spec in readme_spec_names(), spec


def test_readme_set_up_commands_are_what_ci_runs() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "pip install torch==2.13.0 && pip install -e . && ablate run experiments/quickstart.yaml" in README
    assert 'pip install torch==2.13.0 && pip install -e ".[test]" && python -m pytest -q' in README
    assert "pip install -q torch==2.13.0" in ci and 'pip install -q -e ".[test]"' in ci
    assert 'python -m pytest -q "$@"' in ci and re.search(r"^tier \|\| rc", ci, re.M)


def test_readme_links_lead_to_files() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if "://" not in t]
    assert len(local) > 10
    missing = [t for t in local if not (REPO / t).exists() and t not in LINKED_BEFORE_WRITTEN]
    assert missing == []


def test_readme_slurm_tracking_uri_is_the_one_scaling_md_sets_up() -> None:
    # docs/scaling.md's server listens on 127.0.0.1 only and jobs reach it through a TLS proxy: a README
    # pointing jobs at http://LOGINHOST:5000 sends them to a port no other node can reach (and would send
    # passwords in the clear if it could).
    scaling = (REPO / "docs" / "scaling.md").read_text()
    proxied = re.findall(r"export MLFLOW_TRACKING_URI=(\S+)", scaling)
    assert proxied and all(uri.startswith("https://") for uri in proxied)
    assert set(re.findall(r"export MLFLOW_TRACKING_URI=(\S+)", README)) <= set(proxied)
