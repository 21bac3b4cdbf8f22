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

- **Dropout, each cell's own masks.** torch.func's vmap offers ``randomness="different"`` (one draw over
  the batched tensor, split across cells) and ``"same"`` (one mask shared by all cells): neither is the mask
  a cell draws alone, whose elements depend on its own generator's state and its own batch's shape. So a
  pack draws a cell's masks outside vmap, in the cell's own order: every dropout module of the template
  (they own no parameter, so they run on the folded rows) takes each cell's slice of its input, cut to the
  cell's own rows and lengths (:meth:`PackedModel.set_extents`: the folded batch is padded), and runs the
  module's own forward on it with the cell's random state swapped into torch's generators
  (ablate/engine/cell_rng.py); the padded rest passes through. A cell's masks are then the ones it draws
  alone, bit for bit, and a resumed cell continues the stream its checkpoint saved. A dropout inside a
  unit (a module that also owns a parameter) would run under vmap, whose default ``randomness="error"``
  refuses it: that component is named and trains one cell a process.

What cannot pack is found by :func:`pack_problems`, which runs one packed forward and backward against the
cells alone on the same batch (from the same random state): a unit vmap cannot batch (a component whose own
parameter sits beside data-dependent host code, an input without a batch dimension), or a component whose
packed result differs. Attention dropout above 0 refuses (:func:`spec_problems`): it is drawn inside the
attention kernel over the pack's folded rows, where no cell's own slice is cut.
"""

from __future__ import annotations

import copy
import math
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

import registry
from ablate.engine.cell_rng import CellStreams
from ablate.engine.cpu_gemm import Linear as RoutedLinear

__all__ = ["NotPackable", "PackedModel", "pack_lengths", "pack_problems", "spec_problems"]

Draw = Callable[[int], AbstractContextManager[Any]]  # cell index in the pack -> its random state swapped in

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
    ...); :meth:`share_grads` hands each cell model its slice of the stacked gradients. ``draw(k)`` swaps
    cell k's random state in for a block (a dropout's mask); without it a dropout in training refuses.
    """

    def __init__(self, models: Sequence[nn.Module], draw: Draw | None = None) -> None:
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
        self.names = list(self._names)  # the stacked parameters' names in each cell model, in order
        self._alias()
        for sub in template.modules():  # every use of a parameter, a tied one's too, reads the stacked leaf
            for key, p in list(sub._parameters.items()):
                if p is not None and id(p) in self._by_template:
                    sub._parameters[key] = self._by_template[id(p)]
        self._rows = 0
        self.draw = draw
        self._cell_rows: list[int] | None = None  # each cell's own rows and lengths (set_extents)
        self._lengths: dict[int, list[int]] = {}
        for name, unit in _units(template):
            unit.forward = self._packed_forward(name, unit)  # type: ignore[method-assign]
        self.dropouts = 0
        for name, sub in template.named_modules():
            if isinstance(sub, nn.Dropout) and sub.p > 0 and not any(
                    name.startswith(u + ".") for u, _ in _units(template)):
                sub.forward = self._cell_dropout(name, sub, sub.forward)  # type: ignore[method-assign,assignment]
                self.dropouts += 1
        # the sizes a padded length must not take while a dropout cuts cells' slices: every parameter's
        # dimensions (the widths a dropout's input has besides its rows and lengths)
        self.widths = {int(d) for p in self.stacked for d in p.shape[1:]}

    def _alias(self) -> None:
        """Point every cell model's parameters at their slices of the stacked storage."""
        for k, model in enumerate(self.models):
            for name, param in zip(self._names, self.stacked, strict=True):
                cell_param = model.get_parameter(name)
                cell_param.data = param.data[k]

    # ------------------------------------------------------------------ forward
    def _packed_forward(self, name: str, unit: nn.Module) -> Callable[..., Any]:
        kind = _named(self.template, name)
        if type(unit) in LINEARS:
            return lambda x: self._linear(unit, x)
        plain = _plain(unit)

        def run(*args: Any, **kwargs: Any) -> Any:
            rows, k = self._rows, self.cells
            if any(isinstance(v, Tensor) and v.dim() and v.size(0) == rows for v in kwargs.values()):
                raise NotPackable(f"{kind}: a batched keyword argument")
            dims = tuple(0 if isinstance(a, Tensor) and a.dim() and a.size(0) == rows else None for a in args)
            if all(d is None for d in dims):
                raise NotPackable(f"{kind}: its input has no batch dimension to fold the cells into")
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
                raise NotPackable(f"{kind}: vmap cannot batch it: {reason}") from error
            return _fold(out)

        return run

    def set_extents(self, rows: Sequence[int], lengths: dict[int, Sequence[int]]) -> None:
        """Each cell's own rows in the next forward's folded batch and, for each padded length (a size
        no parameter has: :func:`pack_lengths`), each cell's own length: what a dropout cuts its slice by."""
        self._cell_rows = list(rows)
        self._lengths = {size: list(own) for size, own in lengths.items()}

    def _cell_dropout(self, name: str, module: nn.Module, forward: Callable[[Tensor], Tensor]
                      ) -> Callable[[Tensor], Tensor]:
        """The dropout ``module`` drawing each cell's mask from that cell's random state on that cell's own
        slice of the input (see the module docstring)."""
        kind = _named(self.template, name)

        def run(x: Tensor) -> Tensor:
            if not module.training:
                return forward(x)
            k, rows = self.cells, self._rows
            if self.draw is None:
                raise NotPackable(f"{kind}: a dropout needs each cell's random state")
            if x.dim() == 0 or x.size(0) != rows:
                raise NotPackable(f"{kind}: its input has no batch dimension to cut each cell's "
                                  "mask from")
            per = rows // k
            own = self._cell_rows or [per] * k
            lengths = self._lengths
            cuts = [[slice(c * per, c * per + own[c])]
                    + [slice(0, lengths[n][c]) if n in lengths else slice(None) for n in x.shape[1:]]
                    for c in range(k)]
            whole = all(r == per for r in own) and not any(n in self._lengths for n in x.shape[1:])
            if whole:  # no padding to cut away: the cells' outputs side by side
                parts = []
                for c, chunk in enumerate(x.chunk(k)):
                    with self.draw(c):
                        parts.append(forward(chunk))
                return torch.cat(parts)
            out = x.clone()  # the padded rest passes through (no loss reads it)
            for c, cut in enumerate(cuts):
                with self.draw(c):
                    out[tuple(cut)] = forward(x[tuple(cut)])
            return out

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


