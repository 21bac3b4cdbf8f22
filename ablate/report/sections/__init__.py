"""One module per report section: ``part(inp: Inputs) -> Part | None`` reads computed results
(``ablate.report.compute``) and renders them; none decides a verdict (``ablate.study.verdict`` does).

``setup``, ``forest_plot``, ``published``, ``summary``, ``main_table``, ``seeds``, ``own_best``,
``tuning_budget``, ``larger_scale``, ``sampling``, ``factorial``, ``curves``, ``lengths``, ``costs``,
``compute_hours``, ``failures``, ``attention_maps``, ``trials`` and ``environment``, listed in the order
they appear in ``ablate.report.build``'s ``ABLATION_PARTS`` and ``SEARCH_PARTS``.
"""
