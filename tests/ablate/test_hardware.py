"""ablate.hardware: the CPU allocator setting `ablate run` applies before training on a CPU."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Three training steps of a classifier head whose (1024, 16384) float32 logits take 64 MB, above glibc's
# 32 MB mmap ceiling, as the Multi30k cell's (tokens x vocab) logits do; prints the minor page faults of
# three more steps with glibc's defaults, then of three steps after `keep_freed_memory_in_process`. In a
# child process: the setting is process-wide.
PROBE = textwrap.dedent("""
    import resource, sys, torch
    import torch.nn.functional as F
    from ablate.hardware import keep_freed_memory_in_process

    torch.manual_seed(0)
    head = torch.nn.Linear(32, 16384)
    x, y = torch.randn(1024, 32), torch.randint(0, 16384, (1024,))

    def faults_of_three_steps():
        for _ in range(6):  # three to warm up, three counted
            if _ == 3:
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            head.zero_grad(set_to_none=True)
            F.cross_entropy(head(x), y, label_smoothing=0.1).backward()
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    default = faults_of_three_steps()
    if not keep_freed_memory_in_process():
        sys.exit(3)  # not glibc: nothing to test
    print(default, faults_of_three_steps())
""")
PAGES_64MB = 64 * 1024 * 1024 // 4096


def test_kept_memory_trains_without_page_faults_on_freed_logits() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    if out.returncode == 3:
        pytest.skip("not glibc: the setting does not apply")
    assert out.returncode == 0, out.stderr
    default, kept = map(int, out.stdout.split())
    assert default > 3 * PAGES_64MB  # the control: each step's logits and gradients came back as new pages
    assert kept < PAGES_64MB // 16  # freed blocks reused: (next to) no page touched for the first time
