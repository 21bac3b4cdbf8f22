"""Document-masked causal attention on fused kernels: a packed block's documents reach
the attention cores as :class:`registry.masking.Documents` instead of a (B, 1, T, T) mask, and every core
that takes them computes what the reference mask computes, forward and gradients.

The reference is the same model with the documents as the (B, 1, T, T) mask
(``decoder_only.VARLEN_MIN_LENGTH`` above any block: every forward takes the mask). On a CPU the fused form
is one sdpa call a document (``varlen``), held to the reference with gradients for every registered
attention core and position scheme, grouped keys and values, and a sliding window. FlexAttention (the GPU's
form) has no CPU backward in torch 2.13, so its forward is held to the reference on a CPU, compiled
(slow tier); its gradients need a GPU and are not checked here.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import registry
from ablate.engine import decoder_only
from ablate.engine.builders import build_lm
from ablate.spec.experiment import ModelSpec
from registry.attention import SDPAttention
from registry.masking import Documents

# float32 sums in another order (one document at a time, flash's blocks): relative to the largest magnitude
RTOL = 1e-5
B, T, VOCAB = 3, 96, 40


def segments() -> torch.Tensor:
    """Row 0: two documents; row 1: one; row 2: three (one of them 4 tokens), as packing cuts them."""
    seg = torch.zeros(B, T, dtype=torch.long)
    seg[0, 61:] = 1
    seg[2, 30:] = 1
    seg[2, 34:] = 2
    return seg


def lm(**fields: Any) -> decoder_only.DecoderOnlyLM:
    spec = dict(arch="decoder_only", d_model=32, heads=4, decoder_layers=2, d_ff=64, dropout=0.0,
                max_positions=T)
    spec.update(fields)
    return build_lm(ModelSpec(**spec), VOCAB, seed=3)


def forward_backward(model: decoder_only.DecoderOnlyLM, ids: torch.Tensor, seg: torch.Tensor,
                     grads: bool = True) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(grads):
        hidden = model(ids, seg, project=False)  # (B, T, d)
        if grads:
            (hidden * torch.linspace(-1, 1, hidden.size(-1))).pow(2).mean().backward()
    return hidden.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return float((got - want).abs().max()) <= RTOL * max(float(want.abs().max()), 1e-6)


def both_forms(model: decoder_only.DecoderOnlyLM, monkeypatch: pytest.MonkeyPatch,
               grads: bool = True) -> dict[str, tuple[torch.Tensor, list[torch.Tensor]]]:
    ids = torch.randint(4, VOCAB, (B, T), generator=torch.Generator().manual_seed(0))
    out = {}
    for form, threshold in (("fused", 1), ("reference", 10 ** 9)):
        monkeypatch.setattr(decoder_only, "VARLEN_MIN_LENGTH", threshold)
        out[form] = forward_backward(model, ids, segments(), grads)
    return out


VARIANTS = [{"attention": a, "positions": p} for a in registry.REGISTRY.names("attention")
            for p in registry.REGISTRY.names("positions")]


@pytest.mark.parametrize("fields", VARIANTS + [{"kv_heads": 2}, {"kv_heads": 1, "positions": "alibi"},
                                               {"window": 16}, {"window": 16, "positions": "t5_bias"}],
                         ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
def test_every_core_takes_documents_fused_on_a_cpu_or_says_it_cannot_and_agrees_with_the_mask(
        fields: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    model = lm(**fields)
    core = model.attention_modules()["decoder_self"][0]
    kernel = core.document_kernel(torch.device("cpu"))
    forms = both_forms(model, monkeypatch)
    (fused, fused_grads), (ref, ref_grads) = forms["fused"], forms["reference"]
    assert close(fused, ref)
    assert len(fused_grads) == len(ref_grads) >= len(list(model.parameters())) - 2  # not the generator
    for got, want in zip(fused_grads, ref_grads, strict=True):
        assert close(got, want)
    ran = model.attention_kernels()
    if fields.get("attention") in ("explicit", "softcap"):
        # the reference itself (explicit), and the capped scores sdpa cannot take (softcap: flex only)
        assert kernel is None and not any(k.startswith("varlen") for k in ran)
    else:
        assert kernel == "varlen" and any(k.startswith("varlen-") for k in ran), ran


def test_documents_spans_are_each_rows_documents_and_the_reference_mask_is_the_rule() -> None:
    docs = Documents.with_spans(segments(), window=None)
    assert docs.spans == (((0, 61), (61, T)), ((0, T),), ((0, 30), (30, 34), (34, T)))
    assert docs.mean_length() == pytest.approx(B * T / 6)
    blocked = Documents(segments(), window=8).blocked()[:, 0]  # (B, T, T)
    q, k = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    seg = segments()
    for b in range(B):
        visible = (seg[b][q] == seg[b][k]) & (k <= q) & (q - k < 8)
        assert torch.equal(~blocked[b], visible)


def test_short_documents_keep_the_mask_and_no_block_mask_is_built_on_a_cpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decoder_only, "VARLEN_MIN_LENGTH", 32)
    model = lm()
    seg = torch.arange(T).div(4, rounding_mode="floor").expand(B, T).contiguous()  # 4-token documents
    mask = model._mask(T, 0, seg, torch.float32, model._hooks(0, T, T, seg.device), seg.device)
    assert mask is not None and mask.documents is None and mask.bias is not None  # a mean of 4 < 32
    # segments(): a mean of 48 tokens a document
    mask = model._mask(T, 0, segments(), torch.float32, model._hooks(0, T, T, seg.device), seg.device)
    assert mask is not None and mask.bias is None and mask.blocked is None
    docs = mask.documents
    assert docs is not None and docs.spans is not None and docs.block_mask is None


def test_the_recorded_kernel_is_the_backend_sdpa_takes_not_a_word_for_all_of_them() -> None:
    """``ablate.attention_kernel`` said "fused" where sdpa took its math path: it now names
    torch's own choice, so dropout on a CPU (which the flash kernel does not take) records math."""
    core = SDPAttention(32, 4, dropout=0.0)
    x = torch.randn(2, 80, 32)
    causal = torch.ones(80, 80, dtype=torch.bool).triu(1)
    from registry.masking import NegInfFill

    core(x, mask=NegInfFill().build(causal, torch.float32, is_causal=True))
    assert core.kernels == {"sdpa-flash"}
    dropped = SDPAttention(32, 4, dropout=0.1).train()
    dropped(x, mask=NegInfFill().build(causal, torch.float32, is_causal=True))
    assert dropped.kernels == {"sdpa-math"}


