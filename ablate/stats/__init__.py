"""The statistics floor: pure numbers in, verdicts out, and the one place where any verdict is decided.

Owns the pairs a comparison is judged on (``pairing``: per seed, the variant minus the baseline, a
diverged cell counted against its side), the group-sequential looks and the walk through them
(``sequential``: Pocock boundaries, the paired t statistic, the design of looks), the verdicts and their
vocabulary (``verdict``: whether a look answers its claim's question, what a comparison's looks say,
fixed-sample verdicts, the test split beside the validation verdict, a verdict at a larger scale), a
published result judged on that evidence (``claims``) and the power of a design by simulating the
procedure a study runs (``power``).

May import: ``ablate.spec`` (a claim's question and margin) and numpy/scipy; nothing else of ablate. The
floors above read it: ``ablate.study`` decides its rounds with it, ``ablate.report`` states what it
decided.
"""
