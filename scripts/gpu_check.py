"""The GPU check: train the quickstart with the variants whose implementation changed most recently in each
precision the trainer has, eager and compiled, and print one table (on a machine with CUDA).

    python scripts/gpu_check.py                      # every row below, ~5 minutes on one H100/H200
    python scripts/gpu_check.py --steps 400 --variants attention=qk_norm
    python scripts/gpu_check.py --spec experiments/multi30k-cell.yaml --steps 480 --variants baseline \
        --precisions fp32 bf16                           # the study cell (needs $ABLATE_DATA_DIR)

Each row is a whole `ablate run SPEC` (the quickstart unless --spec; tracking off) on cuda: its test exact
match (or BLEU, for a spec scored by it), train tokens/s and wall time as the run prints them. fp16 runs with
its GradScaler, bf16 without.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("baseline", "attention=qk_norm", "positions=alibi", "positions=t5_bias")
PRECISIONS = ("fp32", "bf16", "fp16")


def run(spec: Path, variant: str, precision: str, steps: int, compile_: bool) -> dict[str, str]:
    sets = ["tracking.enabled=false", f"train.precision={precision}", f"train.max_steps={steps}",
            f"train.out_dir=/tmp/gpu-check/{variant}-{precision}-{int(compile_)}"]
    if variant != "baseline":
        sets.append(f"model.{variant}")
    if compile_:
        sets.append("train.compile=true")
    args = [sys.executable, "-m", "ablate", "run", str(spec)]
    for s in sets:
        args += ["--set", s]
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    found = {"wall_s": f"{time.perf_counter() - start:.0f}", "rc": str(done.returncode)}
    patterns = {"test": "final/test/(?:exact_match|bleu)", "tokens_per_s": "final/train/tokens_per_s"}
    for name, pattern in patterns.items():
        m = re.search(rf"{pattern}\s+([\d,.]+)", done.stdout)
        found[name] = m.group(1) if m else "-"
    if done.returncode:
        found["error"] = (done.stderr.strip().splitlines() or ["?"])[-1][:120]
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "experiments" / "quickstart.yaml")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--precisions", nargs="*", default=list(PRECISIONS))
    ap.add_argument("--compile", nargs="*", default=["baseline:bf16"],
                    help="variant:precision pairs also run compiled (default baseline:bf16; bare: none)")
    a = ap.parse_args()
    rows = [(v, p, False) for v in a.variants for p in a.precisions]
    rows += [(*pair.split(":"), True) for pair in a.compile]  # type: ignore[misc]
    print(f"{'variant':<22}{'precision':<10}{'compiled':<9}{'test':>11}{'tokens/s':>10}{'wall s':>8}")
    for variant, precision, compiled in rows:
        r = run(a.spec, variant, precision, a.steps, compiled)
        print(f"{variant:<22}{precision:<10}{'yes' if compiled else 'no':<9}{r['test']:>11}"
              f"{r['tokens_per_s']:>10}{r['wall_s']:>8}" + (f"  rc {r['rc']}: {r['error']}"
                                                                       if r["rc"] != "0" else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
