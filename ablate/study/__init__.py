"""Many runs of one spec: ablation studies and Optuna searches. The only package that imports optuna.

Owns ``ablate ablate`` (``ablation``: the command; ``plan``: designs -> cells, each a run; ``names``:
variant labels; ``cells``: the queue of cells that runs each once; ``rounds``: the workers' rounds;
``parent``: the study's parent run; ``precision``: the precision every cell of a study runs at;
``failfast``: stopping on a repeated failure; ``status``: ``ablate status``), ``ablate tune``
(``search``, ``space``: the search space over spec fields, ``findings``: best trial, importances,
figures), and what both coordinate through: the Optuna trial store shared by processes or machines
(``optuna_store``: journal file or PostgreSQL; ``attrs``: the names of its study and trial attributes) and
local worker processes (``workers``). Adaptive seeds: which cells a study still needs (``adaptive``) by the
group-sequential statistics of ``sequential``; every verdict, the study's and the report's, is decided in
``verdict`` (pure numpy/scipy, no optuna: ``ablate.report`` imports both to state the same verdicts).
Sizing a study before its first cell: the power of its procedure by simulation (``power``), the noise and
cell times of a pilot study (``pilot``), the plan, ``seeds.max: auto`` and the scale notes (``sizing``),
wall time from cell times (``walltime``), and the design recorded before the first cell and never moved
(``preregister``).
Tuning each variant and confirming at a larger scale: the arms (``arms``), their settings checked with the
plan (``arm_settings``), each variant's search (``variant_searches``) and the confirmation cells
(``confirm``). ``ablate export`` / ``ablate import`` of a study's finished cells (``export_study``) and of
its searches (``export_searches``).

May import: ``ablate.spec``, ``ablate.data``, ``ablate.engine``, ``ablate.tracking``, ``ablate.run``,
``ablate.errors``, ``ablate.dburl``.
"""
