"""README.md walked as a new user walks it: in a fresh copy of the repository's tracked files in
a temporary folder, with the German-English files the test makes, every `ablate ...` command of the
README's bash blocks runs in the README's order (install assumed), with tiny settings, and exits 0. A
command the walk cannot run on one machine is listed in ``NOT_WALKED`` with the reason; a README command
that is neither walked nor listed fails the test, so a new one gets walked too.

Then the walk a researcher takes with a corpus and a tokenizer of their own, which the project has never
seen: text files the test writes (the Python standard library's docstrings, one a document) and a byte-level
BPE trained on them with `tokenizers`, its one special token GPT-2's end of text; a small language-model
study crossing a GELU MLP with SwiGLU and LayerNorm with RMSNorm (named levels), from validate through the
dry run, the study, the report and its LaTeX table, to the best cell's generation."""

from __future__ import annotations

import importlib
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
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

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


# A study on one's own corpus and tokenizer, tiny: 4 variants x 2 seeds of a 1-layer LM, 6 steps a cell.
OWN_STUDY = """\
name: own-lm
seed: 0
data:
  source: text
  text: {root: corpus, train: train.txt, val: val.txt, test: test.txt}
  tokenizer: {kind: file, path: tokenizer.json}
  max_len: 32
  batch_tokens: 256
model: {arch: decoder_only, d_model: 32, heads: 2, decoder_layers: 1, d_ff: 64, dropout: 0.0,
        ffn: linear, activation: gelu, norm: builtin, max_positions: 64}
train:
  optimizer: {name: adamw, lr: 3.0e-3}
  schedule: {name: cosine, warmup_steps: 2}
  max_steps: 6
  eval_every: 3
  checkpoint_every: 3
  threads: 1
eval: {lengths: [32], samples: 0}
ablation:
  design: full_factorial
  axes:
    ffn:
      gelu_mlp: {model.ffn: linear, model.activation: gelu}
      swiglu: {model.ffn: swiglu}
    model.norm: [builtin, rms]
  metric: val/loss
  seeds: [0, 1]
"""


def _own_corpus(folder: Path) -> None:
    """Text the project does not ship: the standard library's module docstrings, one document each
    (paragraphs split by blank lines), and a byte-level BPE of 400 types trained on them whose only special
    token is GPT-2's <|endoftext|>."""
    docs = []
    for name in ("json", "textwrap", "string", "collections", "argparse", "pathlib", "random", "statistics",
                 "fractions", "decimal", "heapq", "bisect", "functools", "itertools", "difflib", "shlex"):
        doc = importlib.import_module(name).__doc__ or ""
        docs.append(" ".join(doc.split()))
    (folder / "corpus").mkdir()
    for split, part in (("train", docs[:12] * 3), ("val", docs[12:14]), ("test", docs[14:])):
        (folder / "corpus" / f"{split}.txt").write_text("\n\n".join(part) + "\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                                      show_progress=False,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(folder / "tokenizer.json"))
    (folder / "own-lm.yaml").write_text(OWN_STUDY)


def _ablate(args: list[str], folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "ablate", *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=WALK_TIMEOUT)
    assert done.returncode == 0, (f"`ablate {' '.join(args)}` exited {done.returncode}:\n"
                                  f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


# 8 cells of a 1-layer LM and a report: 69 s of CPU, 6 min of wall time on a busy 2-core machine
@pytest.mark.soak  # a 2 x 2 study from validate to LaTeX (the default suite's 10 minutes)
def test_a_language_model_study_on_ones_own_corpus_and_tokenizer(tmp_path: Path) -> None:
    _own_corpus(tmp_path)
    env = _env(tmp_path)
    checked = _ablate(["validate", "own-lm.yaml"], tmp_path, env)
    # the file's one end-of-text token serves as pad and bos, said beside the ok
    assert "serves as pad and bos too" in checked.stdout and "ok own-lm.yaml" in checked.stdout
    dry = _ablate(["study", "own-lm.yaml", "--dry-run"], tmp_path, env).stdout
    assert "4 variants x 2 seeds = 8 cells" in dry and "ffn=swiglu, norm=rms" in dry
    assert "model.activation" not in dry  # a gated FFN takes none: no difference
    assert "cannot decide ffn=swiglu against the baseline: 2 fixed seeds" in dry  # and it says what could
    _ablate(["study", "own-lm.yaml"], tmp_path, env)
    _ablate(["report", "own-lm", "--format", "latex", "--format", "csv"], tmp_path, env)
    report = tmp_path / "reports" / "own-lm"
    text = (report / "report.md").read_text()
    assert "ffn=swiglu vs gelu_mlp (main effect)" in text and "(interaction)" in text
    assert (report / "effects.tex").is_file() and (report / "effects.csv").is_file()
    said = _ablate(["generate", "--study", "own-lm.yaml", "--best", "--prompt", "Return the", "--max-new",
                    "8", "--greedy"], tmp_path, env)
    assert said.stdout.startswith("Return the")
    assert "best cell of study own-lm by final/val/loss" in said.stderr
