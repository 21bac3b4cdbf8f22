"""Where a study's cells run: the launch floor, above ``ablate.study``.

Owns the commands that start studies and searches on this machine (``study_command``: `ablate study`'s
entry, local or ``--slurm``; ``local_study``: the study's workers here; ``tune_command``: `ablate tune`),
the local worker processes and their share of the cores (``local_workers``), which GPU each worker trains
on (``gpu_placement``), SLURM jobs through submitit (``slurm_submit``: checking the stores and
submitting; ``slurm_job``: one job's worker loop and its requeue on preemption; ``slurm_queue``: the jobs
a study submitted and their states), how long a study will take (``wall_time``: from finished cells, else
from ``cell_probe``, which measures every part of a cell as the study's workers will share the machine),
where a study stands (``status``: `ablate status`) and the command that resumes an interrupted one
(``resume``).

May import: every layer below it: ``ablate.spec``, ``ablate.data``, ``ablate.engine``,
``ablate.tracking``, ``ablate.run``, ``ablate.stats``, ``ablate.study``, and the leaf modules. The study
floor never imports this one: it is handed a :class:`~ablate.study.worker_pool.WorkerPool`.
"""
