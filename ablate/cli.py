"""The `ablate` command: parses arguments and calls the module that does the work (imported lazily).

Every command is one entry of `COMMANDS` (its arguments, and the function that does the work, called
with keyword arguments by `dispatch`): the spec commands (list, show, schema) in `ablate.spec.commands`,
validate (the specs, their data files, a study's design) in `ablate.study.validate_study`, the others in
the packages that do the work (`ablate.run`, `ablate.study`, `ablate.tracking`, `ablate.report`,
`ablate.bench`).
A user error (bad spec, bad data) prints its message lines and exits 2 with no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ablate import __version__
from ablate.errors import AblateError, storage_problem

EPILOG = """\
examples:
  ablate validate experiments/*.yaml            check specs (file:line for every problem)
  ablate run experiments/quickstart.yaml        train one model, tracked in ./mlflow.db
  ablate study experiments/ablations/x.yaml     train every variant x seed of a study (alias: ablate ablate)
  ablate report STUDY                           compare the variants of a study (STUDY: its spec or name)
  ablate report STUDY --format latex            its effects as a booktabs table for a paper (or csv)
  ablate export STUDY --out DIR                 its finished cells as files; `ablate import DIR` reloads
  ablate export-model RUN DIR --format hf       a run as a transformers model (AutoModelForCausalLM)
  ablate ui [STUDY]                             browse the runs in MLflow (127.0.0.1:5000)
  ablate -q COMMAND ... / ablate COMMAND -v ... quieter / also what MLflow and datasets print
"""


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec field, e.g. --set model.d_model=256 (value read as YAML; repeatable)",
    )


def _add_workers(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers", type=int, default=None, metavar="N",
        help="parallel worker processes, spread round robin over the visible GPUs (default 1; with "
        "--slurm: in each job)",
    )
    parser.add_argument(
        "--workers-per-gpu", dest="workers_per_gpu", type=int, default=None, metavar="K",
        help="K workers (K cells at once) on each visible GPU, for cells too small to fill one; "
        "without --workers: K x the GPUs",
    )


def _add_storage(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage",
        metavar="URL",
        help="Optuna/study storage shared by workers: a journal file path (default: a local "
        "file next to the runs) or a postgresql:// URL for several machines",
    )


# ---------------------------------------------------------------- each command's arguments
# Every dest is the name of the handler's parameter it fills: handlers are called with keyword arguments
# (``dispatch``), so an argument can never reach the wrong parameter.
def _validate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("specs", nargs="+", metavar="SPEC", help="YAML spec file(s)")
    _add_set(p)


# The axes `ablate list` groups by (registry/<axis>.py; plugins may add more): named in its help without
# importing the registry, which imports torch. tests/test_cli_ux.py keeps the two in step.
LIST_KINDS = ("residual", "positions", "ffn", "activation", "norm", "mask", "attention", "embeddings",
              "embedding_dropout")


def _list_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "kind", nargs="?", help=f"a kind ({', '.join(LIST_KINDS)}, or a plugin's) or a name pattern"
    )
    p.add_argument("pattern", nargs="?", default="*",
                   help="shell-style name pattern, e.g. 'c*' or -inf (names may start with '-')")


def _show_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec_path", metavar="SPEC", help="a YAML spec file")
    _add_set(p)


def _schema_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="FILE", help="write it to FILE instead of stdout")


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec_path", metavar="SPEC", help="the YAML spec of the run")
    _add_set(p)
    p.add_argument("--wait", action="store_true", help="wait for another process training it, not exit 2")
    p.add_argument("--restart", action="store_true", help="from step 0 (a new MLflow run), no checkpoints")


def _add_run(p: argparse.ArgumentParser) -> None:
    """RUN_ID, or --study STUDY --best (the study's best cell by its metric)."""
    p.add_argument("run_id", metavar="RUN_ID", nargs="?", help="MLflow run id or prefix (`ablate runs`)")
    p.add_argument("--study", metavar="STUDY", help="with --best: a spec file, name or parent run id")
    p.add_argument("--best", action="store_true", help="with --study: its best finished cell by its metric")


def _translate_args(p: argparse.ArgumentParser) -> None:
    _add_run(p)
    p.add_argument("text", metavar="TEXT", nargs="?", help="a sentence (default: --input, or stdin)")
    p.add_argument("--input", dest="input_path", metavar="FILE", help="every line of FILE ('-': stdin)")
    p.add_argument("--beam", type=int, default=None, metavar="N", help="beam size (default: the run's spec)")


def _generate_args(p: argparse.ArgumentParser) -> None:
    _add_run(p)
    p.add_argument("--prompt", default="", help="the text to continue (default: from the start)")
    p.add_argument("--max-new", dest="max_new", type=int, default=64, metavar="N", help="tokens to add")
    p.add_argument("--greedy", action="store_true", help="the most likely token each step")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1)")
    p.add_argument("--top-k", dest="top_k", type=int, metavar="K", help="sample among the K likeliest")
    p.add_argument("--seed", type=int, default=0, help="the sampling generator's seed")


def _evaluate_args(p: argparse.ArgumentParser) -> None:
    _add_run(p)
    p.add_argument("--src", dest="src_path", metavar="FILE", help="translation run: sources, one a line")
    p.add_argument("--ref", dest="ref_path", metavar="FILE", help="translation run: references, one a line")
    p.add_argument("--text", dest="text_path", metavar="FILE",
                   help="language-model run: held-out text (.gz read too), cut into documents as the run's "
                   "spec cuts its own")
    p.add_argument("--beam", type=int, default=None, metavar="N", help="beam size (default: the run's spec)")
    p.add_argument("--tasks", default=None, metavar="T1,T2", help="language-model run: lm-evaluation-harness "
                   "tasks (hellaswag,arc_easy, or tasks of --include): acc, acc_norm, bpb")
    p.add_argument("--include", dest="include_path", default=None, metavar="DIR", help="task YAML folder")
    p.add_argument("--fewshot", type=int, default=0, metavar="K", help="few-shot examples per task")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="at most N documents per task")


def _export_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("ref", metavar="RUN_OR_STUDY_CELL", help="a run id (or prefix), or STUDY:VARIANT:SEED")
    p.add_argument("out_dir", metavar="DIR", help="the folder to write")
    p.add_argument("--format", default="hf", choices=("hf",), help="hf: a transformers folder")
    p.add_argument("--force", action="store_true", help="replace DIR if it holds files")


def _ui_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", metavar="STUDY", nargs="?", help="open on this study (spec file, name, run id)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=5000, help="port (default 5000)")


def _runs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experiment", metavar="NAME", help="only this MLflow experiment (study)")


def _ablate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec_path", metavar="SPEC", help="the study's YAML spec (its ablation section)")
    _add_set(p)
    _add_workers(p)
    _add_storage(p)
    p.add_argument("--dry-run", action="store_true", help="print the cells (variant x seed), their packs, "
                   "where the workers would train and an estimated wall time, and exit")
    p.add_argument("--retry-failed", action="store_true",
                   help="run failed cells again (diverged cells are results and stay)")
    p.add_argument("--pack", metavar="K", help="train up to K cells of one shape as one stacked model, each "
                   "its own run (1: never); default: up to 8 where a short probe shows it pays here")
    _slurm_args(p.add_argument_group("SLURM (through submitit; docs/scaling.md)"))


def _slurm_args(g: Any) -> None:
    g.add_argument("--slurm", action="store_true",
                   help="submit the study's workers as SLURM jobs sharing --storage (a PostgreSQL URL or a "
                   "journal file every node sees); with --dry-run: print the sbatch parameters")
    g.add_argument("--jobs", type=int, default=1, metavar="N", help="SLURM jobs to submit (default 1)")
    g.add_argument("--partition", metavar="NAME", help="SLURM partition")
    g.add_argument("--gpus-per-job", dest="gpus_per_job", type=int, default=0, metavar="G",
                   help="GPUs of each job (default 0); its workers spread over them")
    g.add_argument("--cpus-per-job", dest="cpus_per_job", type=int, default=None, metavar="C",
                   help="CPUs of each job, shared by its workers' torch threads")
    g.add_argument("--time", metavar="TIME", help="each job's time limit (minutes, HH:MM:SS, D-HH:MM; "
                   "default 60 min); the job requeues itself before it")
    g.add_argument("--sbatch", action="append", default=[], metavar="KEY=VALUE",
                   help="another sbatch option, passed through as --KEY=VALUE (repeatable), e.g. "
                   "--sbatch account=abc --sbatch qos=normal")


def _status_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec_path", metavar="STUDY", help="the study's spec file, or its name")
    _add_set(p)
    _add_storage(p)


def _tune_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec_path", metavar="SPEC", help="the search's YAML spec (its search section)")
    _add_set(p)
    _add_workers(p)
    _add_storage(p)
    p.add_argument("--trials", type=int, metavar="N", help="number of trials (default: the spec's)")


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", metavar="STUDY",
                   help="the study's spec file, its study name or parent run id (its MLflow experiment or "
                   "parent run)")
    p.add_argument("--out", metavar="DIR", help="output folder (default reports/STUDY)")
    p.add_argument("--format", dest="table_format", choices=("latex", "csv"), action="append",
                   help="also write the effects as a table for a paper: effects.tex (booktabs: Δ, interval, "
                   "seeds, verdict, the test split beside it) or effects.csv, the same rows; give it twice "
                   "(--format latex --format csv) for both from one build of the report; a report in the "
                   "folder built from the study as it stands is reused, not rebuilt")
    p.add_argument("--no-links", dest="links", action="store_false", help="report.html without run links")


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", metavar="STUDY", help="the study's spec file, its study name or parent run id")
    p.add_argument("--out", metavar="DIR", help="output folder (default reports/STUDY/export)")


def _import_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", metavar="DIR", help="a folder written by `ablate export`")
    _add_storage(p)


def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec_path", nargs="?", metavar="SPEC",
                   help="spec to benchmark (default: a built-in config)")
    _add_set(p)
    p.add_argument("--json", dest="as_json", action="store_true", help="print results as JSON")
    p.add_argument("--quick", action="store_true", help="a few iterations only (smoke test)")


# ---------------------------------------------------------------- the command table
@dataclass(frozen=True)
class Command:
    """One subcommand: its help line, its arguments, and the function that does the work, named as
    (module, function) so that its module is imported only when the command runs."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    module: str  # relative to this package, e.g. ".run.runner"
    function: str
    aliases: tuple[str, ...] = ()  # other names the command answers to (help shows the name)


# In the order `ablate --help` lists them.
COMMANDS: tuple[Command, ...] = (
    Command("validate", "check spec files, the data files they name and a study's every variant and rung, "
            "print their hashes; every problem as FILE:LINE: field: why",
            _validate_args, ".study.validate_study", "cmd_validate"),
    Command("list", "list the registered components (with their one-line docs), grouped by kind",
            _list_args, ".spec.commands", "cmd_list"),
    Command("show", "print the resolved spec (defaults, extends and --set applied) as YAML with its hash",
            _show_args, ".spec.commands", "cmd_show"),
    Command("schema", "print the spec's JSON Schema (for editor completion and checking)",
            _schema_args, ".spec.commands", "cmd_schema"),
    Command("run", "train and evaluate one model from a spec, tracked in MLflow",
            _run_args, ".run.runner", "main_run"),
    Command("translate", "translate TEXT (or every line of --input FILE / standard input) with the best "
            "checkpoint of an MLflow run", _translate_args, ".run.translate", "main_translate"),
    Command("generate", "continue a prompt with the best checkpoint of a decoder-only MLflow run",
            _generate_args, ".run.generate", "main_generate"),
    Command("evaluate", "score an MLflow run's best checkpoint on a new test set: a translation run's "
            "sacreBLEU BLEU and chrF (--src, --ref), a language model's perplexity and bits per byte "
            "(--text) or its downstream tasks through lm-evaluation-harness (--tasks)",
            _evaluate_args, ".run.translate", "main_evaluate"),
    Command("export-model", "write a decoder-only run's best checkpoint as a Hugging Face transformers model "
            "folder (the standard class that computes the same function, or a refusal naming the component)",
            _export_model_args, ".run.export_model", "main_export_model"),
    Command("ui", "the MLflow UI on the local store (127.0.0.1); a study opens on its report, linked to runs",
            _ui_args, ".tracking", "main_ui"),
    Command("runs", "list tracked runs with their status and main metrics",
            _runs_args, ".tracking", "main_runs"),
    Command("study", "run an ablation study: every variant x seed of the spec's ablation section (also "
            "`ablate ablate`)", _ablate_args, ".launch.study_command", "main_launch", aliases=("ablate",)),
    Command("status", "show which cells of a study are done, running, failed or pending",
            _status_args, ".launch.status", "main_status"),
    Command("tune", "hyper-parameter search (Optuna) over the spec's search space",
            _tune_args, ".launch.tune_command", "main_tune"),
    Command("report", "write a comparison report (tables, figures, significance) for a study",
            _report_args, ".report.build", "main_report"),
    Command("export", "write a study's finished cells to a small folder (no checkpoints) to commit",
            _export_args, ".study.export_study", "main_export"),
    Command("import", "recreate an exported study in this MLflow store and Optuna storage",
            _import_args, ".study.export_study", "main_import"),
    Command("bench", "throughput benchmark of the model against torch.nn.Transformer",
            _bench_args, ".bench.suite", "main_bench"),
)
COMMAND = {name: c for c in COMMANDS for name in (c.name, *c.aliases)}
GLOBAL_DESTS = ("command", "verbose", "quiet")  # parsed for every command, passed to none
# What other libraries print unless --verbose: MLflow's INFO lines ("Creating initial MLflow database
# tables...", one per new store, and its run links) and the "Generating ... split" progress bars of
# datasets, a dozen per prepared corpus. Environment variables, so study workers and torchrun's processes
# inherit them; a value the user set wins.
QUIET_ENV = {"MLFLOW_LOGGING_LEVEL": "WARNING", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
QUIET_PROGRESS = "ABLATE_QUIET"  # -q: set to 1, training shows no progress


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ablate",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
        description="Controlled ablation studies of Transformer design choices: encoder-decoder translation "
        "models and decoder-only language models, from a YAML spec to a report.",
    )
    parser.add_argument("--version", action="version", version=f"ablate {__version__}")
    _add_verbosity(parser, top=True)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser, then one subparser per entry of ``COMMANDS`` with its own arguments."""
    parser = _top_parser()
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for c in COMMANDS:
        p = sub.add_parser(c.name, aliases=list(c.aliases), help=c.help, description=c.help)
        p.set_defaults(command=c.name)  # an alias runs the command of its name
        c.arguments(p)
        _add_verbosity(p, top=False)
    return parser


def _add_verbosity(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """-v/-q before the command (top) or after it; after it they leave a flag given before alone."""
    unset: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="store_true", **unset,
                       help="also show what MLflow and datasets print (INFO lines, progress bars)")
    group.add_argument("-q", "--quiet", action="store_true", **unset,
                       help="no training progress lines or bars (results and errors still print)")


def quiet_libraries(quiet: bool = False) -> None:
    """Keep the terminal to ablate's own lines (see QUIET_ENV); also for libraries imported already (a
    caller of `main` in the same process)."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    if quiet:
        os.environ[QUIET_PROGRESS] = "1"  # read by ablate.engine.progress, here and in workers
    if "mlflow" in sys.modules:
        logging.getLogger("mlflow").setLevel(os.environ["MLFLOW_LOGGING_LEVEL"].upper())
    datasets = sys.modules.get("datasets")
    if datasets is not None and os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "1":
        datasets.disable_progress_bars()


# ---------------------------------------------------------------- dispatch
OPTIONAL_EXTRAS = {"transformers": "interop", "safetensors": "interop", "lm_eval": "interop"}  # extras

def handler(command: Command) -> Callable[..., Any]:
    """The command's function, its module imported now (lazily: `ablate list` never imports torch)."""
    try:
        mod = importlib.import_module(command.module, __package__)
    except ModuleNotFoundError as exc:
        extra = OPTIONAL_EXTRAS.get((exc.name or "").split(".")[0])
        if extra is not None:
            raise AblateError(f"this command needs {exc.name}: pip install 'ablate[{extra}]'") from None
        if not (exc.name or "").startswith("ablate."):
            raise  # a missing third-party dependency: the traceback says which
        raise AblateError(f"this command needs {exc.name}, which is missing from this build") from None
    fn: Callable[..., Any] = getattr(mod, command.function)
    return fn


def handler_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed arguments as the handler's keyword arguments (each dest names a parameter)."""
    return {k: v for k, v in vars(args).items() if k not in GLOBAL_DESTS}


def dispatch(args: argparse.Namespace) -> int:
    """Call the command's handler with keyword arguments: the one place a handler is called."""
    return int(handler(COMMAND[args.command])(**handler_arguments(args)) or 0)


GLOBAL_FLAGS = ("-v", "--verbose", "-q", "--quiet")


def _list_names_may_start_with_dash(argv: list[str]) -> list[str]:
    """`ablate list mask -inf`: mask names look like options to argparse; mark them as positionals."""
    start = next((i for i, arg in enumerate(argv) if arg not in GLOBAL_FLAGS), len(argv))
    if argv[start:start + 1] != ["list"] or "--" in argv:
        return argv
    head, rest = argv[:start + 1], argv[start + 1:]
    for i, arg in enumerate(rest):
        if arg.startswith("-") and arg not in ("-h", "--help", *GLOBAL_FLAGS):
            return [*head, *rest[:i], "--", *rest[i:]]
    return argv


def _is_user_error(exc: BaseException) -> bool:
    """AblateError, or the registry's RegistryError (registry/ cannot import ablate, so it has its own)."""
    if isinstance(exc, AblateError):
        return True
    registry = sys.modules.get("registry")  # imported by whatever raised it; never imported here for this
    return registry is not None and isinstance(exc, registry.RegistryError)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `ablate` console script and of `python -m ablate`; returns the exit code."""
    argv = _list_names_may_start_with_dash(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    if args.verbose and args.quiet:
        print("error: give -v or -q, not both", file=sys.stderr)
        return 2
    if not args.verbose:
        quiet_libraries(args.quiet)
    try:
        code = dispatch(args)
        sys.stdout.flush()  # inside the try: a reader that went away is noticed here, not at exit
        return code
    except BrokenPipeError:  # `ablate list | head -1`: the reader has what it wanted
        _silence_stdout()
        return 0
    except Exception as exc:
        storage = storage_problem(exc)  # a full or read-only disk: one line, exit 1, the run resumable
        if storage is not None:
            exc = storage
        elif not _is_user_error(exc):
            raise
        for line in str(exc).splitlines() or [type(exc).__name__]:
            print(f"error: {line}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    except KeyboardInterrupt:
        from ablate.engine import preempt

        print(f"interrupted by {preempt.signal_name()}", file=sys.stderr)
        return preempt.exit_code()


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the interpreter flushes it once more at exit, and a closed pipe would
    fail that flush with a second BrokenPipeError (and exit code 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file descriptor (a test's capture): nothing to flush
        pass
