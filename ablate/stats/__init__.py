"""The statistics floor: pure numbers in, verdicts out, and the one place where any verdict is decided.

Owns a comparison's effect at fixed seeds (``fixed_sample``: seed means with Student-t intervals, the paired
and Welch t-tests, bootstrap percentile intervals and exact permutation tests for 2-3 seeds), a family's
corrections (``multiplicity``: Holm's step-down and Bonferroni's), the pairs a comparison is judged on
(``pairing``: per seed, the variant minus the baseline, a diverged cell counted against its side), the group-
sequential looks and the walk through them (``sequential``: Pocock boundaries, the paired t statistic, the
design of looks), every word a verdict is stated in (``vocabulary``: one enum per question a verdict answers),
the verdicts (``verdict``: whether a look answers its claim's question, what a comparison's looks say,
fixed-sample verdicts, the test split beside the validation verdict, a verdict at a larger scale), a published
result judged on that evidence (``claims``) and the power of a design by simulating the procedure a study runs
(``power``); and whether a learning-rate search's best rate moves with the width (``best_rate_shift``: muP's
transfer question, a shift of the best log2 rate with a jackknife-t or seed-bootstrap interval, not a
comparison's looks); a ladder's fits of each variant's metric against training compute (``ladder_law``: a
saturating power law or a log-linear curve, intervals from resampling seeds within rungs) and each
comparison's transfer verdict, read from its measured rungs (``transfer``, ``rung_trend``), with every fit's
lack-of-fit test and rung-level variance (``ladder_fit``), the rolling backtests and the per-comparison
decision accuracy and signal-to-noise (``backtest``), the rules' simulated error rates (``ladder_rates``)
and a ladder plan's power on those rules (``simulated_rules``);
Wen et al.'s speedup in data and its trend with size (``data_speedup``); the seeds a new study needs at the
observed effect (``replication_size``), borderline verdicts (``borderline``) and steps to a target with
censored runs (``censored``); the best learning rate's power law in parameters across a tuned ladder's rungs
(``lr_power_law``).

May import: ``ablate.spec`` (a claim's question and margin) and numpy/scipy; nothing else of ablate. The
floors above read it: ``ablate.study`` decides its rounds with it, ``ablate.report`` states what it
decided.
"""
