"""Comparison reports read back from MLflow: ``ablate report``.

Two halves, as the folders show:

- ``compute/``: what the report computes from the runs, never rendering: the study read back from MLflow
  (``loaded_study``), the statistics (``statistics``: seed means, paired and Welch tests, bootstrap and
  permutation for few seeds, Holm), each comparison's sequential verdict (``comparisons``), the validation
  verdict with the test split beside it and the regime (``val_and_test``), both arms of a tuned study
  (``arm_verdicts``), the verdicts at a larger scale (``scale_outcomes``), factorial effects
  (``contrasts``), expected validation performance (``expected_validation``), the sentence-level paired
  bootstrap (``sentence_bootstrap``), floor and ceiling (``bounds``) and the logged datasets
  (``logged_datasets``). Every verdict is decided by ``ablate.stats.verdict``.
- ``sections/``: one module per report section, each a ``part(inp) -> Part | None`` that reads computed
  results and renders them (``setup``, ``forest_plot``, ``published``, ``summary``, ``main_table``,
  ``seeds``, ``own_best``, ``tuning_budget``, ``larger_scale``, ``sampling``, ``factorial``, ``curves``,
  ``lengths``, ``costs``, ``compute_hours``, ``failures``, ``attention_maps``, ``trials`` (a search study),
  ``environment``, ``mde`` (what the design could settle) and ``withdrawn`` (superseded cells)).

Beside them: ``build`` (the command: assembles the parts in order), ``section_api`` (what a section
returns and reads), ``render`` (Markdown / HTML), ``plots`` (the figures, matplotlib) and ``paper`` (the
effects as a LaTeX or CSV table, from report.json: ``ablate report --format``) and ``freshness`` (whether a
folder's report was built from the study as it stands, so ``--format`` reuses it).

May import: ``ablate.spec``, ``ablate.data``, ``ablate.engine`` (attention heat maps of a logged
model), ``ablate.tracking`` (reading runs back), ``ablate.stats.sequential`` and ``ablate.stats.verdict``
(the sequential verdicts the study stopped by: one implementation for both) and ``ablate.stats.power``
(what a design could detect, for the plan table), ``ablate.errors``. Never
optuna: a search is read from what ``ablate.study`` logged to MLflow.
"""
