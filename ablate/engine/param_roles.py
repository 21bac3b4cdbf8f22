"""What each parameter is to the optimizer: its role in the model, its learning-rate multiplier and
whether it is weight-decayed, as registry/optimizer.py's ``TrainParam`` (the optimizer axis's contract).

Roles come from the module that holds the parameter, never from its name: a token or position table
(``nn.Embedding``) is an embedding, and an output head tied to one stays an embedding (it is registered
under the embedding's name first); the output projection's own weight is the output; a registered norm's
(or ``nn.LayerNorm``'s) parameters are norms; a Linear or Conv1d bias is a bias and its weight a hidden
matrix; anything else (QK-norm's gain, T5's bias table, ReZero's gate, a plugin's) is other. The
no-decay rule (``train.optimizer.no_decay``) names the roles that get no weight decay; the model's
parametrisation (muP) gives each parameter its learning-rate multiplier under the optimizer's
``mup_rule``. :func:`describe_groups` is what a run records of the groups (tag ``ablate.param_groups``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import torch
from torch import nn

import registry
from registry.optimizer import BIAS, EMBEDDING, HIDDEN, NO_DECAY_RULES, NORM, OTHER, OUTPUT, TrainParam


def _norm_types() -> tuple[type, ...]:
    found = [e.obj for e in registry.REGISTRY.entries("norm") if isinstance(e.obj, type)]
    return (nn.LayerNorm, *found)


def parameter_roles(model: nn.Module) -> dict[str, str]:
    """{parameter name: role} for every parameter, under the name ``named_parameters`` gives it."""
    norms = _norm_types()
    output = getattr(model, "generator", None)
    roles: dict[str, str] = {}
    seen: set[int] = set()
    for mod_name, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if id(p) in seen:  # a tied tensor keeps the role of the module it is registered with first
                continue
            seen.add(id(p))
            full = f"{mod_name}.{pname}" if mod_name else pname
            if isinstance(module, nn.Embedding):
                roles[full] = EMBEDDING
            elif isinstance(module, norms):
                roles[full] = NORM
            elif isinstance(module, nn.Linear | nn.Conv1d):
                roles[full] = BIAS if pname == "bias" else (OUTPUT if module is output else HIDDEN)
            else:
                roles[full] = OTHER
    return roles


def fused_blocks(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """{weight name: its row blocks} for every fused Linear (``fused_chunks``: a count of equal blocks, or
    their sizes), e.g. self-attention's QKV projection -> (d, kv, kv): the matrices it holds side by side."""
    out: dict[str, tuple[int, ...]] = {}
    for mod_name, module in model.named_modules():
        chunks = getattr(module, "fused_chunks", None)
        if not isinstance(module, nn.Linear) or chunks is None:
            continue
        rows = module.out_features
        sizes = (rows // chunks,) * chunks if isinstance(chunks, int) else tuple(int(c) for c in chunks)
        if sum(sizes) == rows and len(sizes) > 1:
            out[f"{mod_name}.weight" if mod_name else "weight"] = sizes
    return out


def train_params(model: nn.Module, no_decay: str = "none", mup_rule: str | None = None) -> list[TrainParam]:
    """The model's trainable parameters, in ``named_parameters`` order, as an optimizer factory takes them
    (a fused weight with its row blocks)."""
    roles = parameter_roles(model)
    blocks = fused_blocks(model)
    shapes: dict[str, Any] = getattr(model, "width_shapes", {})
    parametrisation = getattr(model, "parametrisation", None)
    exempt = NO_DECAY_RULES[no_decay]
    out = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        scale = 1.0
        if parametrisation is not None and mup_rule is not None and name in shapes:
            scale = float(parametrisation.lr_multiplier(shapes[name], mup_rule))
        out.append(TrainParam(name, p, roles[name], scale, roles[name] not in exempt, blocks.get(name, ())))
    return out


def describe_groups(optimizer: torch.optim.Optimizer, params: list[TrainParam]) -> str:
    """The optimizer's parameter groups as one JSON line: per group its learning-rate multiplier, weight
    decay, tensor and parameter counts and the roles it holds (and which inner optimizer steps it)."""
    by_tensor = {id(p.param): p for p in params}
    inner = getattr(optimizer, "muon", None)
    muon_groups = {id(g) for g in inner.param_groups} if inner is not None else set()
    rows = []
    for group in optimizer.param_groups:
        members = [by_tensor[id(t)] for t in group["params"] if id(t) in by_tensor]
        roles = Counter(m.role for m in members)
        row: dict[str, Any] = {
            "lr_scale": round(float(group.get("lr_scale", 1.0)), 6),
            "weight_decay": group.get("weight_decay", 0.0),
            "tensors": len(members), "params": sum(m.param.numel() for m in members),
            "roles": {role: roles[role] for role in (HIDDEN, EMBEDDING, OUTPUT, NORM, BIAS, OTHER)
                      if roles[role]},
        }
        if muon_groups:
            row["optimizer"] = "muon" if id(group) in muon_groups else "adamw"
        rows.append(row)
    return json.dumps(rows, separators=(",", ":"))
