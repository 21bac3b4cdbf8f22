"""One spec -> one tracked run, and the commands that use a finished run.

Owns ``ablate run`` (``runner``: the steps of one run, seeds, resume from checkpoints, the MLflow record
of one run through ``ablate.tracking``; ``distributed``: torchrun and the device; ``rundir``: the run
folder and its summary; ``lock``: one process per run folder; ``evaluation``: the best checkpoint on whole
val/test), ``ablate translate`` /
``ablate evaluate`` over a run read back from MLflow (``translate``; a language model's perplexity on one's
own held-out text: ``heldout``; lm-evaluation-harness tasks: ``downstream``, which ``evaluation`` also
calls for ``eval.downstream``), ``ablate generate`` (``generate``) and ``ablate export-model``
(``export_model``: a run as a Hugging Face transformers model folder); ``--study STUDY --best`` for
evaluate, translate and generate, the study's best cell (``best_cell``). Cells of one shape trained as one
pack, each still its own run (``packed_run``), and the probe of whether packing pays here (``pack_probe``).

May import: ``ablate.spec``, ``ablate.data``, ``ablate.engine``, ``ablate.tracking``, ``ablate.errors``.
"""
