"""One module per report section: ``part(inp: Inputs) -> Part | None`` reads computed results
(``ablate.report.compute``) and renders them; none decides a verdict (``ablate.stats.verdict`` does).

``ladder_verdicts`` (a ladder's figure, transfer table and "Across scales"), ``fair_ladder`` (its
rule, what each rung changes, each variant's best per rung), ``speedup_table`` (Wen et al.'s speedup in
data, on a ladder with data budgets), ``setup``, ``forest_plot``,
``mde`` (what the design could settle, beside what was found), ``published``, ``summary``, ``main_table``,
``downstream`` (lm-evaluation-harness scores beside the loss, with their signal-to-noise), ``seeds``,
``own_best``, ``reaching_target`` (steps to a target loss, censored), ``tuning_budget``,
``larger_scale``, ``sampling``, ``factorial``, ``curves``, ``lengths``,
``costs``, ``compute_hours``, ``failures``, ``attention_maps``, ``environment``, ``withdrawn``
(the appendix of superseded cells) and ``trials``, in the order they appear in a report. Each registers
its ``part`` where it is defined (``@section(place, reports)``, ablate/report/section_api.py), and
``ablate.report.build`` finds every module of this package.
"""
