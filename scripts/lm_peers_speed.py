"""Train-step speed of ablate against the best LM codebases, at the same dimensions, in one process.

    pip install -e ".[peers]"        # litgpt and x-transformers, pinned
    python scripts/lm_peers_speed.py [--repeats 5] [--steps 3] [--precisions fp32 bf16] [--compile]
        [--like-for-like]

Decoder-only (where the step was first compared): d 256, 4 heads, 4 layers, GELU MLP 4x, LayerNorm, pre-norm,
RoPE, untied head, vocabulary 8192, no dropout, batches of 16 x 128 tokens, AdamW: ablate's ``build_lm``
against litgpt's ``GPT`` (GptNeoxMLP, LayerNorm, full rotary) and x-transformers'
``TransformerWrapper(Decoder(rotary_pos_emb=True))``. Encoder-decoder (``ablate bench``'s default model: d
256, 3+3 layers, d_ff 1024, vocabulary 8000): ablate's ``build_model`` against ``torch.nn.Transformer``
(bench/train_speed.py's wrapper) and x-transformers' ``XTransformer``, on batches of 32 x 64 source and target
tokens.

Each codebase trains with its own step: ablate with the trainer's optimizer (``build_optimizer``: torch's
fused AdamW) and loss (``token_loss``: the generator and the float32 cross-entropy a chunk of rows at a
time); the peers with ``torch.optim.AdamW`` at torch's defaults (what litgpt's pretraining script and an
x-transformers loop use on a CPU) and cross-entropy on float32 logits (XTransformer its own loss). The
models take turns: one repeat times ``--steps`` steps of each model after a warm-up of its own, and the
figure is the median tokens/s of ``--repeats`` alternating repeats (warm-up and turn order shared), so a
machine that slows down mid-run slows every model alike. It prints each model's tokens/s and parameter
count, and ablate's ratio to the best peer per precision: of the two medians, and the median of the ratios
within each repeat with their range (the two ran seconds apart: the figure a shared machine's slow spells
disturb least). Run it on an otherwise idle machine.

``--like-for-like`` adds, after it, the same race with one loss and one optimizer for every codebase (ablate
included): the cross-entropy of each model's whole logits in float32 (``F.cross_entropy(logits.float())``;
x-transformers' XTransformer gives its decoder's logits, not its own loss) and ``torch.optim.AdamW(lr=1e-4,
fused=True)``. Its ratio is the models' alone; the ratio of the two ratios is what ablate's own step (the
chunked loss, its optimizer) adds on top, printed per precision as "trainer's share".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablate.bench.train_speed import TorchTransformer  # noqa: E402
from ablate.data.lm_corpus import IGNORE  # noqa: E402
from ablate.engine.builders import build_lm, build_model  # noqa: E402
from ablate.engine.token_loss import token_loss  # noqa: E402
from ablate.engine.trainer import build_optimizer  # noqa: E402
from ablate.hardware import autocast_context  # noqa: E402
from ablate.spec.experiment import ModelSpec, TrainSpec  # noqa: E402

LM_VOCAB, LM_BATCH, LM_T = 8192, 16, 128
MT_VOCAB, MT_BATCH, MT_LEN = 8000, 32, 64
TRAIN = TrainSpec.model_validate({"optimizer": {"name": "adamw", "lr": 1e-4}})
Step = Callable[[], int]  # one optimizer step; returns the tokens it trained on


def lm_models() -> dict[str, nn.Module]:
    from litgpt.config import Config  # optional peers: pip install -e ".[peers]"
    from litgpt.model import GPT
    from x_transformers import Decoder, TransformerWrapper

    spec = ModelSpec.model_validate({
        "arch": "decoder_only", "d_model": 256, "heads": 4, "decoder_layers": 4, "d_ff": 1024,
        "activation": "gelu", "norm": "builtin", "residual": "pre_norm", "positions": "rope",
        "embeddings": "separate", "dropout": 0.0, "max_positions": LM_T})
    litgpt = GPT(Config(block_size=LM_T, vocab_size=LM_VOCAB, padded_vocab_size=LM_VOCAB, n_layer=4, n_head=4,
                        n_embd=256, rotary_percentage=1.0, parallel_residual=False, bias=True,
                        norm_class_name="LayerNorm", mlp_class_name="GptNeoxMLP", intermediate_size=1024))
    xt = TransformerWrapper(num_tokens=LM_VOCAB, max_seq_len=LM_T, use_abs_pos_emb=False,
                            attn_layers=Decoder(dim=256, depth=4, heads=4, rotary_pos_emb=True, ff_mult=4,
                                                attn_flash=True))
    return {"ablate": build_lm(spec, LM_VOCAB, seed=0), "litgpt": litgpt, "x-transformers": xt}


def mt_models() -> dict[str, nn.Module]:
    from x_transformers import XTransformer  # optional peer

    spec = ModelSpec.model_validate({"d_model": 256, "heads": 4, "encoder_layers": 3, "decoder_layers": 3,
                                     "d_ff": 1024, "dropout": 0.0, "max_positions": 128})
    xt = XTransformer(dim=256, enc_num_tokens=MT_VOCAB, enc_depth=3, enc_heads=4, enc_max_seq_len=MT_LEN,
                      dec_num_tokens=MT_VOCAB, dec_depth=3, dec_heads=4, dec_max_seq_len=MT_LEN + 1,
                      enc_attn_flash=True, dec_attn_flash=True)
    return {"ablate": build_model(spec, MT_VOCAB, MT_VOCAB, seed=0),
            "torch.nn.Transformer": TorchTransformer(spec, MT_VOCAB, MT_VOCAB), "x-transformers": xt}


def optimizer_of(name: str, model: nn.Module, common: bool) -> torch.optim.Optimizer:
    """Each codebase's own optimizer (ablate's: the trainer's build_optimizer), or the one for all."""
    if common:
        return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    if name == "ablate":
        return build_optimizer(model, TRAIN)
    return torch.optim.AdamW(model.parameters(), lr=1e-4)


