"""K cells of one shape as one stacked model: every parameter gains a leading cell dimension, and the
cells' batches are folded into one batch of K x B rows that the model's skeleton runs as it runs one cell's.

How a pack runs (the cells stay cells: each keeps its own model object, which evaluation, checkpoints and
the optimizer see as before):

- **Stacked parameters, aliased.** A parameter of the K cell models becomes one (K, ...) tensor
  (``torch.func.stack_module_state``'s layout); each cell model's parameter is then a view of its slice
  (``param.data = stacked[k]``), so the cell's own optimizer, ``state_dict`` and ``load_state_dict`` read and
  write the pack's storage, and a cell steps with the very optimizer (and scheduler, scaler, clipping) it
  would build alone. After the pack's backward, cell k's gradients are the slices ``stacked.grad[k]``.
- **Folded rows.** The pack's forward is one call of a template model (a copy of cell 0's) on the cells'
  batches stacked along the batch dimension, (K B, T): embeddings, masks, positions and attention cores run
  on it unchanged, as on one larger batch. Only the modules that hold parameters of their own ("units":
  the Linear layers, norms, embeddings; the smallest module that owns a parameter) see the cell dimension:
  a Linear is one batched product per layer (``torch.baddbmm`` of (K, B T, d_in) by (K, d_in, d_out): the
  "batched layers" of the issue, where vmap has no rule for the CPU oneDNN products), any other unit runs
  under ``torch.func.vmap`` over (K, B, ...) with ``functional_call`` (PyTorch's model-ensembling recipe).
- **Independence.** Nothing in a Transformer mixes the rows of a batch outside the loss, and each cell's
  loss is its own, so cell k's gradient is exactly what its rows and its parameters give: a cell whose
  weights turn to NaN leaves the others' numbers untouched (tests/engine/test_packed.py).

What cannot pack is found by :func:`pack_problems`, which runs one packed forward and backward against the
cells alone on the same batch: a unit vmap cannot batch (a component whose own parameter sits beside
data-dependent host code, an input without a batch dimension), or a component whose packed result differs.
Dropout above 0 refuses too (:func:`spec_problems`): a pack draws one mask stream over its rows, so a packed
cell would not equal itself trained alone.
"""

from __future__ import annotations

import copy
import math
import traceback
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from ablate.engine.cpu_gemm import Linear as RoutedLinear

__all__ = ["NotPackable", "PackedModel", "pack_problems", "spec_problems"]

LINEARS = (nn.Linear, RoutedLinear)  # the plain Linear and its oneDNN-routed twin: one batched product each


class NotPackable(Exception):
    """A unit that the pack cannot batch: its component's name and why."""


