"""Does trajsynth's data make a real model better at tool use on a public benchmark?

Runs the generalist pipeline (``pipelines/generalist.yaml``) at a size that fits about 40
minutes on a 2-core CPU: every tool collection in ``--external`` (ToolAlpaca, StableToolBench,
API-Bank, tau-bench; BFCL's multi-turn API classes as code; the built-in domains) →
``--tasks`` Magnet tasks per domain → simulated-teacher rollouts → verify, score, filter,
dedup, difficulty, balance → decontaminate → first-decision views, with API-Bank's dialogues
and ToolAlpaca's instructions imported beside them (``--out``/imported) → SFT of
SmolLM2-135M-Instruct for ``--minutes`` → BFCL v4 (``--limit`` entries per category, spread
over each file) for the base model and the trained one. BFCL's single-turn questions,
functions and answers never enter the training data; the figure ``contamination`` counts
any that did (must be 0).

Run: python bench/benchmark.py [--external DIR] [--tasks 80] [--minutes 30] [--steps N]
     [--limit 20] [--out runs/benchmark]

Reproducing a student: the rows are the same on every run of the same code and settings, but
30 minutes of SFT are not the same training from one run to the next (the steps made, and the
learning rate's decay, follow the clock, and so the machine's load): the same 2,388 rows
trained twice here scored 0.32 and 0.28 on 50 questions a category, irrelevance 0.66 and 0.82.
``--steps N`` trains exactly N steps with the schedule following them (``--minutes`` stays a
cap), which gives the same student on the same machine when N steps fit well within them.

Size: ``--tasks`` tasks per domain, and the pipeline's ``tasks_per_tool`` off. The defaults
(80 tasks per domain: 1,440 tasks, 4 rollouts each) make the rows in about 2 minutes on 2
cores; then 30 minutes of SFT and 20 questions per category of BFCL for two models: 44
minutes in all on a quiet 2-core machine with AMX bf16 units (bf16 autocast; in fp32, as on a
CPU without them, the BFCL part is 1.2-1.5x slower and the SFT makes half the steps).
The pipeline's stages are cached in ``--out``: a rerun with the same settings only reprints.
The last line is one JSON object: ``base`` and ``trained`` (BFCL category → accuracy, plus
``mean`` over simple_python, multiple, parallel, parallel_multiple, live_simple),
``irrelevance_base``, ``irrelevance_trained``, ``train_minutes``, ``train_rows``,
``train_epochs`` (the share of an epoch the SFT got through), ``tools``, ``contamination``,
``trained_intervals`` (each trained figure's 95% bootstrap interval: at
20 questions a category, about ±0.2), and the run's wall time and load.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
import warnings
from pathlib import Path

CATEGORIES = [
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "irrelevance",
    "live_irrelevance",
]


def _external(arg: str | None) -> Path:
    if arg:
        return Path(arg).resolve()
    env = os.environ.get("TRAJSYNTH_EXTERNAL")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared/external"


def _import_natural(external: Path, imported: Path) -> None:
    """Requests people wrote (the pipeline's ``natural`` stage reads them), as ``make
    data/imported`` does; kept in the run folder, imported once."""
    from trajsynth.cli import main as cli

    sources = {
        "apibank": ("apibank-dialogues", external / "api-bank/lv1-lv2-samples/level-1-given-desc"),
        "toolalpaca": ("toolalpaca-answers", external / "toolalpaca/data"),
    }
    for name, (command, src) in sources.items():
        if not (imported / name).is_dir():
            try:
                cli(["import", command, str(src), "--out", str(imported / name)])
            except SystemExit as exc:
                if exc.code:
                    raise


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--external", help="Folder of tool collections (TRAJSYNTH_EXTERNAL).")
    ap.add_argument("--tasks", type=int, default=80, help="Magnet tasks per domain.")
    ap.add_argument("--minutes", type=float, default=30.0, help="SFT budget in minutes.")
    ap.add_argument(
        "--steps",
        type=int,
        default=None,
        help="SFT steps, the same every run (--minutes stays a cap); default: the minutes decide.",
    )
    ap.add_argument("--limit", type=int, default=20, help="BFCL entries per category.")
    ap.add_argument("--out", default="runs/benchmark", help="Run folder (stages cached there).")
    ap.add_argument("--set", action="append", default=[], help="More pipeline overrides.")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    external = _external(args.external)
    if not external.is_dir():
        raise SystemExit(f"no tool collections at {external}: pass --external DIR")
    os.environ["TRAJSYNTH_EXTERNAL"] = str(external)
    imported = Path(args.out) / "imported"
    os.environ["TRAJSYNTH_IMPORTED"] = str(imported)

    from trajsynth.envs import EnvFactory
    from trajsynth.pipeline import run_pipeline
    from trajsynth.pipeline.spec import load_pipeline

    overrides = [
        f"stages.tasks.with.tasks_per_domain={args.tasks}",
        "stages.tasks.with.tasks_per_tool=null",
        f"stages.train.with.sft.max_minutes={args.minutes}",
        *([f"stages.train.with.sft.max_steps={args.steps}"] if args.steps else []),
        f"stages.bfcl.with.limit={args.limit}",
        f"stages.bfcl.with.categories=[{','.join(CATEGORIES)}]",
        *args.set,
    ]
    started = time.perf_counter()
    _import_natural(external, imported)
    # read once: the pipeline file may be edited while this runs for 45 minutes
    pipeline = load_pipeline("generalist", overrides, output=args.out)
    result = run_pipeline(pipeline, out=args.out)
    wall = time.perf_counter() - started
    stages = result.manifest.stages
    report = json.loads((Path(args.out) / "bfcl.json").read_text())
    factory = EnvFactory(pipeline.spec.defaults.env)
    tools = sum(len(factory.toolset(d)) for d in factory.domains())
    train_rows = int(stages["train"].metrics["values"]["rows"])  # views + natural
    train = stages["train"].metrics

    epochs = float(train["values"].get("epochs_done", 0.0))
    base, trained = report["base"], report["trained"]
    bounds = report.get("intervals", {}).get("trained", {})
    print(f"{'BFCL category':<20}{'base':>8}{'trained':>9}  95% interval")
    for cat in [*CATEGORIES, "mean"]:
        low, high = bounds.get(cat) or (None, None)
        span = f"  {low:.2f}-{high:.2f}" if low is not None and high is not None else ""
        print(f"{cat:<20}{base.get(cat, 0):>8.2f}{trained.get(cat, 0):>9.2f}{span}")
    print(
        f"{len(factory.domains())} domains, {tools} tools; {train_rows} training rows; "
        f"SFT {train['values'].get('steps')} steps ({epochs:.2f} of an epoch) in "
        f"{train['values']['seconds'] / 60:.1f} min; "
        f"contamination {report['contamination']['count']}; run {wall / 60:.1f} min",
        flush=True,
    )
    figures = {
        "base": base,
        "trained": trained,
        "irrelevance_base": base.get("irrelevance"),
        "irrelevance_trained": trained.get("irrelevance"),
        "trained_intervals": bounds,
        "train_minutes": round(train["values"]["seconds"] / 60, 1),
        "train_rows": train_rows,
        "train_epochs": round(epochs, 2),
        "tools": tools,
        "contamination": report["contamination"]["count"],
        "limit": args.limit,
        "tasks_per_domain": args.tasks,
        "run_minutes": round(wall / 60, 1),
        "load_1min": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
