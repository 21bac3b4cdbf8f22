"""The Registry itself: duplicates, globs, unknown names, and plugins found through entry points.

The plugin tests install a package the way pip would leave it (a ``*.dist-info`` folder with METADATA
and entry_points.txt next to the module) on a temporary ``sys.path`` entry, and run in a subprocess so
that this process's global registry never sees the plugin.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from torch import nn

import registry
from registry import ENTRY_POINT_GROUP, Axis, Option, Registry, RegistryError


class _Comp(nn.Module):
    """A stand-in component."""


def _declared(*kinds: str) -> Registry:
    """A fresh registry with minimal declarations of ``kinds``."""
    reg = Registry()
    for kind in kinds:
        reg.declare_axis(Axis(kind, "none", f"the {kind} axis", "cls()", ("nowhere",)))
    return reg


def test_a_duplicate_name_is_an_error_naming_the_first_owner() -> None:
    reg = _declared("ffn", "norm")
    reg.register("ffn", "mine")(_Comp)
    taken = r"ffn component 'mine' is already registered \(by .*test_registry\)"
    with pytest.raises(RegistryError, match=taken):
        reg.register("ffn", "mine")(nn.Identity)
    assert reg.get("ffn", "mine") is _Comp  # the first registration stands
    reg.register("norm", "mine")(nn.Identity)  # the same name under another kind is fine
    assert reg.get("norm", "mine") is nn.Identity


def test_names_filters_with_a_shell_glob() -> None:
    reg = _declared("x")
    for name in ("conv1d", "custom", "linear", "-1e9", "-inf"):
        reg.add("x", name, _Comp)
    assert reg.names("x") == ["-1e9", "-inf", "conv1d", "custom", "linear"]
    assert reg.names("x", "c*") == ["conv1d", "custom"]
    assert reg.names("x", "-1e?") == ["-1e9"]
    assert reg.names("x", "[lc]*n*") == ["conv1d", "linear"]
    assert reg.names("x", "zz*") == [] and reg.names("no-such-kind") == []
    assert [e.name for e in reg.entries("x", "*i*")] == ["-inf", "linear"]
    assert registry.names("norm", "c*") == ["custom"]  # the global registry's built-ins


def test_get_of_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(RegistryError) as info:
        registry.get("ffn", "lineer")
    assert str(info.value) == (
        f"unknown ffn 'lineer'; known: {', '.join(registry.names('ffn'))}; did you mean 'linear'?"
    )
    with pytest.raises(RegistryError, match=r"unknown component kind 'fnn'; known: .*ffn"):
        registry.get("fnn", "linear")
    assert ("ffn", "linear") in registry.REGISTRY and ("ffn", "lineer") not in registry.REGISTRY


def test_a_variant_needs_its_axis_declared_and_options_declared_once() -> None:
    reg = _declared("ffn")
    with pytest.raises(RegistryError, match="no axis 'norm' is declared"):
        reg.register("norm", "mine")(_Comp)
    with pytest.raises(RegistryError, match="axis 'ffn' is already declared"):
        reg.declare_axis(Axis("ffn", "x", "again", "cls()", ("nowhere",)))
    width = Option("width", int, 4, "a width", ge=1)
    reg.register("ffn", "wide", options=(width,))(_Comp)
    reg.register("ffn", "wider", options=(width,))(_Comp)  # the same option on two variants is fine
    with pytest.raises(RegistryError, match="option 'width' is already declared differently"):
        reg.register("ffn", "odd", options=(Option("width", float, 4.0, "another width"),))(_Comp)
    with pytest.raises(RegistryError, match="takes 'activation': not a sub-axis of ffn"):
        reg.register("ffn", "gated", takes=("activation",))(_Comp)
    reg.declare_axis(Axis("activation", "relu", "the non-linearity", "cls()", ("ffn",), parent="ffn"))
    reg.register("ffn", "gated", takes=("activation",))(_Comp)
    assert reg.entry("ffn", "gated").takes == ("activation",)
    assert reg.entry("ffn", "wide").options == (width,)
    assert [a.kind for a in reg.axes()] == ["ffn", "activation"]


def test_an_option_checks_its_values_strictly() -> None:
    option = Option("rate", float, 0.5, "a rate", ge=0.0, lt=1.0)
    assert option.problem(0.25) is None and option.problem(0) is None  # an integer is a number
    assert option.problem(True) == "found true; expected a number"
    assert option.problem("0.5") == "found '0.5'; expected a number"
    assert option.problem(1.0) == "found 1.0; must be < 1"
    kind = Option("kind", str, "a", "a choice", choices=("a", "b"))
    assert kind.problem("c") == "found 'c'; accepted: a, b"
    assert Option("n", int, 1, "a count").problem(1.5) == "found 1.5; expected an integer"


def test_a_registry_without_a_plugin_group_loads_nothing() -> None:
    reg = Registry()
    reg.load_plugins()
    assert reg.kinds() == []


# ---------------------------------------------------------------- entry-point plugins
PLUGIN = '''
"""A third-party component package: registers an FFN through the ablate.components entry point."""
import torch.nn.functional as F
from torch import nn

from registry import register


@register("ffn", "demo_gelu")
class DemoGeluFFN(nn.Module):
    """Linear -> GELU -> Linear, from a plugin package (tests/registry/test_registry.py)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))
