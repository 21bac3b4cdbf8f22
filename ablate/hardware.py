"""What this machine can run: the training device, fast bf16, and which precisions autocast supports.

Kept apart from the trainer (and free of heavy imports beyond torch) so that spec validation can reject a
precision the machine cannot run without importing the data pipeline.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from contextlib import AbstractContextManager as ContextManager
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from ablate.errors import AblateError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# The device a study worker trains on (``cuda:3``), set by the process that starts it
# (ablate/launch/gpu_placement.py): the environment carries it into spawned workers and SLURM jobs alike.
WORKER_DEVICE_ENV = "ABLATE_DEVICE"


def visible_gpus() -> list[int]:
    """The indices of the GPUs this process sees (CUDA_VISIBLE_DEVICES applied: a SLURM job's own)."""
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def default_device_type() -> str:
    """Where `ablate run` trains: the GPU when there is one, else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


@functools.cache
def _cpuinfo() -> str:
    """/proc/cpuinfo's text ("" where there is none: not Linux)."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


@functools.cache
def cpu_has_fast_bf16() -> bool:
    """AMX or AVX512-BF16 units make bf16 matmuls faster than fp32 on a CPU."""
    flags = _cpuinfo()
    return "amx_bf16" in flags or "avx512_bf16" in flags


# Which library multiplies the Linear layers' float32 matrices on a CPU (ablate/engine/cpu_gemm.py):
# "onednn" or "mkl"; unset, :func:`cpu_gemm_library` decides by the CPU.
CPU_GEMM_ENV = "ABLATE_CPU_GEMM"
CPU_GEMM_LIBRARIES = ("onednn", "mkl")


def _chosen_gemm_library() -> str:
    """``ABLATE_CPU_GEMM`` as written, trimmed and lower-cased ("" where unset)."""
    return os.environ.get(CPU_GEMM_ENV, "").strip().lower()


def cpu_gemm_problem() -> str | None:
    """What is wrong with ``ABLATE_CPU_GEMM`` (one line), or None when it is unset or names a library."""
    chosen = _chosen_gemm_library()
    if not chosen or chosen in CPU_GEMM_LIBRARIES:
        return None
    return f"found {os.environ[CPU_GEMM_ENV]!r}; accepted: {', '.join(CPU_GEMM_LIBRARIES)}"


@functools.cache
def cpu_gemm_library() -> str:
    """The library for float32 matrix products on this CPU: ``onednn`` where MKL leaves AVX-512 unused.

    torch's x86 wheels multiply float32 matrices with MKL, which runs its AVX-512 kernels on Intel CPUs
    only: on an AMD CPU with AVX-512 (Zen 4 and 5) it takes its AVX2 code, half the vector width. oneDNN,
    torch's other CPU library (bf16 products already run there), picks its kernels by instruction set.
    Measured on a 2-core AMD EPYC (Zen 5), torch 2.13.0: a Linear layer's forward and backward at the LM
    bench's shapes (2,048 rows, 256 x 1,024) ran at 193 GFLOP/s through MKL and 334 through oneDNN
    (docs/benchmarks.md). Elsewhere (Intel, AVX2-only or non-x86 CPUs) torch's own choice stands.
    ``ABLATE_CPU_GEMM=onednn|mkl`` overrides the rule (to time one against the other); a spec loaded for a
    run reports any other value before anything is written (:func:`cpu_gemm_problem`).
    """
    problem = cpu_gemm_problem()
    if problem is not None:
        raise AblateError(f"{CPU_GEMM_ENV}: {problem}")
    chosen = _chosen_gemm_library()
    if chosen:
        return chosen if torch.backends.mkldnn.is_available() else "mkl"
    info = _cpuinfo()
    amd_avx512 = "AuthenticAMD" in info and " avx512f" in info
    return "onednn" if amd_avx512 and torch.backends.mkldnn.is_available() else "mkl"


def free_cores() -> tuple[int, int]:
    """(cores free of other work, cores this process may use): the usable cores less the 1-minute load
    average, rounded (another job's busy core is one torch's threads would fight for), at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1, min(cores, cores - round(load))), cores


def busy_cores_note(device: str | None, quiet: bool) -> int | None:
    """With ``train.threads: 0`` on a CPU (``device``: the spec's ``train.device``), where other work leaves
    fewer cores free than torch's threads (two threads fighting a busy core for one of them ran the
    quickstart 15x slower), say so and how to train on the free ones; the free count, else None. The count
    is not changed here: a run's threads would then follow the machine's load, and a resumed run could take
    other threads than it started with."""
    if device not in (None, "cpu") or torch.cuda.is_available():
        return None
    free, cores = free_cores()
    if free >= torch.get_num_threads():
        return None
    if not quiet:
        threads = torch.get_num_threads()
        print(f"note: {cores - free} of {cores} cores are busy with other work and torch's {threads} threads "
              f"will fight for them: `--set train.threads={free}` trains on the {free} free "
              f"one{'s' * (free != 1)}", file=sys.stderr)
    return free


def cuda_has_native_bf16() -> bool:
    """bf16 in hardware (Ampere and later); older GPUs only emulate it, slower than fp16."""
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def resolve_precision(precision: str, device: torch.device) -> str:
    """`auto` -> bf16 where the hardware runs it fast, fp16 on older GPUs, fp32 on CPUs without bf16 units."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if cuda_has_native_bf16() else "fp16"
    return "bf16" if cpu_has_fast_bf16() else "fp32"


@functools.cache
def _autocast_runs(device_type: str, precision: str) -> bool:
    """Whether a Linear layer actually runs under autocast to `precision` on `device_type` (a tiny probe)."""
    try:
        layer = torch.nn.Linear(4, 4).to(device_type)
        with torch.autocast(device_type=device_type, dtype=_DTYPES[precision]):
            out = layer(torch.ones(2, 4, device=device_type))
        return bool(out.dtype == _DTYPES[precision])
    except (RuntimeError, AssertionError, ValueError):
        return False


def precision_problem(precision: str, device_type: str | None = None) -> str | None:
    """Why `precision` cannot run on this machine's training device, or None when it can."""
    device_type = device_type or default_device_type()
    if precision in ("auto", "fp32"):
        return None
    if device_type == "cuda" and precision == "bf16" and not cuda_has_native_bf16():
        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "this GPU"
        return f"{name} has no bf16 units (use fp16 or auto)"
    if not _autocast_runs(device_type, precision):
        return f"torch {torch.__version__} cannot autocast to {precision} on {device_type}"
    return None


def runnable_precisions(device_type: str | None = None) -> list[str]:
    """The precisions `precision_problem` accepts here, for the "accepted:" part of an error."""
    return [p for p in PRECISIONS if precision_problem(p, device_type) is None]


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


@functools.cache
def _glibc() -> Any:
    """The C library when it is glibc (mallopt, malloc_trim), else None."""
    name = ctypes.util.find_library("c")
    if name is None or "libc.so" not in name:
        return None
    try:
        libc = ctypes.CDLL(name)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


@functools.cache
def keep_freed_memory_in_process() -> bool:
    """Stop glibc from handing large freed blocks back to the OS; True where the setting took.

    glibc serves every allocation above 32 MB with its own mmap and unmaps it on free, so the next step's
    (tokens x vocab) logits, their log-softmax and gradients (131 MB each at 4096 tokens x 8000 BPE) are
    fresh pages that the kernel zeroes on first touch. On the Multi30k study cell as it was (2 CPU cores,
    4096-token batches) a train step took 2.11 s instead of 1.59 s, 8.9 s of system time in 12 steps
    against 0.1 s (scripts/step_speed.py). With mmap off and no trimming, freed blocks stay in the heap and
    later steps reuse them. The price: the heap keeps its high-water mark and, since torch's aligned
    allocations do not always fit a freed block exactly, grows a few times before it settles (a probe
    with 64 MB logits settled at 818 MB against 242 MB; Multi30k runs with 2048-token batches peaked at
    1.2-1.5 GB). Numerics are untouched. A no-op (False) off glibc; CUDA tensors are not malloc's.
    """
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def release_freed_memory() -> None:
    """Hand the heap's free pages back to the OS now (glibc ``malloc_trim``; a no-op elsewhere).

    With :func:`keep_freed_memory_in_process` the heap keeps its high-water mark, so a per-run peak of the
    resident set (a study worker trains several cells in one process) starts from this baseline.
    """
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def keep_attention_off_cudnn() -> None:
    """Take cuDNN out of the backends ``F.scaled_dot_product_attention`` picks from (CUDA only).

    cuDNN's attention, which only fp16 and bf16 reach, builds an execution plan for every (batch, length)
    shape it has not seen, reported at several tenths of a second each, forward and backward; a seen shape
    costs nothing more. Length-bucketed batches bring new shapes for hundreds of steps. Measured on one
    H200 (torch 2.11) before this setting: the Multi30k study cell in bf16 trained at 4,000 tokens/s over
    its first 50 steps and 30,500 by step 300 (running means), in fp32 at 79,000 and 125,000 over 480
    steps: the cost followed new shapes and only half precision paid it. Without cuDNN, sdpa runs the
    memory-efficient or flash kernel: the same function, with no per-shape setup. Measured after it, same
    machine: 108,000 tokens/s in bf16 against 122,000 in fp32 over the cell's 480 steps.
    """
    torch.backends.cuda.enable_cudnn_sdp(False)


def use_tf32() -> None:
    """Float32 matrix products and convolutions on a GPU through TF32 tensor cores (Ampere and later): inputs
    rounded to 10 mantissa bits, products summed in float32. What nanoGPT and torchtitan set: an fp32 run's
    matmuls about 8x the float32 rate on an A100 (NVIDIA's TF32 note), at a relative error of about 1e-3 per
    product (PyTorch's CUDA notes measured 0.0022 against 0.00004 in full float32 on a 10,240-square
    product). Under bf16 or fp16 autocast the matmuls run in half precision anyway. torch's newer settings
    (``fp32_precision``, torch 2.9 and later)."""
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.conv.fp32_precision = "tf32"  # type: ignore[attr-defined]  # not in the stubs


def fp32_matmul(device: torch.device) -> str:
    """How float32 matrix products run on ``device`` now: ``tf32`` or ``ieee`` (recorded on each run)."""
    if device.type == "cuda" and torch.backends.cuda.matmul.fp32_precision == "tf32":
        return "tf32"
    return "ieee"


def prepare_device(device: torch.device) -> None:
    """The process-wide settings a training run wants on `device`, set once before its first step."""
    if device.type == "cpu":
        keep_freed_memory_in_process()  # a fifth of a CPU step went to page faults on freed logits
    elif device.type == "cuda":
        keep_attention_off_cudnn()
        use_tf32()


def autocast_context(precision: str, device: torch.device) -> ContextManager[Any]:
    if precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)
