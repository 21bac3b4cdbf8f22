"""One spec -> one tracked run, and the commands that use a finished run.

Owns ``ablate run`` (``runner``: seeds, devices, torchrun, resume from checkpoints, the MLflow record of
one run through ``ablate.tracking``, the run folder and its summary) and ``ablate translate`` /
``ablate evaluate`` over a run read back from MLflow (``translate``).

May import: ``ablate.spec``, ``ablate.data``, ``ablate.engine``, ``ablate.tracking``, ``ablate.errors``.
"""