'''

CHECK = '''
import torch

import ablate
from ablate.cli import main

print("list rc", main(["list", "ffn"]), flush=True)
print("validate rc", main(["validate", "spec.yaml"]), flush=True)
spec = ablate.load_spec("spec.yaml", overrides=["model.d_ff=24"])
model = ablate.build_model(spec.model, 11, 13, pad_id=0)
logits = model(torch.randint(1, 11, (2, 5)), torch.randint(1, 13, (2, 4)))
kinds = sorted({type(m).__name__ for m in model.modules() if type(m).__name__.startswith("Demo")})
print("model", spec.model.ffn, kinds, tuple(logits.shape), flush=True)
'''


def _install(site: Path, name: str, module_text: str) -> None:
    """What `pip install` leaves for a package whose module registers components: module + dist-info."""
    (site / f"{name}.py").write_text(textwrap.dedent(module_text))
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.1\n")
    entry = f"{name.removeprefix('ablate_')} = {name}"
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry}\n")


def _run(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, *args], cwd=site, env=env, capture_output=True, text=True,
                          timeout=180)


def test_an_entry_point_plugin_is_listed_validated_and_built(tmp_path: Path) -> None:
    _install(tmp_path, "ablate_demo", PLUGIN)
    (tmp_path / "spec.yaml").write_text("name: p\nmodel: {ffn: demo_gelu, d_model: 16, heads: 2}\n")
    (tmp_path / "check.py").write_text(CHECK)
    result = _run(tmp_path, "check.py")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0] == "ffn"
    assert any(line.split()[:1] == ["demo_gelu"] and "from a plugin package" in line for line in out), out
    assert "list rc 0" in out and "validate rc 0" in out
    assert any(line.startswith("ok spec.yaml (") for line in out)
    assert "model demo_gelu ['DemoGeluFFN'] (2, 4, 13)" in out
    assert "demo_gelu" not in registry.names("ffn")  # this process never loaded it


@pytest.mark.parametrize(
    ("module_text", "command", "says"),
    [
        ("import ablate_missing_dependency\n", ["list"],
         "failed: ModuleNotFoundError: No module named 'ablate_missing_dependency'"),
        ("from registry import register\nfrom torch import nn\nregister('ffn', 'linear')(nn.Identity)\n",
         ["validate", "spec.yaml"], "failed: ffn component 'linear' is already registered (by registry.ffn)"),
    ],
    ids=["import-error", "duplicate-name"],
)
def test_a_broken_plugin_is_a_one_line_error(tmp_path: Path, module_text: str, command: list[str],
                                             says: str) -> None:
    _install(tmp_path, "ablate_broken", module_text)
    (tmp_path / "spec.yaml").write_text("name: p\n")
    result = _run(tmp_path, "-m", "ablate", *command)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    plugin = f"plugin 'broken' (ablate_broken from ablate-broken, entry point group {ENTRY_POINT_GROUP})"
    assert result.stderr.splitlines() == [f"error: {plugin} {says}"]
    assert result.stdout == ""


RECIPE_PLUGIN = '''
"""A plugin that adds to the training recipe's axes: an optimizer with its own option, and a schedule."""
import torch

