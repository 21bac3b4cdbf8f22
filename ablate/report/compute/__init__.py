"""What a report computes from a study's runs: numbers and verdicts, never text for a reader.

``loaded_study`` (the study read back from MLflow), ``statistics``, ``comparisons``, ``val_and_test``,
``arm_verdicts``, ``scale_outcomes``, ``contrasts``, ``expected_validation``, ``sentence_bootstrap``,
``bounds``, ``logged_datasets``, ``fitted_ladder`` (a ladder's fits, transfer verdicts, per-rung verdicts,
backtest, decision accuracy and signal-to-noise). The sections (``ablate.report.sections``) read these;
nothing here imports a section.
"""
