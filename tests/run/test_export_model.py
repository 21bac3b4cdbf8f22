"""`ablate export-model`: a decoder-only model as the standard transformers class that computes the same
function. Per mapped family (GPT-2, Llama, CTRL), transformers' logits on the same tokens within 1e-4 of
ablate's in fp32 and the same greedy continuation; refusals name the component; an exported run loads with
AutoModelForCausalLM and AutoTokenizer in a process that cannot import ablate, and records the run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from ablate.cli import main
from ablate.engine.builders import build_lm
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.hf_mapping import ExportRefused, to_transformers
from ablate.engine.hf_weights import ctrl_order, rope_order
from ablate.engine.lm_eval import generate
from ablate.run.export_model import resolve_run_or_cell
from ablate.run.runner import run_experiment
from ablate.spec.experiment import ExperimentSpec, ModelSpec
from ablate.tracking import record

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB = 40


def lm(output_bias: bool = False, seed: int = 0, **fields: Any) -> tuple[DecoderOnlyLM, ModelSpec]:
    """A 2-layer model whose every parameter is moved off its initial value (a trained model's weights:
    norms' gains and biases away from 1 and 0), without an output bias unless asked."""
    spec = ModelSpec.model_validate({"arch": "decoder_only", "d_model": 32, "heads": 4, "decoder_layers": 2,
                                     "d_ff": 64, "dropout": 0.0, "max_positions": 64,
                                     "output_bias": output_bias, **fields})
    model = build_lm(spec, VOCAB, seed=seed).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    return model, spec


def hf_model(model: DecoderOnlyLM, spec: ModelSpec, folder: Path) -> Any:
    """The mapped model saved and loaded back as transformers does it (safetensors, config.json)."""
    mapped = to_transformers(model, spec)
    config = transformers.AutoConfig.for_model(mapped.model_type, **mapped.config)
    built = getattr(transformers, mapped.architecture)(config)
    built.load_state_dict(mapped.weights, strict=True)
    built.save_pretrained(folder)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(loaded).__name__ == mapped.architecture
    return loaded


FAMILIES = {
    "GPT2LMHeadModel": [
        {"positions": "learned", "activation": "gelu", "embeddings": "tied", "embed_scale": False},
        {"positions": "sinusoidal", "activation": "relu", "norm_eps": 1e-5},  # sinusoids in wpe, scale folded
        {"positions": "none", "activation": "silu", "ffn": "conv1d", "attention": "explicit"},
        {"positions": "learned", "activation": "relu2", "parametrisation": "mup", "mup_base_width": 16},
    ],
    "LlamaForCausalLM": [
        {"positions": "rope", "norm": "rms", "ffn": "swiglu", "embeddings": "tied", "embed_scale": False},
        {"positions": "rope", "norm": "rms", "ffn": "geglu", "kv_heads": 2, "rope_base": 500.0},
        {"positions": "rope", "norm": "rms", "ffn": "swiglu", "kv_heads": 1, "parametrisation": "mup",
         "mup_base_width": 16},
    ],
    "CTRLLMHeadModel": [{}, {"embeddings": "tied", "ffn": "conv1d", "embed_scale": False}],
    "Gemma2ForCausalLM": [  # Gemma 2's soft caps and windows, on its sandwich-norm stack
        {"residual": "sandwich", "norm": "rms", "positions": "rope", "ffn": "geglu", "attention": "softcap",
         "attn_softcap": 2.0, "logits": "softcap", "logit_softcap": 3.0, "window": 5, "kv_heads": 2},
        {"residual": "sandwich", "norm": "rms", "positions": "rope", "ffn": "swiglu", "embeddings": "tied"},
    ],
}


def _id(v: Any) -> str:
    return v if isinstance(v, str) else ",".join(f"{k}={w}" for k, w in v.items())


@pytest.mark.parametrize(("family", "fields"), [(f, x) for f, xs in FAMILIES.items() for x in xs], ids=_id)
def test_each_family_computes_ablates_logits_and_greedy_tokens(family: str, fields: dict[str, Any],
                                                               tmp_path: Path) -> None:
    model, spec = lm(output_bias=family == "CTRLLMHeadModel", **fields)
    theirs = hf_model(model, spec, tmp_path)
    assert type(theirs).__name__ == family
    ids = torch.randint(4, VOCAB, (3, 48), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        ours, hf = model(ids), theirs(ids).logits
    assert ours.shape == hf.shape
    assert (ours - hf).abs().max().item() < 1e-4
    prompt = ids[0, :6].tolist()
    mine = generate(model, prompt, 12, greedy=True)
    out = theirs.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                          pad_token_id=0)
    assert out[0, len(prompt):].tolist() == mine


def test_the_layout_changes_are_permutations() -> None:
    assert rope_order(6).tolist() == [0, 2, 4, 1, 3, 5]  # ablate's pair (2i, 2i+1) -> Llama's (i, i + 3)
    assert sorted(ctrl_order(8).tolist()) == list(range(8))


@pytest.mark.parametrize(("fields", "component"), [
    ({"residual": "post_norm"}, "model.residual: post_norm"),
    ({"norm": "custom"}, "model.norm: custom"),
    ({"positions": "alibi"}, "model.positions: alibi"),
    ({"attention": "qk_norm"}, "model.attention: qk_norm"),
    ({"logits": "softcap"}, "model.logits: softcap"),
    ({"window": 8}, "model.window: 8"),
    ({"positions": "rope", "norm": "rms", "ffn": "linear"}, "model.ffn: linear"),
])
def test_a_variant_no_class_computes_is_refused_naming_it(fields: dict[str, Any], component: str) -> None:
    model, spec = lm(**fields)
    with pytest.raises(ExportRefused) as refused:
        to_transformers(model, spec)
    line = str(refused.value)
    assert line.startswith(component) and "\n" not in line


def test_a_trained_output_bias_goes_to_ctrl_or_is_refused() -> None:
    model, spec = lm(output_bias=True, positions="learned")  # GPT-2's shape with a trained output bias
    with pytest.raises(ExportRefused, match=r"^model.output_bias: true: .* GPT2LMHeadModel's lm_head has "
                                            r"none; train with model.output_bias: false"):
        to_transformers(model, spec)
    model, spec = lm(output_bias=True)  # sinusoidal, ReLU: CTRL has the bias
    assert to_transformers(model, spec).architecture == "CTRLLMHeadModel"
    with torch.no_grad():
        model.generator.bias.zero_()  # a bias that is exactly zero computes nothing: GPT-2 takes the model
    assert to_transformers(model, spec).architecture == "GPT2LMHeadModel"


def test_an_encoder_decoder_is_refused_with_the_reason() -> None:
    spec = ModelSpec.model_validate({"d_model": 16, "heads": 2, "d_ff": 32})
    from ablate.engine.builders import build_model

    with pytest.raises(ExportRefused, match="model.arch: encoder_decoder: not exported"):
        to_transformers(build_model(spec, 20, 20), spec)


LOAD_WITHOUT_ABLATE = """
import json, sys
sys.modules["ablate"] = None  # importing ablate now fails: the folder must stand alone
sys.modules["registry"] = None
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, text = sys.argv[1], sys.argv[2]
model = AutoModelForCausalLM.from_pretrained(folder).eval()
tok = AutoTokenizer.from_pretrained(folder)
ids = tok(text).input_ids
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits[0]
print(json.dumps({"ids": ids, "logits": logits.tolist(), "class": type(model).__name__,
                  "decoded": tok.decode(ids, skip_special_tokens=True), "bos": tok.bos_token_id,
                  "eos": tok.eos_token_id, "ablate": model.config.ablate}))
"""


@pytest.mark.soak  # trains a run and loads its export in a fresh interpreter
def test_an_exported_run_loads_in_transformers_alone(workdir: Path) -> None:
    spec = ExperimentSpec.model_validate({
        "name": "lm-export", "tracking": {"experiment": "lm-export"},
        "data": {"source": "synthetic", "document_lines": 4, "max_len": 32, "batch_tokens": 256,
                 "synthetic": {"task": "captions", "train_size": 200, "val_size": 20, "test_size": 20}},
        "model": {"arch": "decoder_only", "d_model": 16, "heads": 2, "d_ff": 32, "decoder_layers": 1,
                  "dropout": 0.0, "max_positions": 64},
        "train": {"max_steps": 4, "eval_every": 4, "schedule": {"warmup_steps": 1}},
        "eval": {"samples": 0},
    })
    result = run_experiment(spec, quiet=True)
    assert result.run_id is not None
    out = workdir / "hf"
    assert main(["export-model", result.run_id[:8], str(out), "--format", "hf"]) == 0
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json",
            "README.md"} <= {p.name for p in out.iterdir()}
    text = "a man in a blue shirt"
    shown = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_ABLATE, str(out), text], capture_output=True,
                           text=True, check=True)
    got = json.loads(shown.stdout)
    assert got["class"] == "CTRLLMHeadModel"  # the default LM: sinusoids, ReLU, a trained output bias
    run = __import__("ablate.run.translate", fromlist=["load_run_model"]).load_run_model(result.run_id)
    assert got["ids"] == [run.tok.bos_id, *run.tok.encode_tgt(text)]  # what the model was trained on
    assert got["decoded"] == run.tok.decode_tgt(got["ids"])
    with torch.no_grad():
        ours = run.model(torch.tensor([got["ids"]]))[0]
    assert (ours - torch.tensor(got["logits"])).abs().max().item() < 1e-4
    meta = got["ablate"]
    assert meta["run_id"] == result.run_id and meta["spec_hash"] == spec.spec_hash
    assert (got["bos"], got["eos"]) == (run.tok.bos_id, run.tok.eos_id)
    card = (out / "README.md").read_text()
    assert result.run_id in card and "CTRLLMHeadModel" in card
    # a second export into the same folder needs --force; a refused one leaves nothing
    assert main(["export-model", result.run_id, str(out)]) == 2
    bad = workdir / "bad"
    assert main(["export-model", "lm-export:baseline:x", str(bad)]) == 2
    assert not bad.exists()


def test_a_cell_reference_is_study_variant_seed() -> None:
    with pytest.raises(Exception, match="STUDY:VARIANT:SEED"):
        resolve_run_or_cell("study:variant:notaseed")
    assert record.SEED == "ablate.seed"