def whole_logits_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The common loss: cross-entropy of the whole (B, T, V) logits in float32."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def lm_step(name: str, model: nn.Module, precision: str, common: bool = False) -> Step:
    g = torch.Generator().manual_seed(0)
    ids, targets = (torch.randint(4, LM_VOCAB, (LM_BATCH, LM_T), generator=g) for _ in range(2))
    optimizer = optimizer_of(name, model, common)

    def step() -> int:
        optimizer.zero_grad(set_to_none=True)
        with autocast_context(precision, torch.device("cpu")):
            if name == "ablate" and not common:  # the trainer's loss: the generator with the loss, chunked
                loss = token_loss(model(ids, project=False), model.generator, targets, IGNORE)
            else:
                logits = model(ids)  # (B, T, V)
        if name != "ablate" or common:
            loss = whole_logits_loss(logits, targets)
        loss.backward()
        optimizer.step()
        return ids.numel()

    return step


def mt_step(name: str, model: nn.Module, precision: str, common: bool = False) -> Step:
    g = torch.Generator().manual_seed(0)
    src, tgt_in, tgt_out = (torch.randint(4, MT_VOCAB, (MT_BATCH, MT_LEN), generator=g) for _ in range(3))
    optimizer = optimizer_of(name, model, common)

    def step() -> int:
        optimizer.zero_grad(set_to_none=True)
        with autocast_context(precision, torch.device("cpu")):
            if name == "x-transformers" and common:  # its decoder's logits, under the common loss
                memory = model.encoder(src, return_embeddings=True)  # (B, S, d)
                loss = whole_logits_loss(model.decoder.net(tgt_in, context=memory), tgt_out)
            elif name == "x-transformers":  # XTransformer computes its own loss on tgt (it shifts it itself)
                loss = model(src, torch.cat([tgt_in[:, :1], tgt_out], dim=1))
            elif name == "ablate" and not common:  # the trainer's loss (no target is ignored here)
                loss = token_loss(model(src, tgt_in, project=False), model.generator, tgt_out, IGNORE)
            else:
                logits = model(src, tgt_in)  # (B, T, V)
        if name == "torch.nn.Transformer" or (name == "ablate" and common):
            loss = whole_logits_loss(logits, tgt_out)
        loss.backward()
        optimizer.step()
        return tgt_out.numel()

    return step


