"""The trainer's loss alone: ``token_loss`` (the generator and the cross-entropy a chunk of rows at a time)
at several chunk sizes against ``F.cross_entropy`` of the whole logits, forward and backward.

    python scripts/token_loss_speed.py [--threads 1] [--precision fp32|bf16] [--repeats 5]

2,048 hidden rows of d 256 against a vocabulary of 8,192 (the peer bench's decoder-only batch and head).
It prints the process CPU time of each, the minimum over ``--repeats`` alternating rounds; run it on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ablate.engine.token_loss  # noqa: E402
from ablate.engine.token_loss import token_loss  # noqa: E402
from ablate.hardware import autocast_context  # noqa: E402

ROWS, D_MODEL, VOCAB = 2048, 256, 8192
CHUNKS = (0, 128, 256, 512, 1024, 2048)  # rows a chunk; 0: the whole logits and F.cross_entropy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(1, ROWS, D_MODEL, generator=g)  # (B, T, d)
    generator = nn.Linear(D_MODEL, VOCAB)
    targets = torch.randint(0, VOCAB, (1, ROWS), generator=g)
    cpu = torch.device("cpu")

    def once(rows: int) -> float:
        h = hidden.clone().requires_grad_()
        started = time.process_time()
        with autocast_context(args.precision, cpu):
            if rows == 0:
                logits = generator(h).float().flatten(0, 1)  # (N, V)
                loss = F.cross_entropy(logits, targets.flatten())
            else:
                ablate.engine.token_loss.CHUNK_ELEMENTS["cpu"] = rows * VOCAB
                loss = token_loss(h, generator, targets, -100)
        loss.backward()
        generator.zero_grad()
        return time.process_time() - started

    best: dict[int, float] = {}
    for _ in range(args.repeats):
        for rows in CHUNKS:
            best[rows] = min(best.get(rows, float("inf")), once(rows))
    print(f"torch {torch.__version__}, {args.threads} threads, {args.precision}; "
          f"CPU ms, min of {args.repeats}")
    for rows, seconds in best.items():
        print(f"  {'whole logits' if rows == 0 else f'{rows} rows a chunk':>18}: {seconds * 1000:7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
