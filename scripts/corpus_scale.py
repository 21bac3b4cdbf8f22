"""Peak memory and speed of preparing and training on language-model corpora of growing size: does memory
stay flat when the corpus grows 40-fold (token shards, ablate/data/token_shards.py)?

    python -m ablate.data.kernel_corpora source .ablate_cache/corpora/linux-source-6.1
    python scripts/corpus_scale.py .ablate_cache/corpora/linux-source-6.1 --sizes 25 250 1000 \
        --out /tmp/corpus-scale [--steps 30]

For each size S (MB of text) it writes ``<out>/<S>mb/train.txt``, the first S MB of the prepared corpus's
``train.txt.gz`` (whole documents, one a line), and ``val.txt`` (its first 200 val documents), then runs,
each in a fresh process so that each peak is its own:

* prepare: ``prepare_lm`` of a decoder-only spec on that folder with a tokenizer file (BPE 8000 trained
  once on the first 25 MB and saved as ``<out>/tokenizer.json``: the tokenizer a researcher brings, so
  that the figures are the shards' and not a tokenizer trainer's): seconds, MB of text a second, tokens/s,
  peak RSS;
* train: the same spec's run opened from the shards, ``--steps`` optimizer steps of a small model (d 128,
  2 layers, blocks of 256, 16 blocks a step) read from the memory map: tokens/s, peak RSS.

It prints one line per size and step and the ratios the goals read: the largest corpus's peak RSS over the
smallest's (goal: at most 1.5x), and preparation MB/s (goal: 2 MB/s or more on 2 cores). Run it on an idle
machine (`flock /work/heavy.lock ...` on a shared one).
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from ablate.data.lm_corpus import prepare_lm  # noqa: E402
from ablate.data.tokenize import train_tokenizer  # noqa: E402
from ablate.engine.builders import build_lm  # noqa: E402
from ablate.engine.progress import vm_hwm_kib  # noqa: E402
from ablate.engine.trainer import Trainer  # noqa: E402
from ablate.spec.experiment import ExperimentSpec  # noqa: E402

MB = 1 << 20


def peak_rss_mb() -> float:
    """This process's peak resident set: ``VmHWM``, the high-water mark of its own address space.

    Not ``ru_maxrss``: Linux carries a process's peak across ``exec`` into ``RUSAGE_SELF``, so a child's
    reading starts at its parent's peak at the fork (here the parent's, which trained the tokenizer on the
    first slice: every child read 1,082 MB, the size of that peak)."""
    hwm = vm_hwm_kib()
    if hwm is None:  # no /proc: the lifetime peak, an upper bound
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return hwm / 1024


def spec_for(folder: Path, tokenizer: Path, cache: Path, run_dir: Path) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "corpus-scale", "tracking": {"enabled": False},
        "data": {"source": "text", "document_lines": 1,
                 "text": {"root": str(folder), "train": "train.txt", "val": "val.txt"},
                 "tokenizer": {"kind": "file", "path": str(tokenizer)}, "max_len": 256, "batch_tokens": 4096,
                 "cache_dir": str(cache)},
        "model": {"arch": "decoder_only", "d_model": 128, "heads": 4, "decoder_layers": 2, "d_ff": 512,
                  "dropout": 0.0, "positions": "rope", "embeddings": "tied", "max_positions": 256},
        "train": {"max_steps": 1000, "eval_every": 1000, "out_dir": str(run_dir)}})


def slice_corpus(source: Path, out: Path, megabytes: int) -> Path:
    """The first ``megabytes`` MB of whole training documents, and 200 val documents, as plain text."""
    folder = out / f"{megabytes}mb"
    if (folder / "val.txt").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    budget, written = megabytes * MB, 0
    with gzip.open(source / "train.txt.gz", "rt", encoding="utf-8") as lines, \
            open(folder / ".train.txt.tmp", "w", encoding="utf-8") as handle:
        for line in lines:
            if written >= budget:
                break
            handle.write(line)
            written += len(line.encode("utf-8"))
    (folder / ".train.txt.tmp").rename(folder / "train.txt")
    with gzip.open(source / "val.txt.gz", "rt", encoding="utf-8") as lines:
        (folder / "val.txt").write_text("".join(line for _, line in zip(range(200), lines, strict=False)))
    return folder


def tokenizer_file(smallest: Path, out: Path) -> Path:
    path = out / "tokenizer.json"
    if not path.is_file():
        with open(smallest / "train.txt", encoding="utf-8") as handle:
            tok = train_tokenizer("bpe", (line.strip() for line in handle), 8000, 1)
        tok.save(str(path))
    return path


def child(step: str, folder: Path, tokenizer: Path, cache: Path, steps: int) -> dict[str, Any]:
    """One measurement in this (fresh) process."""
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as run_dir:
        spec = spec_for(folder, tokenizer, cache, Path(run_dir))
        started = time.perf_counter()
        data = prepare_lm(spec)
        prepared_s = time.perf_counter() - started
        tokens = sum(s.docs.n_tokens for s in data.documents.values())
        text_mb = sum((folder / f).stat().st_size for f in ("train.txt", "val.txt")) / MB
        out: dict[str, Any] = {"step": step, "mb": text_mb, "tokens": tokens, "cached": data.cached}
        if step == "prepare":
            out.update(seconds=prepared_s, mb_per_s=text_mb / prepared_s, tokens_per_s=tokens / prepared_s)
        else:
            model = build_lm(spec.model, data.tokenizers.tgt_vocab_size, seed=0)
            trainer = Trainer(spec, data, model, Path(run_dir), torch.device("cpu"), show_progress=False)
            trainer.train_step()  # warm-up
            started, done = time.perf_counter(), 0
            for _ in range(steps):
                done += trainer.train_step()[1]
            seconds = time.perf_counter() - started
            out.update(seconds=seconds, tokens_per_s=done / seconds)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def run_child(step: str, folder: Path, tokenizer: Path, cache: Path, steps: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", step, str(folder), "--tokenizer", str(tokenizer),
               "--cache", str(cache), "--steps", str(steps)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a prepared corpus folder (train.txt.gz, val.txt.gz)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[25, 250, 1000], help="MB of text")
    parser.add_argument("--out", type=Path, default=Path("/tmp/corpus-scale"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--child", choices=("prepare", "train"))
    parser.add_argument("--tokenizer", type=Path)
    parser.add_argument("--cache", type=Path)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.source, args.tokenizer, args.cache, args.steps)))
        return 0
    folders = [slice_corpus(args.source, args.out, size) for size in sorted(args.sizes)]
    tokenizer = tokenizer_file(folders[0], args.out)
    rows = []
    for folder in folders:
        cache = folder / "cache"
        for step in ("prepare", "train"):
            row = run_child(step, folder, tokenizer, cache, args.steps)
            rows.append(row)
            rate = f"{row['mb_per_s']:6.2f} MB/s " if step == "prepare" else " " * 12
            print(f"{folder.name:>8} {step:7s} {row['mb']:8.1f} MB  {row['tokens']:>12,} tokens  "
                  f"{row['seconds']:8.1f} s  {rate}{row['tokens_per_s']:>10,.0f} tokens/s  "
                  f"peak RSS {row['peak_rss_mb']:7.0f} MB", flush=True)
    for step in ("prepare", "train"):
        peaks = [r["peak_rss_mb"] for r in rows if r["step"] == step]
        print(f"{step}: peak RSS of the largest corpus / the smallest: {peaks[-1] / peaks[0]:.2f}x "
              "(goal <= 1.5x)")
    slowest = min(r["mb_per_s"] for r in rows if r["step"] == "prepare")
    print(f"preparation: slowest {slowest:.2f} MB of text a second (goal >= 2)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
