"""One contract for every registered variant of every declared axis, through the model the builder makes.

The cases come from ``registry.axes()`` and ``registry.names(kind)``, so a newly registered variant or a
new axis (built-in or plugin) is covered without touching this file. Each case builds a small model with
that one variant (the rest default) and checks what any variant must keep: shapes; no information from
future target positions; padding that changes no real position; KV-cached greedy and beam decoding equal
to re-decoding the whole prefix; finite outputs under bf16 and fp16 autocast with every mask fill;
gradients into every parameter; a state-dict round trip; and controlled initialisation (the same seed
gives the baseline's values in every parameter the variant shares with it). The decoder-only language
model (``model.arch: decoder_only``) gets the same contract over every variant that applies to it, plus
packing: documents packed into one block with segment ids equal each document alone.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import registry
from ablate.bench.tutorial_beam import beam_search_reference
from ablate.engine.builders import build_lm, build_model
from ablate.engine.decode import beam_search, greedy_decode
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.encoder_decoder import Seq2SeqTransformer
from ablate.engine.init import OWNED_BY_TYPE, stable_seed
from ablate.engine.lm_eval import generate
from ablate.spec.experiment import ModelSpec

# Small tensors: one thread is faster and makes reductions bitwise repeatable.
pytestmark = pytest.mark.usefixtures("single_thread")
registry.load_plugins()  # installed entry-point plugins are covered too (lookups would load them anyway)

V, BOS, EOS = 19, 1, 2
SMALL = {"d_model": 16, "heads": 2, "d_ff": 32, "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0,
         "max_positions": 64}
CASES = [(axis.kind, name) for axis in registry.model_axes() for name in registry.names(axis.kind)]
IDS = [f"{k}:{n}" for k, n in CASES]
SRCS = [[5, 9, 3, 12, 7], [4, 8, 15], [6, 11, 10, 13, 14, 7, 9], [3]]
TGTS = [[1, 6, 9, 14], [1, 3, 7, 7, 12, 5], [1, 8], [1, 4, 4]]


def settings(kind: str, name: str) -> dict[str, object]:
    """The model section choosing ``name`` for ``kind`` (a sub-axis: under a parent variant taking it), with
    the example value of every option the variant requires (muP's base width)."""
    required = {o.name: o.example for o in registry.REGISTRY.entry(kind, name).options if o.required}
    out: dict[str, object] = {**SMALL, kind: name, **required}
    parent = registry.axis(kind).parent
    if parent is not None:
        takers = [e.name for e in registry.REGISTRY.entries(parent) if kind in e.takes]
        out[parent] = registry.axis(parent).default if registry.axis(parent).default in takers else takers[0]
    return out


def model_for(kind: str, name: str, seed: int = 0, **extra: object) -> Seq2SeqTransformer:
    return build_model(ModelSpec(**{**settings(kind, name), **extra}), V, V, seed=seed).eval()


def pad(rows: list[list[int]], width: int | None = None) -> torch.Tensor:
    out = torch.zeros(len(rows), width or max(map(len, rows)), dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def perturbed(model: nn.Module, seed: int) -> nn.Module:
    """Every parameter moved off its initial value: gates that start at 0 (ReZero) or tables that start
    flat would otherwise hide whether gradients and state dicts reach them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model


def test_every_axis_and_variant_is_declared_and_documented() -> None:
    kinds = [a.kind for a in registry.axes()]
    builtin = {"residual", "positions", "ffn", "activation", "norm", "mask", "attention", "embeddings",
               "parametrisation", "logits", "optimizer", "schedule", "loss"}
    assert builtin <= set(kinds)
    for axis in registry.axes():
        assert axis.doc and axis.contract and axis.hooks, axis.kind
        assert axis.default in registry.names(axis.kind), axis.kind
        for entry in registry.REGISTRY.entries(axis.kind):
            assert entry.summary, f"{axis.kind}:{entry.name} needs a docstring naming its origin"
            assert all(o.doc for o in entry.options), f"{axis.kind}:{entry.name} has an undocumented option"


@pytest.mark.parametrize("kind,name", CASES, ids=IDS)
def test_shapes_causality_and_padding(kind: str, name: str) -> None:
    model = model_for(kind, name)
    src, tgt = pad(SRCS), pad(TGTS)
    with torch.no_grad():
        logits = model(src, tgt)
        assert logits.shape == (len(SRCS), tgt.size(1), V) and torch.isfinite(logits).all()
        # No leakage from future target positions: changing tokens 3.. leaves logits 0..2 alone.
        changed = tgt.clone()
        changed[:, 3:] = torch.randint(3, V, changed[:, 3:].shape, generator=torch.Generator().manual_seed(1))
        later = model(src, changed)
        torch.testing.assert_close(later[:, :3], logits[:, :3], atol=1e-5, rtol=1e-5)
        assert (later[:, 3:] - logits[:, 3:]).abs().max() > 1e-4, "later positions must see the change"
        # Padding invariance: each sentence alone, and the batch padded 3 columns wider, give the same
        # logits at every real position.
        wider = model(pad(SRCS, src.size(1) + 3), pad(TGTS, tgt.size(1) + 3))
        for i, (s, t) in enumerate(zip(SRCS, TGTS, strict=True)):
            alone = model(torch.tensor([s]), torch.tensor([t]))[0]
            torch.testing.assert_close(logits[i, : len(t)], alone, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(wider[i, : len(t)], alone, atol=1e-5, rtol=1e-5)


def greedy_without_cache(model: Seq2SeqTransformer, src: torch.Tensor, steps: int) -> list[list[int]]:
    """Argmax decoding that re-decodes the whole prefix every step: what the cache must reproduce."""
    out: list[list[int]] = []
    with torch.no_grad():
        for b in range(src.size(0)):
            one = src[b : b + 1]
            enc = model.encode(one)
            prefix = [BOS]
            for _ in range(steps):
                nxt = int(model.decode(torch.tensor([prefix]), enc)[0, -1].argmax())
                if nxt == EOS:
                    break
                prefix.append(nxt)
            out.append(prefix[1:])
    return out


@pytest.mark.parametrize("kind,name", CASES, ids=IDS)
def test_cached_decoding_equals_the_full_forward(kind: str, name: str) -> None:
    model = perturbed(model_for(kind, name), seed=11).eval()  # type: ignore[assignment]
    src = pad(SRCS)
    steps = 9
    assert greedy_decode(model, src, BOS, EOS, steps) == greedy_without_cache(model, src, steps)
    # Incremental logits: one token at a time through the cache equal the full forward's at each position.
    tgt = pad(TGTS)
    with torch.no_grad():
        enc = model.encode(src)
        full = model.decode(tgt, enc)
        cache = model.init_cache(enc)
        steps_out = [model.decode(tgt[:, t : t + 1], enc, cache, start_pos=t) for t in range(tgt.size(1))]
    torch.testing.assert_close(torch.cat(steps_out, dim=1), full, atol=1e-5, rtol=1e-5)
    batched = beam_search(model, src, BOS, EOS, 3, 0.6, 7)
    assert batched == beam_search_reference(model, src, BOS, EOS, 3, 0.6, 7)


@pytest.mark.parametrize("kind,name", CASES, ids=IDS)
def test_half_precision_with_every_mask_fill(kind: str, name: str) -> None:
    src, tgt = pad(SRCS), pad(TGTS)
    for fill in ("-inf", "-1e9"):
        if kind == "mask" and fill != name:
            continue
        extra = {} if kind == "mask" else {"mask": fill}
        model = model_for(kind, name, **extra)
        with torch.no_grad():
            reference = model(src, tgt)
            for dtype in (torch.bfloat16, torch.float16):
                with torch.autocast("cpu", dtype=dtype):
                    low = model(src, tgt)
                assert torch.isfinite(low).all(), f"{dtype} with mask {fill}"
                # agrees with fp32 to half precision, relative to the logits' scale
                assert (low.float() - reference).abs().max() <= 0.05 * reference.abs().max() + 0.05


@pytest.mark.parametrize("kind,name", CASES, ids=IDS)
def test_gradients_and_state_dict_round_trip(kind: str, name: str) -> None:
    model = perturbed(model_for(kind, name), seed=5).train()
    src, tgt = pad(SRCS), pad(TGTS)
    loss = model(src, tgt).logsumexp(-1).mean()
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, f"no gradient reaches {pname}"
    fresh = model_for(kind, name, seed=1)
    fresh.load_state_dict(model.state_dict())
    model.eval()
    with torch.no_grad():
        assert torch.equal(fresh(src, tgt), model(src, tgt))


def _params(model: nn.Module) -> dict[tuple[str, tuple[int, ...]], torch.Tensor]:
    return {(n, tuple(p.shape)): p.detach() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kind,name", CASES, ids=IDS)
def test_controlled_init_shares_values_with_the_baseline(kind: str, name: str) -> None:
    """Same seed: every parameter the variant shares (name and shape) with the default model starts at the
    baseline's values, or at those values times one constant where the variant's paper prescribes a scaled
    start (DeepNorm's beta); most of the model is shared; and the seed matters."""
    base_settings = {k: v for k, v in settings(kind, name).items() if k in SMALL}
    base = _params(build_model(ModelSpec(**base_settings), V, V, seed=3))
    variant = _params(model_for(kind, name, seed=3))
    shared = base.keys() & variant.keys()
    assert len(shared) >= 0.6 * len(base)
    for key in shared:
        moved = ~torch.isclose(variant[key], base[key], rtol=0, atol=0)
        if moved.any():  # only a scaled start: each moved value is the baseline's times one constant
            ratio = variant[key][moved] / base[key][moved]
            assert torch.allclose(ratio, ratio[0].expand_as(ratio), rtol=1e-5), key
    other = _params(model_for(kind, name, seed=4))
    differ = [k for k in variant if not torch.equal(variant[k], other[k])]
    assert len(differ) >= 0.5 * len(variant), "another seed must draw other weights"


@pytest.mark.parametrize("kind,name", CASES, ids=IDS)
def test_every_component_parameter_keeps_its_own_init(kind: str, name: str) -> None:
    """After ``build_model``, a parameter that a component creates itself (not a Linear, Conv1d or
    Embedding weight, which the builder draws) holds exactly what the component's ``reset_parameters``
    gives under that parameter's seed: the builder never overwrites a variant's own init (QK-norm's g0,
    T5's bias table, ReZero's zero gate, ScaleNorm's sqrt(d)). The values each paper prescribes are checked
    in tests/registry/test_formulas.py."""
    seed = 3
    model = model_for(kind, name, seed=seed)
    for mod_name, module in model.named_modules():
        if isinstance(module, OWNED_BY_TYPE):
            continue
        for pname, p in module.named_parameters(recurse=False):
            full = f"{mod_name}.{pname}" if mod_name else pname
            assert hasattr(module, "reset_parameters"), f"{full}: a component parameter needs its own init"
            fresh = copy.deepcopy(module)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(stable_seed(seed, full, tuple(p.shape)))
                fresh.reset_parameters()
            if getattr(module, "init_sublayer", None) is None:  # DeepNorm scales sub-layers, not itself
                assert torch.equal(p.detach(), getattr(fresh, pname).detach()), full


# ---------------------------------------------------------------- the decoder-only architecture
# The same contract for every variant that applies to a decoder-only language model
# (ablate/engine/decoder_only.py): variants that only mean something with a source side (embeddings: shared)
# are refused by the spec (tests/engine/test_lm.py) and left out here.
LM_CASES = [(k, n) for k, n in CASES
            if getattr(registry.get(k, n), "decoder_only", True)]
LM_IDS = [f"{k}:{n}" for k, n in LM_CASES]
DOCS = [[5, 9, 3, 12, 7, 4], [4, 8, 15], [6, 11, 10, 13, 14, 7, 9, 3], [3, 5]]


def lm_for(kind: str, name: str, seed: int = 0, **extra: object) -> DecoderOnlyLM:
    section = {**settings(kind, name), "arch": "decoder_only", **extra}
    section.pop("encoder_layers")
    return build_lm(ModelSpec(**section), V, seed=seed).eval()


def test_lm_cases_leave_out_only_what_has_no_meaning_without_a_source() -> None:
    assert set(CASES) - set(LM_CASES) == {("embeddings", "shared")}


@pytest.mark.parametrize("kind,name", LM_CASES, ids=LM_IDS)
def test_lm_causality_padding_and_packing(kind: str, name: str) -> None:
    model = lm_for(kind, name)
    ids = pad(DOCS)
    with torch.no_grad():
        logits = model(ids)
        assert logits.shape == (len(DOCS), ids.size(1), V) and torch.isfinite(logits).all()
        # No leakage from the future: changing tokens 3.. leaves logits 0..2 alone.
        changed = ids.clone()
        changed[:, 3:] = torch.randint(3, V, changed[:, 3:].shape, generator=torch.Generator().manual_seed(1))
        later = model(changed)
        torch.testing.assert_close(later[:, :3], logits[:, :3], atol=1e-5, rtol=1e-5)
        assert (later[:, 3:] - logits[:, 3:]).abs().max() > 1e-4, "later positions must see the change"
        # Padding: each document alone equals its (right-padded) row at every real position.
        alone = [model(torch.tensor([d]))[0] for d in DOCS]
        for i, d in enumerate(DOCS):
            torch.testing.assert_close(logits[i, : len(d)], alone[i], atol=1e-5, rtol=1e-5)
        # Packing: the documents in one block, separated by segment ids, equal each document alone.
        packed = torch.tensor([[t for d in DOCS for t in d]])
        segments = torch.tensor([[i for i, d in enumerate(DOCS) for _ in d]])
        out = model(packed, segments)[0]
        at = 0
        for i, d in enumerate(DOCS):
            torch.testing.assert_close(out[at : at + len(d)], alone[i], atol=1e-5, rtol=1e-5)
            at += len(d)


@pytest.mark.parametrize("kind,name", LM_CASES, ids=LM_IDS)
def test_lm_cached_decoding_equals_the_full_forward(kind: str, name: str) -> None:
    model = perturbed(lm_for(kind, name), seed=11).eval()  # type: ignore[assignment]
    ids = pad(DOCS)
    with torch.no_grad():
        full = model(ids)
        cache = model.init_cache()
        steps = [model(ids[:, t : t + 1], cache=cache, start_pos=t) for t in range(ids.size(1))]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
        # A prompt in one call, then one token at a time: the same logits as the whole sequence.
        cache = model.init_cache()
        head = model(ids[:, :4], cache=cache, start_pos=0)
        tail = [model(ids[:, t : t + 1], cache=cache, start_pos=t) for t in range(4, ids.size(1))]
        torch.testing.assert_close(torch.cat([head, *tail], dim=1), full, atol=1e-5, rtol=1e-5)
    # Greedy generation through the cache equals re-running the whole prefix every step.
    prompt = [BOS, 5, 9]
    expected = list(prompt)
    with torch.no_grad():
        for _ in range(8):
            expected.append(int(model(torch.tensor([expected]))[0, -1].argmax()))
    assert generate(model, prompt, 8, greedy=True) == expected[len(prompt):]


@pytest.mark.parametrize("kind,name", LM_CASES, ids=LM_IDS)
def test_lm_half_precision_with_every_mask_fill(kind: str, name: str) -> None:
    packed = torch.tensor([[t for d in DOCS for t in d]])
    segments = torch.tensor([[i for i, d in enumerate(DOCS) for _ in d]])
    for fill in ("-inf", "-1e9"):
        if kind == "mask" and fill != name:
            continue
        model = lm_for(kind, name, **({} if kind == "mask" else {"mask": fill}))
        with torch.no_grad():
            for inputs in ((pad(DOCS),), (packed, segments)):
                reference = model(*inputs)
                for dtype in (torch.bfloat16, torch.float16):
                    with torch.autocast("cpu", dtype=dtype):
                        low = model(*inputs)
                    assert torch.isfinite(low).all(), f"{dtype} with mask {fill}"
                    assert (low.float() - reference).abs().max() <= 0.05 * reference.abs().max() + 0.05


@pytest.mark.parametrize("kind,name", LM_CASES, ids=LM_IDS)
def test_lm_gradients_and_state_dict_round_trip(kind: str, name: str) -> None:
    model = perturbed(lm_for(kind, name), seed=5).train()
    packed = torch.tensor([[t for d in DOCS for t in d]])
    segments = torch.tensor([[i for i, d in enumerate(DOCS) for _ in d]])
    model(packed, segments).logsumexp(-1).mean().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, f"no gradient reaches {pname}"
    fresh = lm_for(kind, name, seed=1)
    fresh.load_state_dict(model.state_dict())
    model.eval()
    with torch.no_grad():
        assert torch.equal(fresh(packed, segments), model(packed, segments))
