"""Time the trainer's optimizer steps on a spec's real batches, with glibc's default allocator settings and
then with freed memory kept in the process (what `ablate run` does on a CPU: ablate/hardware.py).

    ABLATE_DATA_DIR=../shared/data/multi30k python scripts/step_speed.py experiments/multi30k-cell.yaml \
        [--set model.d_ff=768 ...] [--steps 12]

Prints, for each setting, the mean wall time of a step, target tokens per second and the process's user and
system CPU seconds over the timed steps (page faults show as system time). Both settings train the same
model on the same batches in one process, one after the other (the allocator setting cannot be undone),
after warm-up steps of their own. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablate.data.prepare import prepare_data  # noqa: E402
from ablate.engine.builders import build_model
from ablate.engine.trainer import Trainer  # noqa: E402
from ablate.hardware import keep_freed_memory_in_process  # noqa: E402
from ablate.spec.load import load_spec  # noqa: E402


def time_steps(trainer: Trainer, steps: int, warmup: int) -> tuple[float, float, float, float]:
    """(seconds per step, target tokens per second, user CPU s, system CPU s) over `steps` steps, from the
    first batch of epoch 0 (each setting times the same batches)."""
    trainer.state.epoch, trainer.state.batch_in_epoch = 0, 0
    for _ in range(warmup):
        trainer.train_step()
    before = resource.getrusage(resource.RUSAGE_SELF)
    started, tokens = time.perf_counter(), 0
    for _ in range(steps):
        tokens += trainer.train_step()[1]
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    return wall / steps, tokens / wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    spec = load_spec(args.spec, args.overrides, check_hardware=False)
    data = prepare_data(spec)
    tok = data.tokenizers
    model = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=spec.seed)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(spec, data, model, Path(run_dir), torch.device("cpu"), show_progress=False)
        print(f"{spec.name}: {sum(p.numel() for p in model.parameters()):,} parameters, "
              f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs, precision {trainer.precision}")
        rows = [("glibc defaults", time_steps(trainer, args.steps, args.warmup))]
        if keep_freed_memory_in_process():
            rows.append(("freed memory kept", time_steps(trainer, args.steps, args.warmup)))
    for label, (step_s, tps, user, system) in rows:
        print(f"{label:18s} {step_s * 1000:7.0f} ms/step  {tps:7.0f} target tokens/s  "
              f"user {user:6.1f} s  sys {system:5.1f} s")
    if len(rows) == 2:
        print(f"speed-up {rows[0][1][0] / rows[1][1][0]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
