"""What a report computes from a study's runs: numbers and the verdicts ``ablate.stats`` decides, never text
for a reader. The only half of the report that reads the study and statistics floors.

``loaded_study`` (the study read back from MLflow), ``run_counts`` (each variant's runs and metric means),
``statistics`` (seed means, effects, Holm),
``comparisons`` (each comparison's sequential verdict, and the statistics floor's vocabulary for the
sections), ``val_and_test`` (the test split beside the validation verdict, the regime), ``arm_verdicts``
(both arms of a tuned study), ``scale_outcomes`` (verdicts at a larger scale), ``claim_evidence``
(the evidence for each published claim), ``detectable_effects`` (what the design could settle: the recorded
power plan, the effects the study's own seeds could detect, the forecast), ``heat_maps`` (attention maps of a
logged run, either architecture), ``contrasts`` (factorial effects), ``expected_validation``,
``sentence_bootstrap``, ``bounds``, ``logged_datasets``, ``rung_runs`` (a ladder's runs by rung) and
``fitted_ladder`` (a ladder's fits, transfer
verdicts, per-rung verdicts, rolling backtests, decision accuracy and signal-to-noise), ``tuned_speedups``
(Wen et al.'s speedup on a ladder with data budgets), ``tuned_ladder`` (a fair ladder's rule, fields
changed between rungs, and each variant's tuned best per rung) and ``metric_noise`` (each loss and
downstream metric's signal-to-noise ratio across seeds, rung by rung) and ``target_reach`` (steps to a
target loss: each arm's target, the tuned baseline's own where every variant ran at its own best, and runs
that never reach it censored). The sections
(``ablate.report.sections``) read these; nothing here imports a section.
"""
