"""ablate.hardware: the process settings `ablate run` applies before training: CPU allocator, CUDA sdpa."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Training steps of a classifier head whose (1024, 16384) float32 logits take 64 MB, above glibc's 32 MB
# mmap ceiling, as the Multi30k cell's (tokens x vocab) logits do. Prints the minor page faults of ten
# steps with glibc's defaults, then of ten steps after `keep_freed_memory_in_process` (each after ten
# warm-up steps), then the resident set before and after `release_freed_memory`. In a child process: the
# setting is process-wide.
PROBE = textwrap.dedent("""
    import resource, sys, torch
    import torch.nn.functional as F
    from ablate.hardware import keep_freed_memory_in_process, release_freed_memory

    torch.manual_seed(0)
    head = torch.nn.Linear(32, 16384)
    x, y = torch.randn(1024, 32), torch.randint(0, 16384, (1024,))

    def faults_of_ten_steps():
        for i in range(20):  # ten to warm up, ten counted
            if i == 10:
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            head.zero_grad(set_to_none=True)
            F.cross_entropy(head(x), y, label_smoothing=0.1).backward()
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    def resident_mb():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 // 2**20

    default = faults_of_ten_steps()
    if not keep_freed_memory_in_process():
        sys.exit(3)  # not glibc: nothing to test
    kept = faults_of_ten_steps()
    head.zero_grad(set_to_none=True)
    held = resident_mb()
    release_freed_memory()
    print(default, kept, held, resident_mb())
""")
PAGES_64MB = 64 * 1024 * 1024 // 4096


@pytest.fixture(scope="module")
def probe() -> tuple[int, int, int, int]:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    if out.returncode == 3:
        pytest.skip("not glibc: the settings do not apply")
    assert out.returncode == 0, out.stderr
    default, kept, held, released = map(int, out.stdout.split())
    return default, kept, held, released


@pytest.mark.slow  # a real study, training or subprocess (the fast tier stays under 3 minutes)
def test_kept_memory_trains_without_page_faulting_freed_logits_back(probe: tuple[int, int, int, int]) -> None:
    default, kept, _, _ = probe
    # The control: every step's logits and gradients came back as fresh pages (five 64 MB blocks a step).
    assert default > 10 * 3 * PAGES_64MB
    # Freed blocks reused: at most the odd growth of the heap (torch's aligned allocations do not always
    # fit a freed block) instead of every block of every step.
    assert kept < default / 10


def test_released_memory_goes_back_to_the_os(probe: tuple[int, int, int, int]) -> None:
    _, _, held, released = probe
    assert held - released > 3 * 64  # the freed logits and gradients the heap held (MB)


def test_a_cuda_run_keeps_attention_off_cudnn_and_a_cpu_run_leaves_the_backends_alone() -> None:
    # cuDNN's sdpa builds a plan per new batch shape (hardware.keep_attention_off_cudnn). The setting is
    # process-wide, so it is read in a child; torch.device("cuda") needs no GPU to be named.
    probe = textwrap.dedent("""
        import torch
        from ablate.hardware import prepare_device
        seen = [torch.backends.cuda.cudnn_sdp_enabled()]
        prepare_device(torch.device("cpu"))
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        prepare_device(torch.device("cuda"))
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        print(*seen)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "False"]


def test_a_cuda_run_multiplies_float32_through_tf32_and_says_so_a_cpu_run_in_ieee() -> None:
    # hardware.use_tf32 through prepare_device; the setting is process-wide, so it is read in a child (no GPU
    # is needed to set it or to name torch.device("cuda")).
    probe = textwrap.dedent("""
        import torch
        from ablate.hardware import fp32_matmul, prepare_device
        cuda, cpu = torch.device("cuda"), torch.device("cpu")
        prepare_device(cpu)
        seen = [fp32_matmul(cuda), fp32_matmul(cpu)]
        prepare_device(cuda)
        seen += [fp32_matmul(cuda), fp32_matmul(cpu), torch.backends.cuda.matmul.fp32_precision,
                 torch.backends.cudnn.conv.fp32_precision]
        print(*seen)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ieee", "ieee", "tf32", "ieee", "tf32", "tf32"]
