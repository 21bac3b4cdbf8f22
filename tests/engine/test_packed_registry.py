"""Every registered model component against the packed path (ablate/engine/packed_model.py): the probe that
runs before a study trains (:func:`~ablate.engine.packed_model.pack_problems`: two cells packed and alone
on one batch, with dropout, from the same random state) either finds the packed forward and gradients equal
to the cells alone, or names the component the spec chose (``kind=name``) and why, which sends its cells to
one a process and into the dry run's line. The cases come from the registry, so a new variant (a plugin's
too) is checked without touching this file; :data:`ALONE` is the list docs/scaling.md gives."""

from __future__ import annotations

import pytest
import torch

import registry
from ablate.engine.builders import build_lm, build_model
from ablate.engine.packed_model import pack_problems
from ablate.spec.experiment import ModelSpec
from tests.engine.test_packed import OPTIMIZERS
from tests.registry.test_contract import CASES, LM_CASES, settings

pytestmark = pytest.mark.usefixtures("single_thread")

V = 19
# the variants whose cells train one a process, and why (the probe's words, checked below)
ALONE = {
    "residual=rezero": "vmap cannot batch it",  # its own gate beside sdpa's kernel choice on host
    "attention=qk_norm": "vmap cannot batch it",  # its own gain beside sdpa's kernel choice on host
    "positions=t5_bias": "the packed forward failed",  # its bias table indexed by its owner
}
ARCH_CASES = ([("encoder_decoder", k, n) for k, n in CASES]
              + [("decoder_only", k, n) for k, n in LM_CASES])


def problems(arch: str, kind: str, name: str) -> list[str]:
    section = {**settings(kind, name), "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.1}
    g = torch.Generator().manual_seed(0)
    if arch == "decoder_only":
        spec = ModelSpec(**{**section, "arch": "decoder_only"})
        models = [build_lm(spec, V, seed=seed).train() for seed in (0, 1)]
        inputs = [torch.randint(3, V, (4, 12), generator=g)]
    else:
        spec = ModelSpec(**section)
        models = [build_model(spec, V, V, seed=seed).train() for seed in (0, 1)]
        inputs = [torch.randint(3, V, (4, 7), generator=g), torch.randint(3, V, (4, 6), generator=g)]
    return pack_problems(models, inputs, lambda out: out.float().pow(2).mean())


@pytest.mark.parametrize(("arch", "kind", "name"), ARCH_CASES,
                         ids=[f"{a}-{k}:{n}" for a, k, n in ARCH_CASES])
def test_every_component_packs_or_is_named_with_why(arch: str, kind: str, name: str) -> None:
    found = problems(arch, kind, name)
    key = f"{kind}={name}"
    if key not in ALONE:
        assert found == [], f"{key} does not pack: {found} (name it in ALONE and docs/scaling.md)"
        return
    assert found, f"{key} packs now: take it out of ALONE and docs/scaling.md"
    assert all(p.startswith(f"{key}: ") and ALONE[key] in p for p in found), found


def test_every_registered_optimizer_is_checked_packed() -> None:
    """The equality test of tests/engine/test_packed.py steps every registered optimizer packed."""
    assert set(OPTIMIZERS) == set(registry.names("optimizer"))