def _units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The modules that own a parameter directly and have no ancestor that does, in module order."""
    units: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if any(name.startswith(u + ".") for u, _ in units):
            continue
        if any(True for _ in module.parameters(recurse=False)):
            units.append((name, module))
    return units


def _plain(module: nn.Module) -> nn.Module:
    """A copy of ``module`` whose routed Linears are plain ``nn.Linear`` (vmap has no rule for the oneDNN
    autograd function); its parameters are replaced at each call by ``functional_call``."""
    twin = copy.deepcopy(module)
    for sub in twin.modules():
        if type(sub) is RoutedLinear:
            sub.__class__ = nn.Linear  # type: ignore[assignment]
    return twin


class PackedModel(nn.Module):
    """The stacked parameters of K cell models of one shape and the template that runs them folded.

    ``models`` are the cells' own models (built as each would be alone, with its own seed); after this,
    their parameters are views into :attr:`stacked` (see the module docstring). :meth:`forward` takes the
    cells' inputs stacked along the batch dimension, (K B, ...), and returns the template's output (K B,
    ...); :meth:`share_grads` hands each cell model its slice of the stacked gradients.
    """

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        if not models:
            raise ValueError("a pack needs at least one cell")
        self.cells = len(models)
        self.models = list(models)  # not registered as submodules: a cell's state dict is its own
        shapes = [[(n, tuple(p.shape)) for n, p in m.named_parameters()] for m in models]
        if any(s != shapes[0] for s in shapes[1:]):
            raise NotPackable("the cells' models differ in their parameters' names or shapes")
        template = copy.deepcopy(models[0])
        self.template = template
        # one stacked leaf per distinct parameter (a tied embedding and output head share theirs)
        self.stacked = nn.ParameterList()
        self._by_template: dict[int, nn.Parameter] = {}
        cell_params = [dict(m.named_parameters()) for m in models]
        for name, param in template.named_parameters():
            data = torch.stack([cp[name].detach() for cp in cell_params])  # (K, ...)
            stacked = nn.Parameter(data, requires_grad=param.requires_grad)
            self.stacked.append(stacked)
            self._by_template[id(param)] = stacked
        self._names = [n for n, _ in template.named_parameters()]
        self._alias()
        for sub in template.modules():  # every use of a parameter, a tied one's too, reads the stacked leaf
            for key, p in list(sub._parameters.items()):
                if p is not None and id(p) in self._by_template:
                    sub._parameters[key] = self._by_template[id(p)]
        self._rows = 0
        for name, unit in _units(template):
            unit.forward = self._packed_forward(name, unit)  # type: ignore[method-assign]

    def _alias(self) -> None:
        """Point every cell model's parameters at their slices of the stacked storage."""
        for k, model in enumerate(self.models):
            for name, param in zip(self._names, self.stacked, strict=True):
                cell_param = model.get_parameter(name)
                cell_param.data = param.data[k]

    # ------------------------------------------------------------------ forward
    def _packed_forward(self, name: str, unit: nn.Module) -> Callable[..., Any]:
        kind = type(unit).__name__
        if type(unit) in LINEARS:
            return lambda x: self._linear(unit, x)
        plain = _plain(unit)

        def run(*args: Any, **kwargs: Any) -> Any:
            rows, k = self._rows, self.cells
            if any(isinstance(v, Tensor) and v.dim() and v.size(0) == rows for v in kwargs.values()):
                raise NotPackable(f"{kind} ({name}): a batched keyword argument")
            dims = tuple(0 if isinstance(a, Tensor) and a.dim() and a.size(0) == rows else None for a in args)
            if all(d is None for d in dims):
                raise NotPackable(f"{kind} ({name}): its input has no batch dimension to fold the cells into")
            split = [a.view(k, rows // k, *a.shape[1:]) if d == 0 else a
                     for a, d in zip(args, dims, strict=True)]
            params: dict[str, Tensor] = dict(unit.named_parameters())
            buffers = dict(unit.named_buffers())

            def one(p: dict[str, Tensor], *a: Any) -> Any:
                return functional_call(plain, (p, buffers), a, kwargs)
            try:
                out = vmap(one, in_dims=(0, *dims))(params, *split)
            except NotPackable:
                raise
            except Exception as error:  # vmap's missing batching rules, host reads of batched data
                reason = str(error).splitlines()[0]
                raise NotPackable(f"{kind} ({name}): vmap cannot batch it: {reason}") from error
            return _fold(out)

        return run

    def _linear(self, unit: nn.Module, x: Tensor) -> Tensor:
        """``x W_k^T + b_k`` for each cell's rows as one batched product: x (K B, ..., d_in) -> (K B, ...,
        d_out)."""
        k = self.cells
        weight = cast(Tensor, unit.weight)  # (K, d_out, d_in)
        bias = cast(Tensor | None, unit.bias)  # (K, d_out) or None
        flat = x.reshape(k, -1, x.size(-1))  # (K, B ..., d_in)
        wt = weight.transpose(1, 2)  # (K, d_in, d_out)
        if torch.is_autocast_enabled(x.device.type):
            dtype = torch.get_autocast_dtype(x.device.type)
            flat, wt = flat.to(dtype), wt.to(dtype)
            bias = None if bias is None else bias.to(dtype)
        out = torch.bmm(flat, wt) if bias is None else torch.baddbmm(bias.unsqueeze(1), flat, wt)
        return out.reshape(*x.shape[:-1], weight.size(1))

    def forward(self, *inputs: Tensor, **kwargs: Any) -> Any:
        """The template on the folded inputs (K B, ...): each cell's rows through its own parameters."""
        self._rows = inputs[0].size(0)
        if self._rows % self.cells:
            raise ValueError(f"{self._rows} rows do not split into {self.cells} cells")
        return self.template(*inputs, **kwargs)

    # ------------------------------------------------------------------ gradients
    def share_grads(self) -> None:
        """Give each cell model's parameters their slices of the stacked gradients (views: clipping or
        unscaling a cell's gradient in place changes only its slice)."""
        for k, model in enumerate(self.models):
            for name, param in zip(self._names, self.stacked, strict=True):
                model.get_parameter(name).grad = None if param.grad is None else param.grad[k]

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none=set_to_none)
        for model in self.models:
            model.zero_grad(set_to_none=True)


