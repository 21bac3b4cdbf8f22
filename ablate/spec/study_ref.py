"""A study named on the command line: by its spec file or by its name (or its parent run's id).

The commands that read a study (`status`, `report`, `export`, `ui`) accept either; the commands that run one
(`study`, `tune`) take the spec. A spec names its study as its runs are tagged: ``tracking.experiment``,
else ``name``. A spec that sets ``tracking.uri`` also says where its runs are, unless MLFLOW_TRACKING_URI
says otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ablate.spec.load import load_spec

SPEC_SUFFIXES = (".yaml", ".yml")


def is_spec_file(arg: str) -> bool:
    """A spec file rather than a study's name: a YAML suffix, or an existing file."""
    return arg.endswith(SPEC_SUFFIXES) or Path(arg).is_file()


def study_name(arg: str, overrides: Sequence[str] = ()) -> str:
    """The study's name as its runs carry it (tag ``ablate.study``); a name or run id is returned as is."""
    if not is_spec_file(arg):
        return arg

    spec = load_spec(arg, list(overrides), check_hardware=False)  # read only: nothing trains here
    if spec.tracking.uri and not os.environ.get("MLFLOW_TRACKING_URI"):
        os.environ["MLFLOW_TRACKING_URI"] = spec.tracking.uri  # where this spec's runs are recorded
    return spec.tracking.experiment or spec.name
