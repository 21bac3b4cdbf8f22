"""Regenerate every committed report from its export, in a fresh store: `ablate import` then `ablate report`
into the report's own folder. After a change that must leave reports alone, `git diff reports/` then shows
only each report's date line (report.md, report.html, report.json; its report.html without links to the
runs, `--no-links`: the runs an import makes get new ids each time).

    python scripts/regenerate_reports.py            # every reports/*/export
    python scripts/regenerate_reports.py quick-axes  # only these
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def regenerate(name: str) -> int:
    """Import ``reports/<name>/export`` into a fresh folder's stores and write its report in place."""
    export, out = ROOT / "reports" / name / "export", ROOT / "reports" / name
    with tempfile.TemporaryDirectory(prefix=f"ablate-regen-{name}-") as work:
        for command in (["import", str(export)], ["report", name, "--out", str(out), "--no-links"]):
            done = subprocess.run([sys.executable, "-m", "ablate", *command, "-q"], cwd=work)
            if done.returncode != 0:
                print(f"{name}: `ablate {' '.join(command)}` exited {done.returncode}", file=sys.stderr)
                return done.returncode
    return 0


def main(names: list[str]) -> int:
    names = names or sorted(p.parent.name for p in (ROOT / "reports").glob("*/export"))
    codes = [regenerate(name) for name in names]
    return max(codes, default=0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="reports/<name> folders to regenerate (default: every one "
                        "with an export)")
    sys.exit(main(parser.parse_args().names))
