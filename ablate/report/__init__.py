"""Comparison reports read back from MLflow: ``ablate report``.

Owns reading a study into tables (``data``), the statistics of its verdicts (``stats``: paired tests,
bootstrap and permutation for few seeds, Holm correction, factorial effects), figures (``figures``),
the ablation report and the command (``build``), one module per further concept: the environment and
datasets (``environment``), full-factorial effects (``factorial``), search studies (``search``),
attention heat maps (``attention``), a quality metric at its floor or ceiling (``bounds``), the verdicts
of a study with adaptive seeds (``seeds``), and the Markdown / HTML rendering (``render``).

May import: ``ablate.spec``, ``ablate.data``, ``ablate.engine`` (attention heat maps of a logged
model), ``ablate.tracking`` (reading runs back), ``ablate.study.sequential`` (the sequential verdicts the
study stopped by: one implementation for both), ``ablate.errors``. Never optuna: a search is read from
what ``ablate.study`` logged to MLflow.
"""
