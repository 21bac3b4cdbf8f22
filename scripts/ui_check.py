"""Check what a person sees in `ablate ui`: a real small store in a real browser.

    python scripts/ui_check.py [--out DIR] [--keep] [--steps N]

In a fresh folder it runs a quickstart-size run and a 4-cell ablation study (residual pre/post-norm x
seeds 0, 1; a few dozen steps each), starts `ablate ui` on a free port, and loads in headless Chromium
(Debian's ``chromium``): the URLs `ablate ui` prints for the latest study (its landing page: the report
`ablate report` logged in the parent run, served beside the MLflow server with each variant linked to its
runs; the same report in MLflow's HTML view; its comparison: MLflow's runs page in its chart view, the
cells grouped by variant with their seeds pooled, on the deciding metric, on axes fitted to the cells'
values), the page a variant's link on the landing page opens, the study's parent run, a cell's run and the
single run. It asserts, on the pages' DOM (``--dump-dom``) and MLflow's REST API (what those pages
render), that the landing page shows the verdicts and links each variant to exactly its runs, that the
followed link lists that variant's runs and no other, that the comparison shows one group per variant and
the metric's charts on fitted axes and no parent run, that the runs are named ``variant · seed N``, both
seeds appear, the experiment opens in the model-training view (not the GenAI traces page) and the metric
the study ranks by is named. It saves a screenshot of each page under ``--out`` (default ``ui-check/``) for
a person to look at (docs/mlflow.md shows ``landing.png``, ``followed-link.png`` and ``comparison.png``),
then stops the UI with SIGTERM and checks that its MLflow server and landing page went with it. Exit code
0 when every check passes; 77 when chromium is missing (CI skips then).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY = "ui-study"
SKIP = 77
# this checkout's ablate, whatever the environment has installed; the folder's own store
ENV = {**os.environ, "MLFLOW_TRACKING_URI": "",
       "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def write_specs(folder: Path, steps: int) -> tuple[Path, Path]:
    quick = ROOT / "experiments" / "quickstart.yaml"
    every = max(1, steps // 2)
    common = (f"extends: {quick}\n"
              "data: {synthetic: {train_size: 800, val_size: 64, test_size: 64}}\n"
              f"train: {{max_steps: {steps}, eval_every: {every}, checkpoint_every: {every}}}\n")
    run = folder / "ui-run.yaml"
    run.write_text(f"{common}name: ui-run\ndescription: a quickstart-size run for the UI check\n"
                   "tracking: {experiment: ui-run}\n")
    study = folder / "ui-study.yaml"
    study.write_text(f"{common}name: {STUDY}\ndescription: pre- vs post-norm, two seeds (UI check)\n"
                     f"tracking: {{experiment: {STUDY}}}\n"
                     "ablation:\n  axes: {model.residual: [pre_norm, post_norm]}\n  seeds: [0, 1]\n")
    return run, study


def ablate(folder: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "ablate", *args], cwd=folder, capture_output=True, text=True,
                         env=ENV, check=False)
    if out.returncode != 0:
        raise SystemExit(f"ablate {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def api(base: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{base}/api/2.0/mlflow/{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as response:
        return json.loads(response.read())


class Links(HTMLParser):
    """A page's links to runs (``class="runs"``, not the line of links into MLflow above): (text, href)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a" and dict(attrs).get("class") == "runs":
            self._href, self._text = dict(attrs).get("href"), []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append(("".join(self._text), self._href))
            self._href = None


