"""Stop a study or a search whose first runs all fail the same way.

A missing data folder or a spec that cannot be built fails every trial (or cell) identically: running
all N of them to learn that costs the whole budget and prints N copies of one error. When the first
`FIRST` failures of a study, before any success, carry the same error, the worker that saw the second
one stores that message in the Optuna study (`STOP`), puts the failed trials back in the queue (so the
same command, once the cause is fixed, runs them without ``--retry-failed`` and without spending budget)
and every worker stops claiming. The command prints the message as one line and exits 2. Failures that
differ per trial (a sampled point that cannot train) stay per trial: the study goes on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from ablate.study.optuna_attrs import ERROR, RETRY_HISTORY, STATUS, STOP
from ablate.study.optuna_store import Store, requeue

FIRST = 2


def _normalised(error: str) -> str:
    # The same failure names its own trial or cell folder: compare without it.
    return re.sub(r"trial[- ]\d+", "trial-N", error)


def repeated_failure(trials: Sequence[FrozenTrial]) -> tuple[str, list[FrozenTrial]] | None:
    """The error shared by the first FIRST failed trials when no trial succeeded before them."""
    failed: list[FrozenTrial] = []
    retried = {n for t in trials for n in t.system_attrs.get(RETRY_HISTORY, [])}  # queued again: anew
    for t in sorted(trials, key=lambda t: t.number):
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            return None
        if t.state == TrialState.FAIL and t.user_attrs.get(STATUS) == "failed" and t.number not in retried:
            failed.append(t)
            if len(failed) == FIRST:
                break
    errors = {_normalised(str(t.user_attrs.get(ERROR) or "")) for t in failed}
    if len(failed) < FIRST or len(errors) != 1 or not next(iter(errors)):
        return None
    message = " ".join(str(failed[0].user_attrs[ERROR]).split())  # one line, whatever the error held
    return message, failed


def stop_if_repeated(study: optuna.Study | None, store: Store) -> str | None:
    """After a failed trial: stop the study if its first failures repeat one error; the reason, or None
    (also without a study: nothing to stop)."""
    if study is None:
        return None
    with store.lock(study.study_name):
        reason = study.user_attrs.get(STOP)
        if reason:
            return str(reason)
        found = repeated_failure(study.get_trials(deepcopy=False))
        if found is None:
            return None
        message, failed = found
        for t in failed:
            requeue(study, t)
        study.set_user_attr(STOP, message)
        return message


def stopped(study: optuna.Study | None) -> str | None:
    reason = study.user_attrs.get(STOP) if study is not None else None
    return str(reason) if reason else None


def clear(study: optuna.Study | None) -> None:
    """A new command on the study: the cause may be fixed, so try again."""
    if study is not None and study.user_attrs.get(STOP):
        study.set_user_attr(STOP, None)
