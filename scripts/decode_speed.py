"""Batched KV-cache beam search against the tutorials' per-sentence beam, on a trained model.

    python scripts/decode_speed.py SPEC CHECKPOINT [--sentences N] [--beam 4] [--batch 128] [--set k=v ...]

Decodes the first N validation sentences of SPEC's data with both beams (same beam size, length
penalty and step budget), prints sentences/s of each, the speed-up, and whether every hypothesis is
identical. `ablate bench` measures the same on an untrained model at bench dimensions; this script is
for the issue's figure: a trained Multi30k model on its validation set.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from ablate.data import prepare_data
from ablate.decode import beam_search, beam_search_reference
from ablate.model import build_model
from ablate.specload import load_spec
from ablate.train import load_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("checkpoint")
    ap.add_argument("--sentences", type=int, default=None, help="default: the whole validation set")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--batch", type=int, default=128)  # as the evaluator
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    spec = load_spec(args.spec, args.overrides)
    data = prepare_data(spec)
    tok = data.tokenizers
    model = build_model(spec.model, tok.src_vocab_size, tok.tgt_vocab_size, pad_id=tok.pad_id, seed=spec.seed)
    model.load_state_dict(load_checkpoint(args.checkpoint)["model"])
    model.eval()
    dec = spec.eval.decode
    sources = data.splits["val"].src_ids[: args.sentences]  # None: all
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    batches = []
    for start in range(0, len(order), args.batch):
        rows = [sources[i] for i in order[start:start + args.batch]]
        src = torch.full((len(rows), max(map(len, rows))), tok.pad_id, dtype=torch.long)
        for r, ids in enumerate(rows):
            src[r, : len(ids)] = torch.tensor(ids)
        lens = torch.tensor([len(ids) for ids in rows])
        batches.append((src, (dec.max_len_a * lens).long() + dec.max_len_b))

    def run(fn):  # type: ignore[no-untyped-def]
        hyps: list[list[int]] = []
        started = time.perf_counter()
        with torch.no_grad():
            for src, max_len in batches:
                hyps += fn(model, src, tok.bos_id, tok.eos_id, beam=args.beam,
                           length_penalty=dec.length_penalty, max_len=max_len)
        return len(hyps) / (time.perf_counter() - started), hyps

    run_fast = run(beam_search)  # warm-up and result
    fast, fast_hyps = run(beam_search)
    slow, slow_hyps = run(beam_search_reference)
    same = sum(a == b for a, b in zip(fast_hyps, slow_hyps, strict=True))
    print(json.dumps({"sentences": len(sources), "beam": args.beam, "threads": torch.get_num_threads(),
                      "batched_sent_per_s": round(fast, 2), "reference_sent_per_s": round(slow, 2),
                      "speedup": round(fast / slow, 2), "identical": same, "of": len(fast_hyps),
                      "warmup_sent_per_s": round(run_fast[0], 2)}, indent=1))


if __name__ == "__main__":
    main()