def browse(browser: str, url: str, shot: Path, budget_ms: int = 30000) -> str:
    """The page's DOM after ``budget_ms`` of virtual time, and its screenshot at ``shot``."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--no-first-run", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
             "--window-size=1800,1100", f"--virtual-time-budget={budget_ms}"]
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, *flags, f"--user-data-dir={profile}", f"--screenshot={shot}", url],
                       capture_output=True, timeout=180, check=False)
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run([browser, *flags, f"--user-data-dir={profile}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=180, check=False).stdout
    return dom


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="ui-check", help="folder for the screenshots")
    parser.add_argument("--keep", action="store_true", help="keep the store's folder (printed)")
    parser.add_argument("--store", metavar="DIR", help="reuse the folder a --keep run left (no training)")
    parser.add_argument("--steps", type=int, default=40,
                        help="training steps per run (the pages need runs, not trained models: the test "
                             "suite uses a few)")
    args = parser.parse_args(argv)
    browser = chromium()
    if browser is None:
        print("chromium not found (apt-get install -y chromium): skipped", file=sys.stderr)
        return SKIP
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    folder = Path(args.store) if args.store else Path(tempfile.mkdtemp(prefix="ablate-ui-check-"))
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
        if not ok:
            failures.append(what)

    if not args.store:
        run_spec, study_spec = write_specs(folder, args.steps)
        ablate(folder, "run", str(run_spec))
        ablate(folder, "study", str(study_spec))
        ablate(folder, "report", STUDY, "--out", str(folder / "report"))  # logged under report/ in the parent
    ui = subprocess.Popen([sys.executable, "-m", "ablate", "ui", "--port", "0"], cwd=folder,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=ENV)
    try:
        assert ui.stdout is not None
        lines: list[str] = []
        while not lines or "its parent run" not in lines[-1]:
            lines.append(ui.stdout.readline())
            if not lines[-1] or len(lines) > 12:
                break
        print("".join(lines), end="")
        text = "".join(lines)
        base = re.search(r"MLflow UI: (http://[0-9.:]+)", text)
        landing = re.search(r"latest .*linked to its runs\): (http://\S+)", text)
        report = re.search(r"the same report in MLflow .*: (http://\S+)", text)
        latest = re.search(r"its runs compared: (http://\S+)", text)
        parent_page = re.search(r"its parent run .*: (http://\S+)", text)
        check(None not in (base, landing, report, latest, parent_page),
              "`ablate ui` prints the UI, the latest study's landing page, its report in MLflow, its "
              "comparison and its parent run's URL")
        if base is None or landing is None or report is None or latest is None or parent_page is None:
            return 1
        url = base.group(1)
        check(f"ablation study {STUDY} (its report: verdicts" in lines[1] and "final/val/exact_match" in text,
              "the latest target is the study's report as its landing page, then its comparison on the "
              "metric it ranks by")
        check(not landing.group(1).startswith(url) and report.group(1).split("?")[0].endswith(
            "/artifacts/report/report.html"),
              "the landing page is served beside the MLflow UI; the report is also in the parent run's "
              "artifacts")
        check("viewStateShareKey=" in latest.group(1) and "compareRunsMode=CHART" in latest.group(1),
              "its comparison is a shared view of the runs page in its chart view")

        exps = {e["name"]: e for e in api(url, "experiments/search", {"max_results": 100})["experiments"]}
        exp = exps[STUDY]
        tags = {t["key"]: t["value"] for t in exp.get("tags", [])}
        check(tags.get("mlflow.experimentKind") == "custom_model_development",
              "the experiment is a model-training experiment (mlflow.experimentKind)")
        check(tags.get("mlflow.note.content", "").startswith("pre- vs post-norm"),
              "the spec's description is the experiment's description")
        runs = api(url, "runs/search", {"experiment_ids": [exp["experiment_id"]], "max_results": 100})["runs"]
        names = sorted(r["info"]["run_name"] for r in runs)
        want = sorted(f"{v} · seed {s}" for v in ("baseline", "residual=post_norm") for s in (0, 1))
        check([n for n in names if "seed" in n] == want, f"cells are named variant · seed N: {names}")
        parent = next(r for r in runs if r["info"]["run_name"] == STUDY)
        ptags = {t["key"]: t["value"] for t in parent["data"].get("tags", [])}
        check("ablate.seed" not in ptags and "ablate.spec_hash" not in ptags,
              "the study's parent run has no seed or spec hash")
        check("final/val/exact_match" in ptags.get("mlflow.note.content", ""),
              "the parent's description names the metric the study ranks by")
        child = next(r for r in runs if r["info"]["run_name"] == "residual=post_norm · seed 1")
        metrics = {m["key"] for m in child["data"]["metrics"]}
        check("final/val/exact_match" in metrics and "val/exact_match" in metrics,
              "a cell has the training-time curve and the final evaluation under distinct names")

        exp_id, parent_id = exp["experiment_id"], parent["info"]["run_id"]
        single_exp = exps["ui-run"]["experiment_id"]
        single = api(url, "runs/search", {"experiment_ids": [single_exp]})["runs"][0]
        ml = "?workflowType=machine_learning"
        check(parent_id in parent_page.group(1), "`ablate ui` links the study's parent run")
        with urllib.request.urlopen(landing.group(1), timeout=30) as response:
            page = response.read().decode()
        page_links = Links()
        page_links.feed(page)
        cells = {v: {r["info"]["run_id"] for r in runs if r["info"]["run_name"].startswith(f"{v} · ")}
                 for v in ("baseline", "residual=post_norm")}
        linked: dict[str, set[str]] = {}
        exp_tags = api(url, f"experiments/get?experiment_id={exp_id}")["experiment"].get("tags", [])
        views = {t["key"]: json.loads(t["value"]) for t in exp_tags
                 if t["key"].startswith("mlflow.sharedViewState.")}
        for name, href in page_links.links:  # each a shared view of the runs page: its filter, by variant
            route = href.removeprefix(f"{url}/#/experiments/{exp_id}/runs")
            key = urllib.parse.parse_qs(route.partition("?")[2])["viewStateShareKey"][0]
            view = views[f"mlflow.sharedViewState.{key}"]
            found = api(url, "runs/search", {"experiment_ids": [exp_id], "filter": view["searchFilter"]})
            linked.setdefault(name, set()).update(r["info"]["run_id"] for r in found.get("runs", []))
        check(linked == cells and all(h.startswith(f"{url}/#/") for _, h in page_links.links),
              f"the landing page links each variant to exactly its runs on this UI: {sorted(linked)}")
        followed = next(h for t, h in page_links.links if t == "residual=post_norm")
        pages = {
            "landing": landing.group(1),
            "followed-link": followed,
            "report": report.group(1),
            "comparison": latest.group(1),
            "study": parent_page.group(1),
            "study-runs": f"{url}/#/experiments/{exp_id}/runs{ml}",
            "cell-run": f"{url}/#/experiments/{exp_id}/runs/{child['info']['run_id']}{ml}",
            "single-run": f"{url}/#/experiments/{single_exp}/runs/{single['info']['run_id']}{ml}",
        }
        doms = {}
        for name, page in pages.items():
            # the comparison's charts draw after the runs' metric histories load: give them the time
            doms[name] = browse(browser, page, out / f"{name}.png",
                                {"comparison": 60000, "report": 120000, "landing": 5000,
                                 "followed-link": 60000}.get(name, 30000))
            print(f"     {name}: {page} -> {out / (name + '.png')}", flush=True)
        # MLflow shows an HTML artifact in a sandboxed iframe of its own (a blob: the DOM dump leaves its
        # content out; report.png shows it, docs/img/mlflow-study-report.png)
        check('class="mlflow-html-iframe"' in doms["report"] and "report/report.html" in doms["report"],
              "the report page shows the study's report.html in MLflow's HTML view of the parent run")
        check("Summary" in doms["landing"] and "residual=post_norm</a>" in doms["landing"]
              and 'class="runs"' in doms["landing"],
              "the landing page opens on the report's summary of verdicts, the variants linked")
        shown = doms["followed-link"]
        check(all(f"residual=post_norm · seed {s}" in shown for s in (0, 1))
              and "baseline · seed" not in shown and "Group: residual=post_norm" in shown
              and "Group: baseline" not in shown and "Group: study" not in shown,
              "the followed link shows that variant's two runs (grouped, not folded under the study's parent "
              "run) and no other")
        compare = doms["comparison"]
        groups = re.findall(r"Group: ([^<]+)<", compare)
        check(sorted(g.strip() for g in groups) == ["baseline", "residual=post_norm"],
              f"the comparison groups the cells by variant, the parent run left out: {groups}")
        check("Group by: ablate.variant" in compare.replace("\xa0", " ") and "js-plotly-plot" in compare
              and re.search(r">(final/)?val/exact_match<", compare) is not None,
              "the comparison charts the deciding metric, grouped by the variant tag")
        check("You're viewing a shared view" in compare.replace("&#39;", "'"),
              "the study's shared view applies")
        compared = re.search(r"viewStateShareKey=([\w-]+)", latest.group(1))
        view = views.get(f"mlflow.sharedViewState.{compared.group(1) if compared else ''}", {})
        ranges = [c.get("range", {}) for c in view.get("compareRunCharts", [])]
        check(bool(ranges) and all("yMin" in r and "yMax" in r for r in ranges),
              "the comparison's charts are on axes fitted to the cells' values, not from 0")
        study_dom = doms["study"]
        check(all(n in study_dom for n in want), "the study's page lists every cell by variant and seed")
        check("final/val/exact_match" in study_dom, "the study's page names the metric it ranks by")
        runs_dom = doms["study-runs"]
        check(STUDY in runs_dom and "No data available" not in runs_dom and "Model training" in runs_dom,
              "the experiment opens on its runs in the model-training view, not the GenAI traces page")
        check("residual=post_norm · seed 1" in doms["cell-run"], "a cell's page shows its name")
        check("ui-run · seed 0" in doms["single-run"], "the single run's page shows its name")

        server = [int(p) for p in subprocess.run(["pgrep", "-f", f"mlflow server.*{url.rsplit(':', 1)[1]}"],
                                                 capture_output=True, text=True).stdout.split()]
        ui.send_signal(signal.SIGTERM)
        ui.wait(timeout=30)
        time.sleep(1)
        alive = [p for p in server if Path(f"/proc/{p}").exists()]
        check(bool(server) and not alive, "SIGTERM ends `ablate ui` and its MLflow server together")
        try:
            urllib.request.urlopen(landing.group(1), timeout=5).close()
            gone = False
        except OSError:
            gone = True
        check(gone, "and its landing page")
    finally:
        if ui.poll() is None:
            ui.send_signal(signal.SIGTERM)
            ui.wait(timeout=30)
        if args.keep or args.store:
            print(f"store kept in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"{len(failures)} check(s) failed" if failures else "all checks passed; screenshots in " + str(out))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