def race(steps: dict[str, Step], repeats: int, per_repeat: int, warmup: int) -> dict[str, list[float]]:
    """Tokens/s of each step in each of ``repeats`` rounds in which the models take turns (the report takes
    their medians, and the ratios within each round)."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    rates: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            started, tokens = time.perf_counter(), 0
            for _ in range(per_repeat):
                tokens += step()
            rates[name].append(tokens / (time.perf_counter() - started))
    return rates


def per_repeat_ratios(rates: dict[str, list[float]], own: str, peer: str) -> list[float]:
    """``own``'s tokens/s over ``peer``'s within each repeat: the two ran seconds apart, so a slow spell of
    a shared machine (its speed moves by up to a third between spells) falls on both, where the ratio of
    two medians can take them from different spells."""
    return [a / b for a, b in zip(rates[own], rates[peer], strict=True)]


def report(title: str, models: dict[str, nn.Module], make: Callable[[str, nn.Module, str, bool], Step],
           args: argparse.Namespace, common: bool = False) -> dict[tuple[str, str], float]:
    """Race the models at each precision; print tokens/s and ablate's ratios to the best peer, and return
    them by (precision, ablate's entry)."""
    params = {n: sum(p.numel() for p in m.parameters()) for n, m in models.items()}
    how = "like for like (one loss, one optimizer)" if common else "each codebase's own step"
    print(f"\n{title}, {how}: " + ", ".join(f"{n} {p / 1e6:.2f}M params" for n, p in params.items()))
    ratios = {}
    for precision in args.precisions:
        chosen = dict(models)
        if args.compile:
            chosen["ablate compiled"] = torch.compile(models["ablate"])
        steps = {name: make("ablate" if name.startswith("ablate") else name, m, precision, common)
                 for name, m in chosen.items()}
        repeats = race(steps, args.repeats, args.steps, args.warmup)
        rates = {name: statistics.median(r) for name, r in repeats.items()}
        best = max((n for n in rates if not n.startswith("ablate")), key=lambda n: rates[n])
        cells = "  ".join(f"{n} {r:,.0f}" for n, r in rates.items())
        print(f"  {precision}: tokens/s  {cells}")
        for own in (n for n in rates if n.startswith("ablate")):
            ratios[precision, own] = rates[own] / rates[best]
            paired = per_repeat_ratios(repeats, own, best)
            print(f"  {precision}: {own} / best peer ({best}) = {ratios[precision, own]:.2f}x; within each "
                  f"repeat {statistics.median(paired):.2f}x (median; {min(paired):.2f}-{max(paired):.2f}x)")
    return ratios


def compare(title: str, models: Callable[[], dict[str, nn.Module]],
            make: Callable[[str, nn.Module, str, bool], Step], args: argparse.Namespace) -> None:
    """Each codebase's own step; with --like-for-like, the common step beside it and what the trainer adds."""
    own = report(title, models(), make, args)
    if not args.like_for_like:
        return
    same = report(title, models(), make, args, common=True)  # fresh models: no optimizer state carried over
    for key, ratio in own.items():
        if key in same:
            print(f"  {key[0]}: {key[1]}: the model {same[key]:.2f}x, with ablate's own loss and optimizer "
                  f"{ratio:.2f}x: trainer's share {ratio / same[key]:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps of each model per repeat")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=("fp32", "bf16"))
    parser.add_argument("--compile", action="store_true", help="add ablate under torch.compile")
    parser.add_argument("--only", choices=("lm", "mt"))
    parser.add_argument("--like-for-like", action="store_true",
                        help="also race every codebase with one loss and one optimizer (the models alone)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of {args.repeats} "
          f"alternating repeats of {args.steps} steps")
    if args.only != "mt":
        compare("decoder-only", lm_models, lm_step, args)
    if args.only != "lm":
        compare("encoder-decoder", mt_models, mt_step, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
