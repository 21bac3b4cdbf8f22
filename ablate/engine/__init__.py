"""The model and its training, without any tracking.

Owns model assembly from the registry: the component factory (``components``), the two thin builders
(``builders``), the encoder-decoder skeleton (``encoder_decoder``), the decoder-only one (``decoder_only``)
and the choice between them by ``model.arch`` (``dispatch``), with controlled initialisation (``init``:
every parameter drawn from a generator seeded by (seed, name, shape)) and the parametrisation applied after
it (``parametrise``: muP's multipliers against a base model) and its coordinate check (``coord_check``), the
AMP trainer (``trainer``), its loss (``token_loss``: the generator and the cross-entropy a chunk of rows at
a time), the float32 CPU products of Linear layers and loss through oneDNN where MKL is the slower library
(``cpu_gemm``), what each parameter is to the optimizer (``param_roles``: roles, the no-decay rule, muP's
per-group rates) and the average of its weights it evaluates beside the best checkpoint (``averaging``:
last-k or EMA), stopping cleanly on a signal (``preempt``), atomic checkpoints (``checkpoint``), greedy and
KV-cached beam decoding (``decode``), evaluation with BLEU / chrF / exact match (``evaluate``, ``metrics``)
and progress, timing and memory readings (``progress``); the decoder-only language model's perplexity
evaluation and cached sampling (``lm_eval``), behind lm-evaluation-harness's model interface (``harness``,
the optional interop extra), and as the standard transformers class that computes the same function
(``hf_mapping``: which class, or a refusal naming the component; ``hf_weights``: its config and
weights); a run's training compute, its parameters without embeddings, tokens and FLOPs (``compute``,
Kaplan et al. 2020's formula); cells of one shape trained as one stacked model (``packed_model``: the
stacked parameters, folded rows, what cannot pack; ``cell_rng``: each cell's random state;
``packed_step``: each optimizer's step over the stacked parameters; ``packed_fold``: the cells'
batches folded; ``packed_eval``: their validation losses in one forward; ``packed_trainer``: the cells'
trainers in lockstep).
Devices and precisions are the leaf module ``ablate.hardware``'s, which
every layer may use.

May import: ``registry``, ``ablate.spec``, ``ablate.data``, ``ablate.errors``. Never mlflow or optuna:
the trainer reports through an :class:`~ablate.engine.trainer.EvalHook`, and whoever runs it records.
"""