def _fold(out: Any) -> Any:
    """A vmapped unit's output (K, B, ...) back to the folded rows (K B, ...), tuples element by element."""
    if isinstance(out, Tensor):
        return out.flatten(0, 1)
    if isinstance(out, tuple):
        return tuple(_fold(o) for o in out)
    raise NotPackable(f"a unit returned {type(out).__name__}, not a tensor")


# ---------------------------------------------------------------- what can pack
DROPOUT_FIELDS = ("dropout", "attention_dropout", "embedding_dropout", "ffn_dropout", "residual_dropout")


def spec_problems(model_spec: Any) -> list[str]:
    """Why cells of this model section cannot pack, before anything is built: a dropout above 0 (one mask
    stream over the pack's rows: a packed cell would not equal itself alone)."""
    problems = []
    for field in DROPOUT_FIELDS:
        value = getattr(model_spec, field, None)
        if isinstance(value, (int, float)) and value > 0:
            problems.append(f"model.{field} {value}: a pack draws one dropout mask stream over its cells' "
                            "rows, so a packed cell would not equal itself alone")
    return problems


def pack_problems(models: Sequence[nn.Module], inputs: Sequence[Tensor], loss: Callable[[Any], Tensor],
                  tolerance: float = 1e-4) -> list[str]:
    """Run two cells' models packed and alone on the same ``inputs`` (one cell's batch) and say what does not
    pack: a unit vmap cannot batch, or outputs or gradients that differ by more than ``tolerance`` (relative
    to their scale). ``loss`` maps a model's output to a scalar. The models are copied: nothing changes."""
    cells = [copy.deepcopy(m) for m in models[:2]]
    try:
        pack = PackedModel(cells)
    except NotPackable as error:
        return [str(error)]
    folded = [torch.cat([t] * len(cells)) for t in inputs]
    try:
        out = pack(*folded)
        torch.stack([loss(o) for o in out.chunk(len(cells))]).sum().backward()
    except NotPackable as error:
        return [str(error)]
    except Exception as error:  # a parameter read outside its module's forward (a table sliced by its owner)
        return [f"{_where(error)}: the packed forward failed: {str(error).splitlines()[0]}"]
    pack.share_grads()
    problems = []
    for k, alone in enumerate(copy.deepcopy(m) for m in models[:2]):
        ref = alone(*inputs)
        loss(ref).backward()
        mine = out.chunk(len(cells))[k]
        if not _close(mine, ref, tolerance):
            problems.append(f"the packed output of cell {k} differs from the cell alone")
        for (name, p), q in zip(alone.named_parameters(), cells[k].parameters(), strict=True):
            if p.grad is not None and (q.grad is None or not _close(q.grad, p.grad, tolerance)):
                problems.append(f"the packed gradient of {name} differs from the cell alone")
                break
    return problems


def _where(error: BaseException) -> str:
    """The innermost frame of ``error`` in the project's own code (registry/ or ablate/), as path:line."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if "/registry/" in f.filename or "/ablate/" in f.filename]
    if not frames:
        return "the model"
    frame = frames[-1]
    parts = frame.filename.split("/")
    top = max(i for i, p in enumerate(parts) if p in ("registry", "ablate"))
    return f"{'/'.join(parts[top:])}:{frame.lineno} ({frame.name})"


def _close(a: Tensor, b: Tensor, tolerance: float) -> bool:
    scale = max(float(b.detach().abs().max()), 1e-12) if b.numel() else 1.0
    diff = float((a.detach().float() - b.detach().float()).abs().max()) if b.numel() else 0.0
    return math.isfinite(diff) and diff <= tolerance * scale


def pad_rows(t: Tensor, rows: int, cols: int, fill: int, first: int | None = None) -> Tensor:
    """``t`` (B, T) right-padded to (rows, cols) with ``fill``; a new row's first token is ``first`` when
    given (a row of nothing but padding would be a fully masked attention row)."""
    out = F.pad(t, (0, cols - t.size(1)), value=fill)
    if rows > t.size(0):
        extra = out.new_full((rows - t.size(0), cols), fill)
        if first is not None:
            extra[:, 0] = first
        out = torch.cat([out, extra])
    return out
