"""What one held-out probe task costs the main job (``pipelines/looptool.yaml``), so that its
probe sizes can be chosen to fit the demo's time.

1) data as the main job makes it (Magnet math tasks, the held-out split, simulated-teacher
   rejection sampling, verify, score, filter: the pipeline's own prefix, run by the runner);
2) the student: SmolLM2-135M after round 1's training (the pipeline's ``train`` settings and
   48-step budget), or ``--model`` (a trained folder, e.g. ``runs/demo/artifacts/round1.train``);
3) the ``gcp`` stage with the pipeline's probe settings on the first ``n`` held-out tasks,
   for each ``--sizes`` n: wall seconds, process CPU seconds (all threads: on a shared
   machine, CPU seconds ÷ cores estimates the wall time of a quiet one), per task, and the
   marginal cost of a task between the smallest and the largest size.

Run: PYTHONPATH=. python bench/probe.py [--sizes 12,24,50] [--model FOLDER]
     OMP_WAIT_POLICY=PASSIVE PYTHONPATH=. python bench/probe.py --threads 1   (loaded machine)
The last line is one JSON object: per size the seconds and per-task costs, the marginal CPU
seconds per task, the training seconds (when trained here) and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
PIPELINE = REPO / "pipelines" / "looptool.yaml"
PREFIX = ("tasks", "split", "probe_tasks", "teacher", "noisy", "verified", "scored", "filtered")


def spec_prefix(tmp: Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """The main job's data stages, its training settings and its probe settings."""
    spec = yaml.safe_load(PIPELINE.read_text())
    stages = [s for s in spec["stages"] if s.get("id") in PREFIX]
    loop = next(s for s in spec["stages"] if "loop" in s)
    train = next(s for s in loop["stages"] if s["id"] == "train")
    probe = next(s for s in loop["stages"] if s["id"] == "probe")
    out = tmp / "prefix.yaml"
    out.write_text(yaml.safe_dump({**spec, "stages": stages}, sort_keys=False))
    return out, train["with"]["sft"], probe["with"]


def run_stage(
    name: str, cfg: dict[str, Any], rows: list, **spec: Any
) -> tuple[float, float, dict[str, float]]:
    """(wall, CPU) seconds of one stage over ``rows``, and its counters."""
    from trajsynth.core import to_batch
    from trajsynth.stages import Context, ContextSpec, build_stage

    ctx = Context(ContextSpec(stage_id=name, **spec))
    stage = build_stage(name, cfg)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in stage.process(iter([to_batch(rows)]), ctx):
        pass
    return time.perf_counter() - wall, time.process_time() - cpu, dict(ctx.metrics.counters)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="12,24,50", help="Probe sizes to time.")
    ap.add_argument("--model", default=None, help="A trained student folder (default: train).")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (1 with OMP_WAIT_POLICY=PASSIVE: CPU seconds that a loaded "
        "machine does not inflate with spinning threads).",
    )
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    from trajsynth.pipeline import run_pipeline
    from trajsynth.pipeline.spec import load_pipeline
    from trajsynth.store import read_records
    from trajsynth.train.sft import SFTConfig, train_sft

    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        path, sft, probe_cfg = spec_prefix(tmp)
        result = run_pipeline(load_pipeline(path), out=tmp / "run")
        held_out = read_records(result.output("split", "eval"))
        if len(held_out) < sizes[-1]:
            raise SystemExit(f"only {len(held_out)} held-out tasks for a probe of {sizes[-1]}")
        model, train_s = args.model, None
        if model is None:
            rows = read_records(result.output("filtered"))
            t0 = time.perf_counter()
            train_sft(rows, tmp / "student", SFTConfig(**sft, save_every=10**9, resume=False))
            train_s = time.perf_counter() - t0
            model = str(tmp / "student")
        results = []
        for n in sizes:
            cfg = {k: v for k, v in probe_cfg.items() if k != "probe_set"}
            wall, cpu, counters = run_stage(
                "gcp", cfg, held_out[:n], artifacts_in={"train": str(Path(model).resolve())}
            )
            results.append(
                {"tasks": n, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                 "wall_per_task": round(wall / n, 2), "cpu_per_task": round(cpu / n, 2),
                 "requests": counters.get("llm.student.requests", 0),
                 "prompt_tokens": counters.get("llm.student.prompt_tokens", 0),
                 "completion_tokens": counters.get("llm.student.completion_tokens", 0)}
            )  # fmt: skip
            print(f"probe of {n} tasks: {wall:.0f}s wall, {cpu:.0f}s CPU", flush=True)
    print(
        f"{'tasks':>6}{'wall s':>9}{'CPU s':>9}{'wall/task':>11}{'CPU/task':>10}"
        f"{'prompt tok':>12}{'gen tok':>9}"
    )
    for r in results:
        print(
            f"{r['tasks']:>6}{r['wall_s']:>9.1f}{r['cpu_s']:>9.1f}"
            f"{r['wall_per_task']:>11.2f}{r['cpu_per_task']:>10.2f}"
            f"{r['prompt_tokens']:>12}{r['completion_tokens']:>9}"
        )
    first, last = results[0], results[-1]
    marginal = (
        (last["cpu_s"] - first["cpu_s"]) / (last["tasks"] - first["tasks"])
        if last["tasks"] > first["tasks"]
        else None
    )
    out = {
        "bench": "probe",
        "sizes": results,
        "marginal_cpu_s_per_task": round(marginal, 2) if marginal is not None else None,
        "train_s": round(train_s, 1) if train_s is not None else None,
        "threads": args.threads,
        "cores": os.cpu_count(),
        "load_1min": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
