"""Many runs of one spec: ablation studies and Optuna searches, as cells and trials in one Optuna store.
The only package that imports optuna.

An ablation study (``ablate study``): its plan (``designs``: one_at_a_time, full_factorial and variants
expanded into cells, each a run; ``study_plan``: the planned study, its cells and its design;
``derived_specs``: a cell or trial is the baseline spec with dotted fields overridden, and the search space
over them; ``study_names``: readable Optuna study names), its start and end (``ablation``: the queue, the
parent run, the rounds and arms, the grid of outcomes; ``parent_run``: the study's parent MLflow run;
``recorded_study``: what the study states about itself for its report, written once to that run), the
queue of cells that runs each once (``cell_queue``), **where a cell is trained** (``train_cells``: one cell,
the worker loop, the rounds of an arm; ``cell_runs``: a cell's run options and its trial's end; packs of
cells of one shape: ``pack_plan``, which pack and how many, ``pack_cells``, a worker's pack), which cells
the next round of adaptive seeds needs (``seed_rounds``),
the precision every cell runs at (``precision``) and stopping on a repeated failure (``failfast``);
``ablate validate``, a study's design expanded as its dry run expands it (``validate_study``). The
worker processes are handed in from ``ablate.launch`` (``worker_pool``).

Sizing a study before its first cell: the noise and cell times of a pilot study (``pilot``), the power
plan, ``seeds.max: auto``, the plan's hours and the scale notes (``sizing``, on ``ablate.stats.power``),
and the design recorded before the first cell and never moved (``preregister``); once its own seeds exist,
what a new study would need at the effects they found (``observed_needs``). Tuning each variant and
confirming at a larger scale: the arms (``arms``), their settings checked with the plan
(``arm_settings``), each variant's search (``variant_searches``), the own-best arm's target where it
decides by steps to a loss (``tuned_target``) and the confirmation cells
(``confirm``). A ladder of model sizes (``ablation.scales``): its rungs, their steps and planned compute
(``rungs``), its rounds, one sub-plan per rung paired by seed within it (``rung_rounds``), its
power plan, rung by rung from a pilot ladder (``sized_ladder``), its fairness checked (``ladder_checks``:
one scaling rule, matched sizes, a grid that tunes) and every variant tuned at every rung
(``ladder_tuning``), the rungs above the smallest on a grid from below or at the smallest rung's rate under
muP (``rung_rates``), once muP's own transfer check passed (``mup_check``). A search
(``ablate tune``): its trials (``search``) and what it leaves behind (``tune_results``: best trial,
best.yaml, importances, figures). What all of these coordinate through: the Optuna trial store shared
by processes or machines (``optuna_store``: journal file or PostgreSQL; ``optuna_attrs``: the names of
its study and trial attributes). ``ablate export`` / ``ablate import`` of a study's finished cells
(``export_study``) and of its searches (``export_searches``).

Every verdict, the study's rounds' and the report's, is decided in ``ablate.stats``, the floor below.

May import: ``ablate.spec``, ``ablate.data``, ``ablate.engine``, ``ablate.tracking``, ``ablate.run``,
``ablate.stats``, and the leaf modules. Never ``ablate.launch`` (the floor above).
"""
