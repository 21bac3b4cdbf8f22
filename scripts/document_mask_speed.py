"""The GPT-2-small spec's document-masked train step on a CPU, the (B, 1, T, T) mask against the fused
per-document attention: tokens a second and peak memory.

    python scripts/document_mask_speed.py [--spec experiments/lm-gpt2-small-ksrc.yaml] [--steps 3]
        [--precision auto|fp32|bf16] [--mean-doc 2500] [--threads 2]
    python scripts/document_mask_speed.py --layers 2 --d-model 64 --heads 4 --block 256 --rows 2 \\
        --vocab 512 --steps 1          # a check at tiny settings (seconds)

The model is the spec's (GPT-2 small: 12 layers, d 768, 12 heads, T 1,024, tied embeddings, learned
positions, 50,257 types), its micro-batch (``data.batch_tokens / max_len`` blocks) and its precision
(``auto``: bf16 where the CPU has bf16 units); the blocks hold documents packed end to end, their lengths
drawn from an exponential distribution of mean ``--mean-doc`` tokens (the kernel-source corpus's files are
a few thousand tokens; at 2,500 about two blocks in three span two documents or more). A step is the
trainer's: forward, the chunked loss, backward (no optimizer: it is the same in both). Each form runs in a
process of its own, so that its peak resident set (VmHWM) is its own; the forms alternate ``--rounds``
times and the best step time of each is kept. Run it on an otherwise idle machine.

``mask``: the reference, every forward builds the (B, 1, T, T) mask (what every packed block took before
the fused kernels: sdpa with the mask in fp32, two matmuls over (B, heads, T, T) float32 scores in bf16);
``fused``: one sdpa call a document (``varlen``), the form a CPU takes where documents average at least
``decoder_only.VARLEN_MIN_LENGTH`` tokens.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablate.engine import decoder_only  # noqa: E402
from ablate.engine.builders import build_lm  # noqa: E402
from ablate.engine.progress import vm_hwm_kib  # noqa: E402
from ablate.engine.token_loss import token_loss  # noqa: E402
from ablate.hardware import autocast_context, keep_freed_memory_in_process, resolve_precision  # noqa: E402
from ablate.spec.experiment import ModelSpec  # noqa: E402
from ablate.spec.load import load_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FORMS = ("mask", "fused")


def packed_segments(rows: int, block: int, mean_doc: float, seed: int) -> torch.Tensor:
    """(rows, block) document ids of consecutive blocks cut from documents packed end to end."""
    rng = np.random.default_rng(seed)
    ids = np.empty(rows * block, dtype=np.int64)
    at, doc = 0, 0
    while at < ids.size:
        length = max(1, int(rng.exponential(mean_doc)))
        ids[at:at + length] = doc
        at += length
        doc += 1
    return torch.from_numpy(ids.reshape(rows, block))


def one_form(args: argparse.Namespace) -> dict[str, Any]:
    """Train steps of one form in this process: the best step's seconds, tokens/s, the peak resident set."""
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    keep_freed_memory_in_process()  # as a training run does (ablate.hardware.prepare_device)
    spec = load_spec(args.spec, ["data.text.root=/nonexistent"]) if args.spec else None
    fields = spec.model.model_dump() if spec is not None else {}
    for key, value in (("decoder_layers", args.layers), ("d_model", args.d_model), ("heads", args.heads),
                       ("max_positions", args.block)):
        if value is not None:
            fields[key] = value
    if args.d_model is not None:
        fields["d_ff"] = 4 * args.d_model
    model_spec = ModelSpec.model_validate(fields)
    block = args.block or model_spec.max_positions
    rows = args.rows or (spec.data.batch_tokens // block if spec is not None else 8)
    precision = resolve_precision(args.precision or (spec.train.precision if spec else "fp32"),
                                  torch.device("cpu"))
    model = build_lm(model_spec, args.vocab, seed=0).train()
    # the reference: a threshold no block reaches; fused: every block whose documents average >= the rule's
    decoder_only.VARLEN_MIN_LENGTH = 1 << 30 if args.form == "mask" else decoder_only.VARLEN_MIN_LENGTH
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, args.vocab, (rows, block), generator=g)
    targets = torch.randint(4, args.vocab, (rows, block), generator=g)
    segments = packed_segments(rows, block, args.mean_doc, seed=2)
    cpu = torch.device("cpu")
    best = float("inf")
    for _ in range(args.steps):
        model.zero_grad(set_to_none=True)
        started = time.perf_counter()
        with autocast_context(precision, cpu):
            hidden = model(ids, segments, project=False)
            loss = token_loss(hidden, model.generator, targets, -100, scored=targets.numel())
        loss.backward()
        best = min(best, time.perf_counter() - started)
    spans = sum(len(set(row.tolist())) > 1 for row in segments)
    return {"seconds": best, "tokens_per_s": rows * block / best, "peak_mb": (vm_hwm_kib() or 0) / 1024,
            "rows": rows, "block": block, "multi_document_rows": spans, "precision": precision,
            "kernels": ", ".join(model.attention_kernels())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--spec", default=str(ROOT / "experiments" / "lm-gpt2-small-ksrc.yaml"))
    parser.add_argument("--form", choices=FORMS, help="run one form in this process (the parent's child)")
    parser.add_argument("--steps", type=int, default=3, help="train steps a form a round (the best is kept)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of the two forms")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), help="default: the spec's")
    parser.add_argument("--mean-doc", type=float, default=2500.0, help="mean tokens a document")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--rows", type=int, help="blocks a micro-batch (default: the spec's)")
    parser.add_argument("--block", type=int, help="T (default: the spec's max_positions)")
    parser.add_argument("--layers", type=int)
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--heads", type=int)
    args = parser.parse_args(argv)
    if args.form is not None:
        print(json.dumps(one_form(args)))
        return 0
    passed = list(argv if argv is not None else sys.argv[1:])
    results: dict[str, list[dict[str, Any]]] = {form: [] for form in FORMS}
    for _ in range(args.rounds):
        for form in FORMS:
            out = subprocess.run([sys.executable, __file__, *passed, "--form", form], check=True,
                                 capture_output=True, text=True).stdout
            results[form].append(json.loads(out.strip().splitlines()[-1]))
    for form in FORMS:
        best = min(results[form], key=lambda r: r["seconds"])
        peak = max(r["peak_mb"] for r in results[form])
        print(f"{form:6s} {best['tokens_per_s']:10.0f} tokens/s  {best['seconds']:8.3f} s a step  "
              f"peak {peak:8.0f} MB  ({best['rows']} x {best['block']} tokens, {best['precision']}, "
              f"{best['multi_document_rows']} rows of several documents; kernels: {best['kernels']})")
    mask, fused = (min(results[f], key=lambda r: r["seconds"]) for f in FORMS)
    print(f"fused / mask: {fused['tokens_per_s'] / mask['tokens_per_s']:.2f}x tokens/s, peak "
          f"{max(r['peak_mb'] for r in results['fused']) / max(r['peak_mb'] for r in results['mask']):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