@pytest.mark.soak  # inductor compiles a flex kernel per variant: 368 s for the 4 on 2 loaded cores
@pytest.mark.parametrize("fields", [{}, {"positions": "alibi", "kv_heads": 2},
                                    {"attention": "softcap", "window": 16}, {"positions": "t5_bias"}],
                         ids=["causal", "alibi-gqa", "softcap-window", "t5"])
def test_flex_attentions_forward_is_the_masks_on_a_cpu_without_gradients(
        fields: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.engine.test_compile import compiler_problem

    if compiler_problem() is not None:
        pytest.skip(str(compiler_problem()))
    monkeypatch.setattr(SDPAttention, "cpu_document_kernel", "flex")
    model = lm(**fields).eval()
    forms = both_forms(model, monkeypatch, grads=False)
    assert "flex" in model.attention_kernels()
    assert close(forms["fused"][0], forms["reference"][0])


def test_grouped_keys_and_values_leave_a_math_path_for_a_fused_one_repeated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where torch would take its math path for grouped K/V under a mask (a GPU's memory-efficient kernel
    takes no GQA) and a fused one for K/V repeated to every head, the core repeats them: the same function
    on a fused kernel. Torch's choice is played here (a CPU's flash kernel takes GQA itself)."""
    from registry import attention_kernels

    def choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None, p: float,
               is_causal: bool, scale: float | None, gqa: bool) -> str:
        return "math" if gqa and attn_mask is not None else "efficient"

    seen: list[int] = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        seen.append(k.size(1))
        return real(q, k, v, **kwargs)

    core = SDPAttention(32, 4, kv_heads=2).eval()
    x = torch.randn(2, 80, 32)
    pad = torch.zeros(2, 80, dtype=torch.bool)
    pad[1, 60:] = True
    from registry.masking import NegInfFill

    mask = NegInfFill().build(pad[:, None, None, :], torch.float32)
    want = core(x, mask=mask)  # torch's own choice here: flash, grouped
    assert core.kernels == {"sdpa-flash"}
    monkeypatch.setattr(attention_kernels, "sdpa_backend", choice)
    monkeypatch.setattr(attention_kernels.F, "scaled_dot_product_attention", spy)
    core.kernels.clear()
    got = core(x, mask=mask)
    assert seen == [4] and core.kernels == {"sdpa-efficient"}  # K/V repeated to the 4 query heads
    assert close(got, want)
    seen.clear()
    core(x)  # no mask: grouped, as torch takes it
    assert seen == [2]
