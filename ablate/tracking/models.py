"""The model of a run: `log_model` logs it with ``mlflow.pytorch`` (an MLflow Model, listed under the run's
logged models), `load_model` loads it back for decoding.

Safety (``torch.load(..., weights_only=True)`` only). An MLflow pytorch model is a pickled module:
``mlflow.pytorch.load_model`` unpickles it with ``weights_only=False`` (MLflow 3.17 allows that unless
``MLFLOW_ALLOW_PICKLE_DESERIALIZATION=false``) and imports the pickle module the model folder names, so
loading one runs whatever code the store holds. MLflow's safe format, ``serialization_format="pt2"`` (a
``torch.export`` graph), cannot carry ablate's model: the decoder's masking and KV cache are data-dependent,
and an exported graph keeps only ``forward``, not the ``encode``/``decode`` steps that decoding calls.

So the MLflow model of an ablate model (either architecture: `Seq2SeqTransformer` or `DecoderOnlyLM`) also
carries two extra files: its state dict
(``extra_files/state_dict.pt``) and the builder's arguments (``extra_files/ablate_model.json``: the
ModelSpec, vocabulary sizes, pad id). `load_model` rebuilds the model with
`ablate.engine.dispatch.build_any` and loads the weights with ``weights_only=True``, never touching the
pickle. Any other module comes back only through the pickle, which `load_model` refuses unless
``allow_pickle=True`` (a store you trust). ablate's own checkpoints (the ``checkpoints/best.pt`` artifact
that ``ablate translate`` uses) are loaded with ``weights_only=True`` too
(`ablate.engine.trainer.load_checkpoint`). """

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from ablate.errors import AblateError
from ablate.tracking.mlflow_store import _client, environment, quiet_transfers, use_uri

if TYPE_CHECKING:
    import torch

    from ablate.spec.experiment import ModelSpec

BUILD_FILE = "ablate_model.json"
WEIGHTS_FILE = "state_dict.pt"
EXTRA_DIR = "extra_files"  # where mlflow.pytorch puts a model's extra_files


def log_model(client: MlflowClient, run_id: str, experiment_id: str, tracking_uri: str,
              model: torch.nn.Module, *, name: str = "model", step: int = 0,
              model_spec: ModelSpec | None = None) -> str:
    """Log ``model`` with ``mlflow.pytorch`` into ``run_id``; an ablate model built from ``model_spec``
    also gets its weights and builder arguments (see the module docstring). Returns the ``models:/`` URI."""
    import mlflow.pytorch

    from ablate.engine.decoder_only import DecoderOnlyLM
    from ablate.engine.encoder_decoder import Seq2SeqTransformer

    env = environment()
    # Explicit requirements skip MLflow's inference, which re-imports the model in a subprocess.
    reqs = [f"{p}=={env[p]}" for p in ("torch", "mlflow") if env[p] != "unknown"]
    # The LoggedModel is created here so that it lands in this run's experiment: MLflow would pick the
    # fluent active experiment (Default, whose artifacts live in ./mlruns) since no fluent run is active.
    logged = client.create_logged_model(experiment_id, name=name, source_run_id=run_id)
    use_uri(tracking_uri)
    with tempfile.TemporaryDirectory() as tmp:
        extra = None
        if isinstance(model, Seq2SeqTransformer | DecoderOnlyLM) and model_spec is not None:
            extra = [str(p) for p in _write_weights(model, model_spec, Path(tmp))]
        # pickle, not MLflow's newer default 'pt2' (an exported graph): see the module docstring.
        info = mlflow.pytorch.log_model(model, name=name, run_id=run_id, step=step, model_id=logged.model_id,
                                        pip_requirements=reqs, serialization_format="pickle",
                                        extra_files=extra)
    return str(info.model_uri)


def _write_weights(model: Any, model_spec: ModelSpec, folder: Path) -> tuple[Path, Path]:
    import torch

    vocab = model.generator.out_features
    source = getattr(model, "src_embed", None)  # a decoder-only model has one vocabulary
    build = {"model": model_spec.model_dump(mode="json"),
             "src_vocab_size": source.num_embeddings if source is not None else vocab,
             "tgt_vocab_size": vocab, "pad_id": model.pad_id}
    build_path, weights_path = folder / BUILD_FILE, folder / WEIGHTS_FILE
    build_path.write_text(json.dumps(build, indent=2, sort_keys=True))
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, weights_path)
    return build_path, weights_path


def load_model(run_id: str, *, tracking_uri: str | None = None, map_location: str = "cpu",
               allow_pickle: bool = False) -> torch.nn.Module:
    """The last model `Tracker.log_model` logged in ``run_id``, in eval mode on ``map_location``.

    An ablate model is rebuilt from its builder arguments and weights (``weights_only=True``); any other
    module needs ``allow_pickle=True`` and is unpickled by ``mlflow.pytorch`` (trusted stores only).
    """
    client = _client(tracking_uri)
    try:
        run = client.get_run(run_id)
    except MlflowException as e:
        raise AblateError(f"no MLflow run {run_id} in {client.tracking_uri}: {e.message}") from None
    outputs = run.outputs.model_outputs if run.outputs else []
    if not outputs:
        raise AblateError(f"MLflow run {run_id} has no logged model (set tracking.log_model: true)")
    model_id = max(outputs, key=lambda o: o.step).model_id
    names = {Path(f.path).name for f in client.list_logged_model_artifacts(model_id, EXTRA_DIR)}
    if {BUILD_FILE, WEIGHTS_FILE} <= names:
        location = client.get_logged_model(model_id).artifact_location.rstrip("/")
        with tempfile.TemporaryDirectory() as tmp, quiet_transfers():
            files = [Path(mlflow.artifacts.download_artifacts(
                artifact_uri=f"{location}/{EXTRA_DIR}/{name}", dst_path=tmp,
                tracking_uri=client.tracking_uri)) for name in (BUILD_FILE, WEIGHTS_FILE)]
            return _rebuild(*files, map_location=map_location)
    if not allow_pickle:
        raise AblateError(f"the model of MLflow run {run_id} is a pickled module, not an ablate model with "
                          "its weights; load it with allow_pickle=True only from a store you trust")
    from mlflow.pytorch import load_model as unpickle_model

    use_uri(client.tracking_uri)
    return unpickle_model(f"models:/{model_id}", map_location=map_location)


def _rebuild(build_path: Path, weights_path: Path, *, map_location: str) -> torch.nn.Module:
    import torch

    from ablate.engine.dispatch import build_any
    from ablate.spec.experiment import ModelSpec

    build = json.loads(build_path.read_text())
    model = build_any(ModelSpec.model_validate(build["model"]), int(build["src_vocab_size"]),
                        int(build["tgt_vocab_size"]), pad_id=int(build["pad_id"]))
    state = torch.load(weights_path, map_location="cpu", weights_only=True)
    model.load_state_dict(state)  # strict: a spec that does not fit the weights is an error, not a guess
    return model.to(map_location).eval()
