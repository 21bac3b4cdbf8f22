"""ablate/engine/cpu_gemm.py: float32 Linear products through oneDNN compute F.linear's function, forward and
backward, within float32 rounding; they are taken where the rule says and nowhere else; a routed model keeps
its parameters and state dict; a whole model's logits, loss, gradients and one optimizer step agree with
MKL's within the stated tolerance; an unknown library named in the environment is one line, exit 2, with
nothing written."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from ablate import hardware
from ablate.cli import main
from ablate.engine import cpu_gemm
from ablate.engine.builders import build_lm, build_model
from ablate.engine.token_loss import token_loss
from ablate.engine.trainer import build_optimizer
from ablate.errors import AblateError
from ablate.spec.experiment import ModelSpec, TrainSpec

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")

# oneDNN and MKL sum a product's K terms in different orders: each element agrees to float32 rounding of
# the sum, which these bound relative to the product's largest magnitude.
PRODUCT_RTOL = 2e-6
# A whole model (several products in a row, then the loss): logits and every gradient, relative to their
# largest magnitude.
MODEL_RTOL = 1e-5


Choose = Callable[[str], None]


@pytest.fixture
def library(monkeypatch: pytest.MonkeyPatch) -> Iterator[Choose]:
    """Set ABLATE_CPU_GEMM for one test: ``library("onednn")``; the rule's cache is cleared around it. Layers
    of any width are admitted (``cpu_gemm.MIN_WIDTH`` 1), so the small layers below reach oneDNN; the width
    rule has its own test."""

    def choose(name: str) -> None:
        monkeypatch.setenv(hardware.CPU_GEMM_ENV, name)
        monkeypatch.setattr(cpu_gemm, "MIN_WIDTH", 1)
        hardware.cpu_gemm_library.cache_clear()

    hardware.cpu_gemm_library.cache_clear()
    yield choose
    monkeypatch.delenv(hardware.CPU_GEMM_ENV, raising=False)
    hardware.cpu_gemm_library.cache_clear()


@pytest.fixture
def onednn_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The shapes of the products oneDNN computed during a test."""
    calls: list[tuple[int, ...]] = []
    real = cpu_gemm.onednn_gemm_nt

    def counted(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        calls.append((*a.shape, b.size(0)))
        return real(a, b, bias)

    monkeypatch.setattr(cpu_gemm, "onednn_gemm_nt", counted)
    return calls


def close(got: torch.Tensor, want: torch.Tensor, rtol: float) -> bool:
    return float((got.double() - want.double()).abs().max()) <= rtol * float(want.abs().max())


@pytest.mark.parametrize("m,k,n", [(256, 64, 96), (100, 96, 64), (64, 32, 500), (1500, 48, 40)])
def test_the_product_and_the_weight_gradient_are_float64s_within_rounding_on_strided_views(
        m: int, k: int, n: int, library: Choose) -> None:
    library("onednn")
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    bias = torch.randn(n, generator=g)
    assert close(cpu_gemm.gemm_nt(a, b, bias), a.double() @ b.double().t() + bias.double(), PRODUCT_RTOL)
    # strided operands as the backward passes them: b.t() is a (K, N) view, a.t() an (M... ) view
    assert close(cpu_gemm.gemm_nt(a, b.t().contiguous().t()), a.double() @ b.double().t(), PRODUCT_RTOL)
    grad, inputs = torch.randn(m, n, generator=g), torch.randn(m, k, generator=g)
    want = grad.double().t() @ inputs.double()  # (N, K)
    got = cpu_gemm.weight_grad(grad, inputs)
    assert got.shape == (n, k) and close(got, want, PRODUCT_RTOL)


def test_a_routed_linear_is_f_linear_forward_and_backward_within_rounding(
        library: Choose, onednn_calls: list[tuple[int, ...]]) -> None:
    library("onednn")
    torch.manual_seed(0)
    plain = nn.Linear(48, 80)
    routed = cpu_gemm.route_linears(nn.Sequential(nn.Linear(48, 80)))[0]
    routed.load_state_dict(plain.state_dict())
    x = torch.randn(3, 37, 48)  # (B, T, K): 111 rows, computed at 128 (cpu_gemm.grid_rows)
    upstream = torch.randn(3, 37, 80)
    outs, grads = [], []
    for layer in (plain, routed):
        xi = x.clone().requires_grad_()
        out = layer(xi)
        out.backward(upstream)
        outs.append(out.detach())
        grads.append([xi.grad, layer.weight.grad, layer.bias.grad])
    assert outs[1].shape == outs[0].shape and close(outs[1], outs[0], PRODUCT_RTOL)
    for got, want in zip(grads[1], grads[0], strict=True):
        assert got.shape == want.shape and close(got, want, PRODUCT_RTOL)
    # the forward, the input's and the weight's gradient: three products, all oneDNN's, on the grid's 128 rows
    assert onednn_calls == [(128, 48, 80), (128, 80, 48), (48, 128, 80)]


@pytest.mark.parametrize("upstream", ["expanded", "transposed", "strided input"])
def test_a_gradient_or_input_of_any_strides_reaches_onednn_laid_out_once_and_right(
        upstream: str, library: Choose, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cliff that was: ``y.sum().backward()`` hands a Linear an output gradient of one value expanded
    to (rows, N), zero strides, which oneDNN read element by element (7.5 s against 13.5 ms). Every operand
    oneDNN receives is now rows or columns (copied once where it was not), and the gradients are F.linear's.
    No timing: the path is asserted."""
    library("onednn")
    met: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    real = cpu_gemm.onednn_gemm_nt

    def checked(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        met.extend([(tuple(a.shape), a.stride()), (tuple(b.shape), b.stride())])
        assert cpu_gemm.laid_out(a) and cpu_gemm.laid_out(b), (a.stride(), b.stride())
        return real(a, b, bias)

    monkeypatch.setattr(cpu_gemm, "onednn_gemm_nt", checked)
    torch.manual_seed(0)
    plain = nn.Linear(48, 96)
    routed = cpu_gemm.route_linears(nn.Sequential(nn.Linear(48, 96)))[0]
    routed.load_state_dict(plain.state_dict())
    base = torch.randn(2, 48, 128)  # the strided input: (2, 128, 48) as a transposed view of it
    x = base.transpose(1, 2) if upstream == "strided input" else torch.randn(2, 128, 48)
    grads = []
    for layer in (plain, routed):
        xi = x.detach().clone() if upstream != "strided input" else x.detach().clone().transpose(1, 2) \
            .contiguous().transpose(1, 2)
        xi.requires_grad_()
        y = layer(xi)  # (2, 128, 96): 256 rows, on the grid
        if upstream == "expanded":
            y.sum().backward()  # the gradient: ones, one value expanded (zero strides)
        else:
            (y.transpose(1, 2) * torch.arange(128.0)).sum().backward()  # a transposed gradient
        grads.append([xi.grad, layer.weight.grad, layer.bias.grad])
    assert met  # oneDNN took the products
    for got, want in zip(grads[1], grads[0], strict=True):
        assert got is not None and want is not None and close(got, want, PRODUCT_RTOL)


def test_laid_out_names_rows_and_columns_and_refuses_zero_or_doubly_strided_matrices() -> None:
    m = torch.randn(64, 32)
    assert cpu_gemm.laid_out(m) and cpu_gemm.laid_out(m.t()) and cpu_gemm.laid_out(m[:, :16])
    assert not cpu_gemm.laid_out(torch.ones(()).expand(64, 32))
    assert not cpu_gemm.laid_out(m[::2, ::2]) and not cpu_gemm.laid_out(torch.randn(32).expand(64, 32))
    assert cpu_gemm.dense(m) is m and cpu_gemm.dense(m[::2, ::2]).is_contiguous()


def test_products_take_onednn_only_for_float32_cpu_rows_enough_outside_autocast(
        library: Choose, onednn_calls: list[tuple[int, ...]]) -> None:
    layer = cpu_gemm.route_linears(nn.Sequential(nn.Linear(16, 16)))[0]
    many, few = torch.randn(cpu_gemm.MIN_ROWS, 16), torch.randn(cpu_gemm.MIN_ROWS - 1, 16)
    library("mkl")
    layer(many)
    assert onednn_calls == []
    library("onednn")
    layer(few)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(many).dtype == torch.bfloat16
    layer.to(torch.float64)(many.double())
    assert onednn_calls == []
    layer.float()(many)
    assert onednn_calls == [(cpu_gemm.MIN_ROWS, 16, 16)]


def test_only_layers_at_least_min_width_wide_both_ways_take_onednn(
        library: Choose, onednn_calls: list[tuple[int, ...]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The quickstart's narrow layers (64 wide, a 24-type generator) stay with MKL, whose product is cheaper
    there than oneDNN's padding and autograd Function; a layer 128 wide both ways takes all three of its
    products through oneDNN, the loss's generator likewise."""
    library("onednn")
    monkeypatch.setattr(cpu_gemm, "MIN_WIDTH", 128)
    rows = torch.randn(cpu_gemm.MIN_ROWS, 128)
    for k, n in ((64, 64), (128, 64), (64, 128), (128, 24)):
        layer = cpu_gemm.route_linears(nn.Sequential(nn.Linear(k, n)))[0]
        layer(rows[:, :k].clone().requires_grad_()).sum().backward()
        assert not cpu_gemm.takes_onednn(rows[:, :k], layer.weight)
    assert onednn_calls == []
    wide = cpu_gemm.route_linears(nn.Sequential(nn.Linear(128, 256)))[0]
    wide(rows.clone().requires_grad_()).sum().backward()
    assert onednn_calls == [(64, 128, 256), (64, 256, 128), (128, 64, 256)]
    onednn_calls.clear()
    hidden, targets = rows.view(1, cpu_gemm.MIN_ROWS, 128), torch.randint(0, 24, (1, cpu_gemm.MIN_ROWS))
    token_loss(hidden.clone().requires_grad_(), nn.Linear(128, 24), targets, ignore_index=-100).backward()
    assert onednn_calls == []  # a 24-type generator: narrow
    token_loss(hidden.clone().requires_grad_(), nn.Linear(128, 512), targets, ignore_index=-100).backward()
    assert onednn_calls  # 512 types, 128 wide: oneDNN's


def test_the_row_grid_holds_8_sizes_an_octave_wastes_at_most_an_eighth_and_is_its_own_grid() -> None:
    grid_rows, grid_floor = cpu_gemm.grid_rows, cpu_gemm.grid_floor
    for rows in range(cpu_gemm.MIN_ROWS, 9000):
        grid = grid_rows(rows)
        assert rows <= grid <= max(rows * 9 / 8, rows + cpu_gemm.ROW_STEP) and grid_rows(grid) == grid
        floor = grid_floor(rows)
        assert floor <= rows and grid_rows(floor) == floor and grid_rows(floor + 1) > floor
    for octave in range(8, 13):  # 256-511 rows, ..., 4096-8191: 8 sizes, then the next octave's first
        low, high = 2**octave, 2 ** (octave + 1)
        assert {grid_rows(r) for r in range(low, high)} == set(range(low, high + 1, low // 8))


def test_length_bucketed_batches_meet_only_the_grids_row_counts(
        library: Choose, onednn_calls: list[tuple[int, ...]]) -> None:
    """oneDNN keeps a primitive for every shape it meets (about 0.6 MB each): 300 batches of 1,024-2,047
    rows reach it at the grid's row counts of that octave (and its end, 2,048), not at 300."""
    library("onednn")
    layer = cpu_gemm.route_linears(nn.Sequential(nn.Linear(16, 24)))[0]
    g = torch.Generator().manual_seed(3)
    for rows in torch.randint(1024, 2048, (300,), generator=g).tolist():
        layer(torch.randn(rows, 16)).sum().backward()
    seen = {shape[0] for shape in onednn_calls if shape[1:] == (16, 24)}
    assert set(range(1152, 2049, 128)) <= seen <= set(range(1024, 2049, 128))


def test_route_linears_changes_only_plain_linears_forward_class() -> None:
    class OwnLinear(nn.Linear):
        pass

    model = nn.Sequential(nn.Linear(4, 5), OwnLinear(5, 6), nn.LayerNorm(6))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cpu_gemm.route_linears(model)
    assert type(model[0]) is cpu_gemm.Linear and isinstance(model[0], nn.Linear)
    assert type(model[1]) is OwnLinear and type(model[2]) is nn.LayerNorm
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], v) for k, v in before.items())


def test_the_library_rule_reads_the_cpu_and_the_override(library: Choose,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    amd = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse avx2 avx512f avx512bw\n"
    intel = "vendor_id\t: GenuineIntel\nflags\t\t: fpu sse avx2 avx512f avx512bw\n"
    amd_avx2 = "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse avx2\n"
    for text, want in ((amd, "onednn"), (intel, "mkl"), (amd_avx2, "mkl"), ("", "mkl")):
        monkeypatch.setattr(hardware, "_cpuinfo", lambda text=text: text)
        hardware.cpu_gemm_library.cache_clear()
        assert hardware.cpu_gemm_library() == want, text
    library("MKL")
    monkeypatch.setattr(hardware, "_cpuinfo", lambda: amd)
    assert hardware.cpu_gemm_library() == "mkl"
    library("blis")
    with pytest.raises(AblateError, match="ABLATE_CPU_GEMM: found 'blis'; accepted: onednn, mkl"):
        hardware.cpu_gemm_library()


QUICKSTART = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"


@pytest.mark.parametrize("command", ["run", "validate"])
def test_an_unknown_library_is_one_line_before_anything_is_written(
        command: str, bare_workdir: Path, library: Choose, capsys: pytest.CaptureFixture[str]) -> None:
    library("blis")
    assert main([command, str(QUICKSTART)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: environment: ABLATE_CPU_GEMM: found 'blis'; accepted: onednn, mkl"]
    assert list(bare_workdir.iterdir()) == []


BENCH_LM = {"arch": "decoder_only", "d_model": 64, "heads": 4, "decoder_layers": 2, "d_ff": 256,
            "activation": "gelu", "positions": "rope", "embeddings": "separate", "dropout": 0.0,
            "max_positions": 32}
SEQ2SEQ = {"d_model": 64, "heads": 4, "encoder_layers": 2, "decoder_layers": 2, "d_ff": 128, "dropout": 0.0,
           "max_positions": 64}


LR = 3e-3


def one_step(arch: str, ids: torch.Tensor, targets: torch.Tensor) -> dict[str, list[torch.Tensor]]:
    """The logits and the trainer's loss of a model built at seed 0, every gradient of one backward, and every
    weight after one step of the trainer's AdamW."""
    model: nn.Module
    if arch == "decoder_only":
        model = build_lm(ModelSpec.model_validate(BENCH_LM), 500, seed=0)
        hidden = model(ids, project=False)
    else:
        model = build_model(ModelSpec.model_validate(SEQ2SEQ), 500, 500, seed=0)
        hidden = model(ids, targets, project=False)
    loss = token_loss(hidden, model.generator, targets, -100)
    loss.backward()
    logits = model.generator(hidden).detach()
    params = [p for _, p in sorted(model.named_parameters()) if p.grad is not None]
    grads = [p.grad.clone() for p in params]
    build_optimizer(model, TrainSpec.model_validate({"optimizer": {"name": "adamw", "lr": LR}})).step()
    return {"out": [logits, loss.detach()], "grads": grads, "weights": [p.detach() for p in params]}


@pytest.mark.parametrize("arch", ["decoder_only", "encoder_decoder"])
def test_a_models_logits_loss_gradients_and_step_through_onednn_are_mkls_within_the_stated_tolerance(
        arch: str, library: Choose, onednn_calls: list[tuple[int, ...]]) -> None:
    g = torch.Generator().manual_seed(1)
    # 120 rows a product, computed at the grid's 128
    ids, targets = torch.randint(4, 500, (4, 30), generator=g), torch.randint(4, 500, (4, 30), generator=g)
    runs = {}
    for name in ("mkl", "onednn"):
        library(name)
        onednn_calls.clear()
        runs[name] = one_step(arch, ids, targets)
        assert bool(onednn_calls) == (name == "onednn")
    mkl, onednn = runs["mkl"], runs["onednn"]
    (mkl_logits, mkl_loss), (logits, loss) = mkl["out"], onednn["out"]
    assert close(logits, mkl_logits, MODEL_RTOL)
    assert float(loss) == pytest.approx(float(mkl_loss), rel=MODEL_RTOL)
    assert len(onednn["grads"]) == len(mkl["grads"]) > 10
    for grad, mkl_grad in zip(onednn["grads"], mkl["grads"], strict=True):
        assert close(grad, mkl_grad, MODEL_RTOL)
    # Adam's first step is about lr * sign(g): where the gradient stands clear of the stated disagreement the
    # two steps agree to float32 rounding; nearer zero a sign may differ, as any rounding may flip it
    for weight, mkl_weight, mkl_grad in zip(onednn["weights"], mkl["weights"], mkl["grads"], strict=True):
        clear = mkl_grad.abs() > 10 * MODEL_RTOL * float(mkl_grad.abs().max())
        assert bool(clear.any())
        assert float((weight - mkl_weight).abs()[clear].max()) <= 1e-3 * LR
