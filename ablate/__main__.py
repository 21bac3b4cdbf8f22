"""`python -m ablate ...` (what `torchrun -m ablate run SPEC` starts in each process)."""

from ablate.cli import main

raise SystemExit(main())
