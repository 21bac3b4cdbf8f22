"""``train.compile_mode`` and ``train.compile_scope``: torch.compile's mode reaches it;
``compile_scope: layer`` compiles every layer in place (parameters and state-dict keys unchanged) instead
of the whole model; both apply only to a compiled run, and neither moves the hash of a spec without them.

torch.compile is replaced by a recorder here: what is compiled, and how, is the behaviour under test
(tests/engine/test_compile.py trains compiled for real, in the soak tier)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from ablate.engine.builders import build_lm, build_model
from ablate.errors import AblateError
from ablate.run.distributed import DistInfo
from ablate.run.runner import Place, wrap
from ablate.spec.experiment import ExperimentSpec, ModelSpec
from ablate.spec.load import load_spec

MODEL = {"d_model": 16, "heads": 2, "encoder_layers": 2, "decoder_layers": 3, "d_ff": 32}


def spec(**train: Any) -> ExperimentSpec:
    return ExperimentSpec.model_validate({"name": "c", "tracking": {"enabled": False}, "model": MODEL,
                                          "train": train})


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, str | None]]:
    """(what torch.compile was given, its mode) of every call in a test; the function comes back as is."""
    calls: list[tuple[Any, str | None]] = []

    def record(fn: Any = None, **kwargs: Any) -> Any:
        calls.append((fn, kwargs.get("mode")))
        return fn

    monkeypatch.setattr(torch, "compile", record)
    return calls


def place(tmp_path: Path) -> Place:
    return Place(DistInfo(), torch.device("cpu"), tmp_path)


def test_the_whole_model_is_compiled_with_the_mode_asked(tmp_path: Path,
                                                         compiled: list[tuple[Any, str | None]]) -> None:
    model = build_model(spec().model, 20, 20, 0, 0)
    assert wrap(spec(compile=True), model, place(tmp_path)) is model and compiled == [(model, None)]
    compiled.clear()
    wrap(spec(compile=True, compile_mode="max-autotune", compile_scope="model"), model, place(tmp_path))
    assert compiled == [(model, "max-autotune")]


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_compile_scope_layer_compiles_each_layer_in_place_and_keeps_the_state_dict(
        arch: str, tmp_path: Path, compiled: list[tuple[Any, str | None]]) -> None:
    s = spec(compile=True, compile_scope="layer", compile_mode="reduce-overhead")
    model: Any
    if arch == "decoder_only":
        model = build_lm(ModelSpec(**MODEL, arch="decoder_only"), 20)
        layers = list(model.decoder.layers)
    else:
        model = build_model(s.model, 20, 20, 0, 0)
        layers = [*model.encoder.layers, *model.decoder.layers]
    keys = list(model.state_dict())
    assert wrap(s, model, place(tmp_path)) is model  # the step calls the model, whose layers are compiled
    assert len(compiled) == len(layers) == (3 if arch == "decoder_only" else 5)
    assert all(mode == "reduce-overhead" for _, mode in compiled)
    assert [layer._compiled_call_impl for layer in layers] == [fn for fn, _ in compiled]
    assert list(model.state_dict()) == keys  # no _orig_mod. anywhere: checkpoints as before


def test_compile_options_without_compile_are_one_located_line(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("name: c\ntracking: {enabled: false}\ntrain:\n  compile_mode: max-autotune\n")
    with pytest.raises(AblateError) as info:
        load_spec(path, [])
    message = str(info.value)
    assert "spec.yaml:4" in message and "train.compile_mode" in message and "train.compile: true" in message


def test_the_options_unset_keep_every_hash_and_set_they_are_part_of_the_identity() -> None:
    plain = spec(compile=True)
    assert "compile_mode" not in plain.identity()["train"]
    assert "compile_scope" not in plain.resolved()["train"]
    assert spec(compile=True, compile_mode="default").spec_hash != plain.spec_hash
    for path in sorted(Path(__file__).resolve().parents[2].joinpath("experiments").glob("*.yaml")):
        text = path.read_text()
        assert "compile_mode" not in text and "compile_scope" not in text  # no committed spec sets them