def component_of(module: nn.Module) -> str | None:
    """The registry's ``kind=name`` of ``module``'s class (what a spec writes: ``attention=qk_norm``), or
    None for a module no variant registers."""
    for entry in registry.REGISTRY.entries():
        if isinstance(entry.obj, type) and type(module) is entry.obj:
            return f"{entry.kind}={entry.name}"
    return None


def _named(model: nn.Module, name: str) -> str:
    """A unit as a problem names it: the registered component it is or sits in (its nearest ancestor a
    spec names), its class and its place, 'attention=qk_norm: QKNormAttention (decoder.layers.0.self_attn)'.
    """
    parts = name.split(".") if name else []
    for end in range(len(parts), -1, -1):
        owner = component_of(model.get_submodule(".".join(parts[:end])))
        if owner is not None:
            return f"{owner}: {type(model.get_submodule(name)).__name__} ({name})"
    return f"{type(model.get_submodule(name)).__name__} ({name})"


def _fold(out: Any) -> Any:
    """A vmapped unit's output (K, B, ...) back to the folded rows (K B, ...), tuples element by element."""
    if isinstance(out, Tensor):
        return out.flatten(0, 1)
    if isinstance(out, tuple):
        return tuple(_fold(o) for o in out)
    raise NotPackable(f"a unit returned {type(out).__name__}, not a tensor")


# ---------------------------------------------------------------- what can pack
def pack_lengths(lengths: Sequence[Sequence[int]], widths: set[int], limit: int) -> list[int]:
    """The padded size of each kind of length (a translation's source and target; a language model's
    sequence), given each cell's own (``lengths[kind][cell]``): the longest, moved up where a dropout could
    not tell it from another dimension of its input (some cell is shorter and the size is one of the
    model's ``widths`` or another kind's padded size), so a dimension's size names its length. At most
    ``limit`` (the model's positions)."""
    padded = [max(own) for own in lengths]
    for i, own in enumerate(lengths):
        if min(own) == padded[i]:
            continue  # every cell this long: nothing to cut
        others = {size for j, size in enumerate(padded) if j != i}
        while padded[i] in widths or padded[i] in others:
            padded[i] += 1
        if padded[i] > limit:
            raise NotPackable(f"no padded length from {max(own)} to the model's {limit} positions is apart "
                              "from its widths: a dropout could not cut each cell's slice")
    return padded


def spec_problems(model_spec: Any) -> list[str]:
    """Why cells of this model section cannot pack, before anything is built: attention dropout above 0
    (drawn inside the attention kernel over the pack's rows: a packed cell would not equal itself alone)."""
    value = getattr(model_spec, "attention_dropout", None)
    if isinstance(value, (int, float)) and value > 0:
        return [f"model.attention_dropout {value}: drawn inside the attention kernel over the pack's rows, "
                "so a packed cell would not draw its own masks"]
    return []


def pack_problems(models: Sequence[nn.Module], inputs: Sequence[Tensor], loss: Callable[[Any], Tensor],
                  tolerance: float = 1e-4) -> list[str]:
    """Run two cells' models packed and alone on the same ``inputs`` (one cell's batch), each from the same
    random state, and say what does not pack: a unit vmap cannot batch, or outputs or gradients that differ by
    more than ``tolerance`` (relative to their scale). ``loss`` maps a model's output to a scalar. The models
    are copied and torch's generators restored: nothing changes."""
    device = inputs[0].device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        return _pack_problems(models, inputs, loss, tolerance, CellStreams.now(device))


def _pack_problems(models: Sequence[nn.Module], inputs: Sequence[Tensor], loss: Callable[[Any], Tensor],
                   tolerance: float, start: tuple[Tensor, Tensor | None]) -> list[str]:
    device = inputs[0].device
    cells = [copy.deepcopy(m) for m in models[:2]]
    streams = CellStreams([start] * len(cells), device)
    try:
        pack = PackedModel(cells, streams.drawing)
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
        with CellStreams([start], device).drawing(0):
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
    owner = None  # the component whose method it was, as the spec names it
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == frame.filename and tb.tb_lineno == frame.lineno:
            me = tb.tb_frame.f_locals.get("self")
            owner = component_of(me) if isinstance(me, nn.Module) else None
        tb = tb.tb_next
    return (f"{owner}: " if owner else "") + f"{'/'.join(parts[top:])}:{frame.lineno} ({frame.name})"


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
