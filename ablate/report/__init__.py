"""Comparison reports read back from MLflow: ``ablate report``.

Owns reading a study into tables (``data``), the statistics of its verdicts (``stats``: paired tests,
bootstrap and permutation for few seeds, Holm correction, factorial effects), figures (``figures``), the
Markdown / HTML rendering (``render``), and the report, assembled by ``build`` (the command) from one
``part`` per section (``part``: what a section returns and reads), each in a module named for its concept:
``setup``, ``published`` (published results a study checks), ``summary``, ``results`` (axes, results,
effects), ``seeds`` (the verdicts of a study with adaptive seeds), ``factorial``, ``curves``, ``costs``,
``failures``, ``attention`` (heat maps), ``search`` (search studies) and ``environment`` (data, hardware,
code; the datasets grouped by digest in ``datasets``). ``bounds`` finds a quality metric at its floor or
ceiling.

May import: ``ablate.spec``, ``ablate.data``, ``ablate.engine`` (attention heat maps of a logged
model), ``ablate.tracking`` (reading runs back), ``ablate.study.sequential`` (the sequential verdicts the
study stopped by: one implementation for both), ``ablate.errors``. Never optuna: a search is read from
what ``ablate.study`` logged to MLflow.
"""
