"""Comparison reports read back from MLflow: ``ablate report``.

Owns reading a study into tables (``data``), the statistics of its verdicts (``stats``: paired tests,
bootstrap and permutation for few seeds, Holm correction, factorial effects), figures (``figures``),
the sections of ablation and search reports (``build``, ``extra``, ``seeds``: the verdicts of a study
with adaptive seeds) and their Markdown / HTML rendering (``render``).

May import: ``ablate.spec``, ``ablate.data``, ``ablate.engine`` (attention heat maps of a logged
model), ``ablate.tracking`` (reading runs back), ``ablate.study.sequential`` (the sequential verdicts the
study stopped by: one implementation for both), ``ablate.errors``. Never optuna: a search is read from
what ``ablate.study`` logged to MLflow.
"""
