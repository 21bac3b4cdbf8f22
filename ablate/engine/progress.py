"""What a run shows while it trains and what it costs: the progress display and the peak memory meter."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from ablate.hardware import release_freed_memory
from ablate.spec import metricnames

EXPECTED_AFTER_S = 5.0  # training seconds measured before the run's expected time is said


class Progress:
    """A tqdm bar on a terminal; plain periodic lines (no carriage returns) when stderr is not a TTY.

    ``total`` is the planned number of optimizer steps (max_steps, epochs x steps per epoch, or the smaller
    of both); ``start_step`` the step a resumed run starts from, so the rate and ETA count only the steps of
    this process, not the ones done before a restart.
    """

    def __init__(self, total: int | None, start_step: int = 0, enabled: bool = True,
                 every_s: float = 10.0) -> None:
        self.enabled = enabled and os.environ.get("ABLATE_QUIET") != "1"  # `ablate -q`
        self.total = total
        self.start_step = start_step
        self.every_s = every_s
        self.started = time.monotonic()
        self.last_line: float | None = None
        self.expected_said = False  # the run's expected time on this machine, said once
        self.bar: Any = None
        if self.enabled and sys.stderr.isatty():
            self.bar = tqdm(total=total, initial=start_step, unit="step", dynamic_ncols=True)

    def eta_s(self, step: int) -> float | None:
        """Seconds left at this process's rate; None before a step is done or without a planned total."""
        done = step - self.start_step
        if not self.total or done <= 0:
            return None
        rate = done / max(time.monotonic() - self.started, 1e-9)
        return max(0.0, (self.total - step) / rate)

    def expected(self, step: int) -> str | None:
        """'expected: about 1.6 min for its 1000 steps on this machine (2 threads), evaluations aside', once
        EXPECTED_AFTER_S of this process's training has passed; None before, after or without a total."""
        elapsed = time.monotonic() - self.started
        if self.expected_said or not self.total or elapsed < EXPECTED_AFTER_S or step <= self.start_step:
            return None
        self.expected_said = True
        whole = elapsed * (self.total - self.start_step) / (step - self.start_step)
        shown = f"{whole / 60:.1f} min" if whole >= 90 else f"{whole:.0f} s"
        threads = torch.get_num_threads()
        return (f"expected: about {shown} for its {self.total - self.start_step} steps on this machine "
                f"({threads} CPU thread{'s' * (threads != 1)}), evaluations aside")

    def update(self, step: int, loss: float, lr: float, tps: float) -> None:
        if not self.enabled:
            return
        if (said := self.expected(step)) is not None:
            if self.bar is not None:
                self.bar.write(said)
            else:
                print(said, file=sys.stderr, flush=True)
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tps:,.0f}", refresh=True)
            return
        now = time.monotonic()
        if self.last_line is not None and now - self.last_line < self.every_s:
            return
        self.last_line = now
        eta = self.eta_s(step)
        total = f"/{self.total}" if self.total else ""
        line = (f"step {step}{total}: loss {loss:.4f} lr {lr:.2e} {tps:,.0f} tok/s"
                + (f" eta {eta:.0f}s" if eta is not None else ""))
        print(line, file=sys.stderr, flush=True)

    def note(self, step: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        text = "  ".join(f"{k} {v:.4g}" for k, v in sorted(metrics.items()))
        if self.bar is not None:
            self.bar.write(f"step {step}: {text}")
        else:
            print(f"step {step}: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class PeakMemory:
    """Peak memory of one run, not of the whole process (a study worker trains several cells in one).

    CUDA: ``max_memory_allocated`` after ``reset_peak_memory_stats``. CPU on Linux: writing "5" to
    ``/proc/self/clear_refs`` resets the process's high-water mark (``VmHWM`` in ``/proc/self/status``) to
    its current resident set, so the reading covers this run only. Elsewhere: ``ru_maxrss``, the process's
    lifetime peak (an upper bound), and ``per_run`` is False.

    ``peak_memory_mb`` still counts what the process held when the run started (the interpreter, imports,
    and in a study worker whatever earlier cells left behind: measured growing from 1,275 MB at a worker's
    first Multi30k cell to 2,528 MB at its eleventh), so it tells a cell's place in its worker as much as
    its variant. ``run_memory_mb`` is the run's own footprint: the peak above the memory held at
    :meth:`reset` (resident set on a CPU, allocated memory on CUDA), what the reports' cost columns show.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.per_run = False
        self.start_mb: float | None = None

    def reset(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.per_run = True
            self.start_mb = torch.cuda.memory_allocated(self.device) / 2**20
            return
        release_freed_memory()  # what an earlier run in this process freed is not this run's peak
        try:
            Path("/proc/self/clear_refs").write_text("5")
            hwm = vm_hwm_kib()
            self.per_run = hwm is not None
            self.start_mb = None if hwm is None else hwm / 1024  # right after the reset: the resident set
        except OSError:
            self.per_run = False

    def peak_mb(self) -> float | None:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        if self.per_run:
            hwm = vm_hwm_kib()
            if hwm is not None:
                return hwm / 1024
        try:
            import resource  # lazy: POSIX only (Windows has no resource module)

            # ru_maxrss is in KiB on Linux: the process's peak resident set since it started.
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        except (ImportError, OSError):
            return None

    def metrics(self) -> dict[str, float]:
        peak = self.peak_mb()
        if peak is None:
            return {}
        if not self.per_run or self.start_mb is None:
            return {metricnames.PEAK_MEMORY: peak}
        return {metricnames.PEAK_MEMORY: peak, metricnames.RUN_MEMORY: max(0.0, peak - self.start_mb)}


def vm_hwm_kib() -> int | None:
    """This process's resident-set high-water mark (``VmHWM``, KiB), None where there is no /proc."""
    try:
        found = re.search(r"^VmHWM:\s+(\d+)\s+kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) if found else None
