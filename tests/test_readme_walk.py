"""README.md walked as a new user walks it: in a fresh copy of the repository's tracked files in
a temporary folder, with the German-English files the test makes, every `ablate ...` command of the
README's bash blocks runs in the README's order (install assumed), with tiny settings, and exits 0. A
command the walk cannot run on one machine is listed in ``NOT_WALKED`` with the reason; a README command
that is neither walked nor listed fails the test, so a new one gets walked too."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ablate.data.captions import caption
from tests.test_readme import REPO, ablate_commands

# Tiny settings for each spec the README runs (read as YAML by --set): a few steps of a small model.
TINY_TRAIN = ["train.max_steps=4", "train.eval_every=2", "train.checkpoint_every=2", "train.threads=1"]
TINY = {
    "experiments/quickstart.yaml": [*TINY_TRAIN, "data.synthetic.train_size=200",
                                    "data.synthetic.val_size=8", "data.synthetic.test_size=8"],
    "experiments/lm-quickstart.yaml": [*TINY_TRAIN, "data.synthetic.train_size=400",
                                       "data.synthetic.val_size=40", "data.synthetic.test_size=40",
                                       "eval.lengths=[64]"],
    "experiments/search/quick.yaml": [*TINY_TRAIN, "search.pruner={name: none}"],
    "norm-2x2.yaml": [*TINY_TRAIN, "model.d_model=32", "model.heads=2", "model.encoder_layers=1",
                      "model.decoder_layers=1", "model.d_ff=64", "data.batch_tokens=512",
                      "data.tokenizer.vocab_size=300", "eval.decode={strategy: greedy}",
                      "ablation.seeds={min: 2, max: 2}"],
}
# README commands the walk does not run, and why (each is tested where its parts exist).
NOT_WALKED = {
    "study norm-2x2.yaml --slurm": "needs a SLURM cluster, a PostgreSQL store and an MLflow server "
                                   "(tests/launch/ runs it on Debian's one-node slurm-wlm where installed)",
}
WALK_TIMEOUT = 600  # seconds for one command: a study of 4 tiny cells takes well under a minute


def _fresh_copy(dest: Path) -> None:
    """The repository's tracked files, as a clone has them (none of this checkout's runs, stores, caches)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    for name in listed.stdout.decode().split("\0"):
        if name and (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)


def _own_files(folder: Path) -> None:
    """The README study's corpus in data/: generated English captions and a stand-in German side (the
    words reversed), one sentence a line, line N of train.en translating line N of train.de."""
    rng = np.random.default_rng(0)
    (folder / "data").mkdir()
    for split, n in (("train", 300), ("valid", 8), ("test", 8)):
        english = [caption(rng) for _ in range(n)]
        (folder / "data" / f"{split}.en").write_text("\n".join(english) + "\n")
        (folder / "data" / f"{split}.de").write_text("\n".join(" ".join(reversed(e.split())) for e in english)
                                                     + "\n")


def _readme_spec(folder: Path) -> None:
    """The whole spec the README shows, written as the user writes it: norm-2x2.yaml."""
    text = (REPO / "README.md").read_text()
    (block,) = [b for b in re.findall(r"^```yaml\n(.*?)^```", text, re.M | re.S) if "name: norm-2x2" in b]
    (folder / "norm-2x2.yaml").write_text(block)


def _env(folder: Path) -> dict[str, str]:
    """A new user's environment: no tracking URI or ablate settings of this test session."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "ABLATE_", "OPTUNA_"))}
    return env | {"PYTHONPATH": str(REPO), "HOME": str(folder)}


def _tiny(args: list[str]) -> list[str]:
    spec = next((a for a in args[1:] if a in TINY), None)
    if spec is None or args[0] not in ("run", "study", "status", "tune", "validate", "show"):
        return args
    extra = [w for s in TINY[spec] for w in ("--set", s)]
    if args[0] == "tune":
        extra += ["--trials", "2"]
    return [*args, *extra]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ui(args: list[str], folder: Path, env: dict[str, str]) -> str:
    """`ablate ui` runs until Ctrl-C: wait for its links, then stop it as Ctrl-C does (SIGTERM, the same
    path); it must exit 0."""
    proc = subprocess.Popen([sys.executable, "-m", "ablate", *args, "--port", str(_free_port())], cwd=folder,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines, deadline = [], time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("latest "):
            break
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    text = "".join(lines) + out
    assert proc.returncode == 0 and any(x.startswith("latest ") for x in lines), text
    return text


def _key(args: list[str]) -> str | None:
    line = " ".join(args)
    return next((k for k in NOT_WALKED if line.startswith(k)), None)


# every README command on a fresh copy, 15 processes: 200 s on one core (a pytest-xdist worker's share)
@pytest.mark.slow
def test_the_readme_walks_from_a_fresh_clone(tmp_path: Path) -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to copy")
    _fresh_copy(tmp_path)
    _own_files(tmp_path)
    _readme_spec(tmp_path)
    env = _env(tmp_path)
    run_id: str | None = None
    walked: list[str] = []
    for args in ablate_commands():
        if _key(args) is not None:
            continue
        if "RUN_ID" in args:  # the run the README trained just before
            assert run_id is not None, args
            args = [run_id if a == "RUN_ID" else a for a in args]
        if args[0] == "ui":
            _ui(args, tmp_path, env)
            walked.append("ui")
            continue
        full = _tiny(args)
        done = subprocess.run([sys.executable, "-m", "ablate", *full], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=WALK_TIMEOUT)
        assert done.returncode == 0, (f"`ablate {' '.join(full)}` exited {done.returncode}:\n"
                                      f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        found = re.search(r"MLflow run\s+([0-9a-f]{32})", done.stdout)
        run_id = found.group(1) if found else run_id
        walked.append(" ".join(args))
    # the README's path, each step taken: a run, the LM and its generation, the study, a search, the report
    verbs = [w.split()[0] for w in walked]
    assert {"run", "generate", "validate", "show", "study", "status", "tune", "import", "report", "ui",
            "runs"} <= set(verbs), walked
    assert all(_key(a) is not None or " ".join(a) in walked or a[0] == "ui" or "RUN_ID" in a
               for a in ablate_commands())
    report = tmp_path / "reports" / "warmup-vs-norm-multi30k"
    assert (report / "report.md").is_file() and (report / "effects.tex").is_file()
    assert (report / "effects.csv").is_file()
