"""YAML -> a validated :class:`~ablate.spec.experiment.ExperimentSpec`.

Owns the spec's pydantic models (``experiment``: the whole spec, ``model``: its model section built from the
registry's axis declarations, ``axis_fields``: the fields, checks and identity of any section holding registry
axes, the model's and the recipe's, ``data``: corpora and tokenizers, ``train``: the recipe's optimizer,
schedule and loss sections, weight averaging and the trainer's settings, ``study_sections``: ablation and
search sections, ``ladder_section``: the ladder's ``ablation.scales``, ``harness_tasks``:
``eval.downstream``'s lm-evaluation-harness tasks, ``axis_levels``: ablation axes given as named levels,
``base``: strict field types and located cross-field failures), loading with ``extends:``, ``--set`` and
``${VAR}`` (``load``, ``yamlsrc``), the located one-line errors, the JSON Schema and the field guide generated
from the same source, docs/spec.md (``error_lines``, ``schema``, ``guide``, ``guide_examples``), the names of
the metrics a run reports (``metricnames``), the spec hash, a run's identity, and the commands that read specs
and the registry only (``commands``: ``ablate validate``, ``list``, ``show``, ``schema``) and a study named on
the command line by its spec or its name (``study_ref``).

May import: ``ablate.errors`` and ``registry`` (the model section names registry components). Nothing
else of ablate: every other layer reads the spec, the spec reads none of them.
"""
