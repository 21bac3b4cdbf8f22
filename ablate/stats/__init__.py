"""The statistics floor: pure numbers in, verdicts out, and the one place where any verdict is decided.

Owns the pairs a comparison is judged on (``pairing``: per seed, the variant minus the baseline, a
diverged cell counted against its side), the group-sequential looks and the walk through them
(``sequential``: Pocock boundaries, the paired t statistic, the design of looks), the verdicts and their
vocabulary (``verdict``: whether a look answers its claim's question, what a comparison's looks say,
fixed-sample verdicts, the test split beside the validation verdict, a verdict at a larger scale), a
published result judged on that evidence (``claims``) and the power of a design by simulating the
procedure a study runs (``power``); and whether a learning-rate search's best rate moves with the width
(``best_rate_shift``: muP's transfer question, a shift of the best log2 rate with a seed-bootstrap interval,
not a comparison's looks); a ladder's fits of each variant's metric against training compute (``scaling``:
a saturating power law or a log-linear curve, intervals from resampling seeds within rungs) and each
comparison's transfer verdict, its prediction at a target compute and the backtest on the largest rung
(``transfer``); and the best learning rate's power law in parameters across a tuned ladder's rungs
(``lr_power_law``).

May import: ``ablate.spec`` (a claim's question and margin) and numpy/scipy; nothing else of ablate. The
floors above read it: ``ablate.study`` decides its rounds with it, ``ablate.report`` states what it
decided.
"""
