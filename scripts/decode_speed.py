"""Batched KV-cache beam search against the tutorials' per-sentence beam, on a trained model.

    python scripts/decode_speed.py SPEC [CHECKPOINT | RUN_DIR] [--limit N] [--beam K] [--batch 128]
                                   [--threads T] [--json] [--set key=value ...]

Loads the model `ablate run SPEC` trained: CHECKPOINT (a ``best.pt`` / ``last.pt``), a run folder (its
``best.pt``, else ``last.pt``), or, given neither, the run folder `ablate run SPEC` writes
(``train.out_dir/<name>/<spec hash>-s<seed>``). Decodes the validation set (the first N sentences with
``--limit N``) with both beams at the spec's beam settings (beam size, length penalty, max_len rule;
``--beam`` overrides the size), length-sorted batches as the evaluator builds them, and prints sentences/s
of each, the speed-up and how many hypotheses are identical. E.g. after
``ablate run experiments/multi30k-de-en-local.yaml`` (from the repository root, where the run wrote its
data cache and run folder)::

    python scripts/decode_speed.py experiments/multi30k-de-en-local.yaml --limit 200

`ablate bench` measures the same on an untrained model at bench dimensions; this script gives the issue's
figure: a trained Multi30k model on its validation set.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ablate.bench.tutorial_beam import beam_search_reference
from ablate.data.prepare import prepare_data
from ablate.engine.builders import build_model
from ablate.engine.decode import beam_search, length_sorted_batches, step_budget
from ablate.engine.encoder_decoder import Seq2SeqTransformer
from ablate.engine.trainer import load_checkpoint
from ablate.run.runner import run_dir_for
from ablate.spec.experiment import DecodeSpec, ExperimentSpec
from ablate.spec.load import load_spec

Batches = list[tuple[torch.Tensor, torch.Tensor]]  # (src (B, S), max_len (B,)) per batch


def find_checkpoint(spec: ExperimentSpec, given: str | None) -> Path:
    """The checkpoint file: as given, in the given run folder, or in the run folder of `ablate run SPEC`."""
    where = Path(given) if given else run_dir_for(spec)
    if where.is_file():
        return where
    for name in ("best.pt", "last.pt"):
        if (where / name).is_file():
            return where / name
    hint = "" if given else f" (where `ablate run {spec.name}` writes; give CHECKPOINT or RUN_DIR)"
    raise SystemExit(f"error: no best.pt or last.pt in {where}{hint}")


def source_batches(sources: list[list[int]], pad_id: int, batch: int, decode: DecodeSpec) -> Batches:
    """Length-sorted, right-padded batches with each sentence's step budget, as the evaluator builds them."""
    return [(src, step_budget(src.ne(pad_id).sum(1), decode))
            for _, src in length_sorted_batches(sources, range(len(sources)), batch, pad_id)]


def timed(fn: Callable[..., list[list[int]]], model: Seq2SeqTransformer, batches: Batches,
          **kwargs: Any) -> tuple[float, list[list[int]]]:
    """(sentences/s, hypotheses in batch order) of one beam implementation over the batches."""
    hyps: list[list[int]] = []
    started = time.perf_counter()
    for src, max_len in batches:
        hyps += fn(model, src, max_len=max_len, **kwargs)
    return len(hyps) / (time.perf_counter() - started), hyps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join((__doc__ or "").splitlines()[1:]))
    ap.add_argument("spec", help="the spec the model was trained with")
    ap.add_argument("checkpoint", nargs="?",
                    help="a .pt file or a run folder (default: the run folder of `ablate run SPEC`)")
    ap.add_argument("--limit", "--sentences", type=int, default=None, metavar="N",
                    help="decode the first N validation sentences (default: all)")
    ap.add_argument("--beam", type=int, default=None, help="beam size (default: the spec's eval.decode.beam)")
    ap.add_argument("--batch", type=int, default=128, help="sentences per batch (the evaluator's 128)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of the lines")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    spec = load_spec(args.spec, args.overrides, check_hardware=False)
    path = find_checkpoint(spec, args.checkpoint)
    payload = load_checkpoint(path)
    if payload.get("spec_hash") not in (None, spec.spec_hash):
        print(f"warning: {path} was trained with spec hash {payload['spec_hash']}, {args.spec} has "
              f"{spec.spec_hash}", file=sys.stderr)
    data = prepare_data(spec)
    tok = data.tokenizers
    model = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=spec.seed)
    model.load_state_dict(payload["model"])
    model.eval()
    dec = spec.eval.decode
    beam = args.beam or dec.beam
    sources = data.splits["val"].src_ids[: args.limit]  # None: all
    batches = source_batches(sources, tok.pad_id, args.batch, dec)
    settings = {"bos_id": tok.bos_id, "eos_id": tok.eos_id, "beam": beam,
                "length_penalty": dec.length_penalty}
    timed(beam_search, model, batches[:1], **settings)  # warm-up: first-call allocations, thread pools
    fast, fast_hyps = timed(beam_search, model, batches, **settings)
    slow, slow_hyps = timed(beam_search_reference, model, batches, **settings)
    same = sum(a == b for a, b in zip(fast_hyps, slow_hyps, strict=True))
    result = {"checkpoint": str(path), "sentences": len(sources), "beam": beam,
              "length_penalty": dec.length_penalty, "threads": torch.get_num_threads(),
              "batched_sent_per_s": round(fast, 2), "reference_sent_per_s": round(slow, 2),
              "speedup": round(fast / slow, 2), "identical": same, "of": len(fast_hyps)}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{path}: beam {beam}, {len(sources)} validation sentences, {result['threads']} threads\n"
              f"  batched beam (KV cache):           {fast:10.2f} sentences/s\n"
              f"  per-sentence beam (re-decoding):   {slow:10.2f} sentences/s\n"
              f"  speed-up:                          {fast / slow:10.2f}x\n"
              f"  identical hypotheses:              {same} of {len(fast_hyps)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