from registry import Option, register


@register("optimizer", "demo_signsgd", options=(Option("demo_momentum", float, 0.0, "the momentum",
                                                        ge=0.0, lt=1.0),))
def demo_signsgd(params, lr, *, weight_decay=0.0, demo_momentum=0.0):
    """signSGD (Bernstein et al. 2018), from a plugin package (tests/registry/test_registry.py)."""
    class SignSGD(torch.optim.SGD):
        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.sign_()
            return super().step(closure)
    from registry.optimizer import param_groups
    return SignSGD(param_groups(params, lr, weight_decay), lr=lr, momentum=demo_momentum)


@register("schedule", "demo_halving")
def demo_halving(step, *, warmup, total=None):
    """Halve the rate every 10 steps after the warm-up, from a plugin package."""
    if warmup and step + 1 <= warmup:
        return (step + 1) / warmup
    return 0.5 ** ((step + 1 - warmup) // 10)
'''

RECIPE_CHECK = '''
import torch

import ablate
from ablate.cli import main
from ablate.engine.builders import build_lm
from ablate.engine.trainer import build_optimizer, lr_factor

print("list rc", main(["list", "optimizer"]), flush=True)
print("validate rc", main(["validate", "spec.yaml"]), flush=True)
print("bad rc", main(["validate", "bad.yaml"]), flush=True)
spec = ablate.load_spec("spec.yaml")
model = build_lm(spec.model, 11)
optimizer = build_optimizer(model, spec.train)
before = [p.detach().clone() for p in model.parameters()]
model(torch.randint(1, 11, (2, 5))).sum().backward()
optimizer.step()
steps = {round(float((p.detach() - b).abs().max()), 6) for p, b in zip(model.parameters(), before)}
print("optimizer", type(optimizer).__name__, optimizer.param_groups[0]["momentum"], sorted(steps), flush=True)
print("factors", [lr_factor(s, spec.train) for s in (0, 1, 11, 21)], flush=True)
'''


@pytest.mark.slow  # a subprocess importing torch and the CLI: seconds
def test_a_plugin_adds_an_optimizer_and_a_schedule_to_the_recipe(tmp_path: Path) -> None:
    _install(tmp_path, "ablate_recipe_demo", RECIPE_PLUGIN)
    spec = ("name: p\nmodel: {arch: decoder_only, d_model: 16, heads: 2, dropout: 0.0}\ndata: {source: text, "
            "text: {root: ., train: t.txt, val: v.txt}}\ntrain:\n  optimizer: {name: demo_signsgd, lr: 0.01, "
            "demo_momentum: 0.5}\n  schedule: {name: demo_halving, warmup_steps: 2}\n")
    (tmp_path / "spec.yaml").write_text(spec)
    for name in ("t.txt", "v.txt"):  # `ablate validate` reads the data files too
        (tmp_path / name).write_text("a few words of text\n")
    (tmp_path / "bad.yaml").write_text("name: p\ntrain:\n  optimizer: {name: adamw, demo_momentum: 0.5}\n")
    (tmp_path / "check.py").write_text(RECIPE_CHECK)
    result = _run(tmp_path, "check.py")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert any(line.split()[:1] == ["demo_signsgd"] and "[demo_momentum=0.0]" in line for line in out), out
    assert "validate rc 0" in out and "bad rc 2" in out
    assert ("bad.yaml:3: train.optimizer.demo_momentum: demo_momentum applies to optimizer: demo_signsgd "
            "only (this spec has optimizer: adamw)") in result.stderr
    assert "optimizer SignSGD 0.5 [0.01]" in out  # every coordinate moved by lr: the plugin's own update
    assert "factors [0.5, 1.0, 0.5, 0.25]" in out
    assert "demo_signsgd" not in registry.names("optimizer")  # this process never loaded it
