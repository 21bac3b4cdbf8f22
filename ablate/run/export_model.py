"""`ablate export-model RUN_OR_STUDY_CELL DIR --format hf`: a tracked decoder-only run's best checkpoint as a
Hugging Face ``transformers`` model folder that ``AutoModelForCausalLM.from_pretrained(DIR)`` and
``AutoTokenizer.from_pretrained(DIR)`` load without ablate installed.

The folder holds ``config.json`` (the standard class ablate/engine/hf_mapping.py chose, with the run's id,
spec hash, study, variant and seed under ``ablate``), ``model.safetensors``, ``generation_config.json``
(bos, eos, pad; greedy), the run's tokenizer as ``tokenizer.json`` (its normalisation, the bos the run's
documents open with added by the post-processor, so ``tokenizer(text)`` gives the ids the model was trained
on) and a model card (``README.md``) saying where the model comes from and what was folded to map it.

``RUN_OR_STUDY_CELL``: an MLflow run id (or a unique prefix), or a study's cell as
``STUDY:VARIANT:SEED`` (``gqa-docs:kv_heads=2:401``). Needs the ``interop`` extra
(``pip install 'ablate[interop]'``: transformers and safetensors).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import transformers
from tokenizers import Tokenizer, normalizers, processors

from ablate.data.tokenize import Tokenizers
from ablate.engine.hf_mapping import HFModel, to_transformers
from ablate.errors import AblateError
from ablate.run.translate import RunModel, load_run_model
from ablate.tracking import read, record, resolve_run_id

FORMATS = ("hf",)


def resolve_run_or_cell(ref: str) -> str:
    """A run id from a run id (or a unique prefix) or from ``STUDY:VARIANT:SEED``."""
    if ":" not in ref:
        return resolve_run_id(ref)
    study, _, rest = ref.partition(":")
    variant, _, seed = rest.rpartition(":")
    if not study or not variant or not seed.isdigit():
        raise AblateError(f"{ref!r}: a study cell is STUDY:VARIANT:SEED (e.g. gqa-docs:kv_heads=2:401), and "
                          "a run is its MLflow id")
    return read.cell_run_id(study, variant, int(seed))


def provenance(run_id: str, spec_hash: str) -> dict[str, Any]:
    """What the exported config records of the run (``config.ablate``)."""
    tags = read.run_tags(run_id)
    seed = tags.get(record.SEED)
    return {"run_id": run_id, "spec_hash": tags.get(record.SPEC_HASH, spec_hash),
            "study": tags.get(record.STUDY), "variant": tags.get(record.VARIANT),
            "seed": int(seed) if seed is not None and seed.isdigit() else None}


def hf_tokenizer(tok: Tokenizers) -> Tokenizer:
    """The run's (target) tokenizer as ``transformers`` will run it: ablate's normalisation (strip, and
    lowercase where the data was lowercased) in front of its own, and bos before every text."""
    out = Tokenizer.from_str(tok.tgt.to_str())
    steps = [normalizers.Strip()] + ([normalizers.Lowercase()] if tok.lowercase else [])
    if out.normalizer is not None:
        steps.append(out.normalizer)
    out.normalizer = normalizers.Sequence(steps)
    bos = out.id_to_token(tok.bos_id)
    out.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                                       special_tokens=[(bos, tok.bos_id)])
    return out


def special_tokens(tok: Tokenizers) -> dict[str, Any]:
    names = {"pad": tok.pad_id, "bos": tok.bos_id, "eos": tok.eos_id, "unk": tok.unk_id}
    return {f"{k}_token": tok.tgt.id_to_token(v) for k, v in names.items() if v is not None}


def write_hf(run: RunModel, folder: Path, meta: dict[str, Any]) -> HFModel:
    """Map ``run``'s model (one line naming the component where no class computes it) and write the
    folder: written in a temporary folder beside it and moved into place, so a refusal or a failure
    leaves nothing."""
    mapped = to_transformers(run.model, run.spec.model)
    tok = run.tok
    ids = {"bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id, "pad_token_id": tok.pad_id}
    config = transformers.AutoConfig.for_model(mapped.model_type, **mapped.config, **ids,
                                               architectures=[mapped.architecture], ablate=meta)
    model = getattr(transformers, mapped.architecture)(config)
    model.load_state_dict(mapped.weights, strict=True)  # every weight of the class, named and shaped
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}.") as tmp:
        staging = Path(tmp) / "model"
        model.save_pretrained(staging)
        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=hf_tokenizer(tok),
                                                    model_max_length=run.spec.model.max_positions,
                                                    clean_up_tokenization_spaces=False, **special_tokens(tok))
        fast.save_pretrained(staging)
        transformers.GenerationConfig(**ids, do_sample=False).save_pretrained(staging)
        (staging / "README.md").write_text(model_card(mapped, meta, run))
        staging.rename(folder)
    return mapped


def model_card(mapped: HFModel, meta: dict[str, Any], run: RunModel) -> str:
    """The folder's README.md: Hub metadata, where the model comes from, how it maps."""
    spec = run.spec
    axes = ", ".join(f"{k} {getattr(spec.model, k)}" for k in ("residual", "norm", "positions", "ffn",
                                                              "activation", "attention", "embeddings"))
    lines = [
        "---", "library_name: transformers", "pipeline_tag: text-generation", "tags: [ablate]", "---", "",
        f"# {spec.name}: {meta.get('variant') or 'run'}, seed {meta.get('seed', spec.seed)}", "",
        "A decoder-only language model trained by ablate "
        f"({spec.description or spec.name}), exported as `{mapped.architecture}`, the standard class that "
        "computes the same function (logits within 1e-4 in fp32).", "",
        "| | |", "|---|---|",
        f"| MLflow run | `{meta['run_id']}` |", f"| spec hash | `{meta['spec_hash']}` |",
        f"| study | {meta.get('study') or '-'} |", f"| variant | {meta.get('variant') or '-'} |",
        f"| seed | {meta.get('seed')} |",
        f"| shape | d_model {spec.model.d_model}, {spec.model.decoder_layers} layers, "
        f"{spec.model.heads} heads, d_ff {spec.model.d_ff}, {spec.model.max_positions} positions |",
        f"| components | {axes} |", "",
        "Mapped:", "", *[f"- {n}" for n in mapped.notes or ["nothing folded: the weights as trained"]], "",
        "The tokenizer adds the bos token the run's documents opened with: `tokenizer(text)` gives the ids "
        "the model was trained on.", "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "model = AutoModelForCausalLM.from_pretrained(PATH)",
        "tok = AutoTokenizer.from_pretrained(PATH)",
        "out = model.generate(**tok('a man', return_tensors='pt'), max_new_tokens=20)",
        "```", "",
    ]
    return "\n".join(lines)


def main_export_model(ref: str, out_dir: str, format: str = "hf", force: bool = False) -> int:
    """`ablate export-model`: print where the model went and which class it is."""
    if format not in FORMATS:
        raise AblateError(f"--format {format!r}: accepted: {', '.join(FORMATS)}")
    folder = Path(out_dir)
    if folder.exists() and any(folder.iterdir()) and not force:
        raise AblateError(f"{folder}: not empty (give --force to replace it)")
    run_id = resolve_run_or_cell(ref)
    run = load_run_model(run_id)
    meta = provenance(run.run_id, run.spec.spec_hash)
    if folder.exists():
        to_transformers(run.model, run.spec.model)  # a refusal before anything is removed
        shutil.rmtree(folder)
    mapped = write_hf(run, folder, meta)
    params = sum(int(t.numel()) for t in mapped.weights.values())
    print(f"run {run.run_id} -> {folder} as {mapped.architecture} ({params:,} weights)")
    for note in mapped.notes:
        print(f"  {note}")
    print(f"  load: AutoModelForCausalLM.from_pretrained({json.dumps(str(folder))})")
    return 0


