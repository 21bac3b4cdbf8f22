"""Many runs of one spec: ablation studies and Optuna searches. The only package that imports optuna.

Owns ``ablate ablate`` (``ablation``: designs -> cells, each a run), ``ablate tune`` (``search``,
``space``: the search space over spec fields, ``results``: best trial, importances, figures), and what
both coordinate through: the Optuna trial store shared by processes or machines (``store``: journal
file or PostgreSQL), the queue of cells that runs each once (``cells``) and local worker processes
(``workers``). Adaptive seeds: which cells a study still needs (``adaptive``) by the group-sequential
verdicts of ``sequential`` (pure numpy/scipy, no optuna: ``ablate.report`` imports it to state the same
verdicts). ``ablate export`` / ``ablate import`` of a study's finished cells (``transfer``).

May import: ``ablate.spec``, ``ablate.data``, ``ablate.engine``, ``ablate.tracking``, ``ablate.run``,
``ablate.errors``, ``ablate.dburl``.
"""
