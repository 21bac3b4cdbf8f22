"""The model and its training, without any tracking.

Owns model assembly from the registry with controlled initialisation (``model``), devices and
precisions (``hardware``: autocast, bf16/fp16 support), the AMP trainer (``train``), atomic checkpoints
(``checkpoint``), greedy and KV-cached beam decoding (``decode``), evaluation with BLEU / chrF / exact
match (``evaluate``, ``metrics``) and progress, timing and memory readings (``progress``); the
decoder-only language model (``lm``) with its perplexity evaluation and cached sampling (``lm_eval``).

May import: ``registry``, ``ablate.spec``, ``ablate.data``, ``ablate.errors``. Never mlflow or optuna:
the trainer reports through an :class:`~ablate.engine.train.EvalHook`, and whoever runs it records.
"""
