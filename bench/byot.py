"""Bring your own tools: public tool-spec collections nobody here wrote become executable
environments and verified tasks, offline.

For each collection (BFCL function docs, ToolAlpaca, StableToolBench, API-Bank, tau-bench
tools), imported with ``trajsynth.envs.import_tools`` and offered as one toolset domain with
no implementation (so it runs in the ``simulated`` environment, the default):

- ``tools_in``: specs read (imported + failed + dropped duplicates); ``imported``: tools;
- ``executable_share``: share of the imported tools (up to ``SAMPLE`` of them, seeded) whose
  call, with arguments grounded in the environment's state (as Magnet grounds them), runs
  without an error within 4 draws; baseline in the same run: the ``replay`` environment that
  imported toolsets used before (it answers only recorded calls);
- ``tasks``: Magnet tasks made (``magnet_tasks``, lexical graph, ``TASKS`` asked), then
  rejection sampling (4 rollouts each) and ``verify``; ``verified_share``: share of the
  tasks with a rollout that passes the independent replay; ``verified``: their number;
- ``seconds``: wall time of the collection (import, executability, pipeline);
- ``graph_s_4k``: the function-signature graph with the default similarity on 4,000 tools
  (every imported tool of the five collections, then renamed copies to reach 4,000), run in
  a subprocess with a time limit (``null`` when it did not finish).

Nothing here is a test: it prints a table, then one JSON line.

Run: PYTHONPATH=. python bench/byot.py [--quick] [--no-graph]
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trajsynth.envs import EnvFactory, Toolset, import_tools
from trajsynth.pipeline import run_pipeline
from trajsynth.stages.common.grounding import ValuePool
from trajsynth.store import read_records

QUICK = "--quick" in sys.argv
NO_GRAPH = "--no-graph" in sys.argv
TASKS = 8 if QUICK else 30
SAMPLE = 100 if QUICK else 400
GRAPH_TIMEOUT = 300
EXTERNAL = Path(
    os.environ.get("TRAJSYNTH_EXTERNAL")
    or Path(__file__).resolve().parents[1].parent / "shared" / "external"
)
COLLECTIONS = [
    ("bfcl_functions", "bfcl", "bfcl"),
    ("toolalpaca", "toolalpaca/data", "toolalpaca"),
    ("stabletoolbench", "stabletoolbench", "stabletoolbench"),
    ("api_bank", "api-bank", "apibank"),
    ("tau_bench", "tau-bench", "tau"),
]


def executable_share(factory: EnvFactory, name: str, ts: Toolset) -> float:
    """Share of sampled tools whose grounded call succeeds within 4 draws."""
    env = factory.make(name, seed=0)
    env.reset()
    pool = ValuePool(env.state())
    tools = list(factory.toolset(name))
    rng = random.Random(0)
    sample = rng.sample(tools, min(SAMPLE, len(tools)))
    ok = 0
    for spec in sample:
        for _ in range(4):
            snap = env.snapshot()
            result = env.call(spec.name, pool.arguments(spec, {}, rng, optional_p=0.2))
            env.restore(snap)
            if result.ok:
                ok += 1
                break
    return ok / max(1, len(sample))


def pipeline(name: str, path: Path, out: Path) -> tuple[int, int]:
    """Magnet tasks → rejection sampling → verify; (tasks, tasks with a verified rollout)."""
    overrides = [
        f"defaults.env.toolsets={{{name}: {path}}}",
        "defaults.env.domains=[]",
        f"stages.tasks.with.tasks_per_domain={TASKS}",
        f"stages.tasks.with.max_candidates={10 * TASKS}",
        "stages.tasks.with.graph.similarity=lexical",
        "stages.tasks.with.distractors=6",
        "stages.rollouts.with.n=4",
    ]
    result = run_pipeline("rejection", out=out, overrides=overrides)
    tasks = read_records(result.output("tasks"))
    verified_dir = result.output("verified")
    verified = read_records(verified_dir) if any(verified_dir.glob("*.parquet")) else []
    good = {r.task_id for r in verified if r.success}
    return len(tasks), len(good & {t.task_id for t in tasks})


def graph_seconds(specs_file: Path) -> float | None:
    code = (
        "import sys, time\n"
        "from trajsynth.envs import Toolset\n"
        "from trajsynth.graph import GraphConfig, build_graph\n"
        f"ts = Toolset.load({str(specs_file)!r})\n"
        "t = time.perf_counter(); build_graph(ts, GraphConfig())\n"
        "print(time.perf_counter() - t)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=GRAPH_TIMEOUT,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return None
    return round(float(done.stdout.strip().splitlines()[-1]), 1)


def main() -> None:
    if not EXTERNAL.is_dir():
        sys.exit(f"byot: {EXTERNAL} not found (set TRAJSYNTH_EXTERNAL)")
    results: dict[str, dict[str, float | int | None]] = {}
    everything = []
    with tempfile.TemporaryDirectory(prefix="byot-") as tmp:
        root = Path(tmp)
        for name, src, fmt in COLLECTIONS:
            t0 = time.perf_counter()
            ts = import_tools(EXTERNAL / src, fmt)
            everything += ts.tools
            path = ts.save(root / f"{name}.json")
            factory = EnvFactory({"domains": [], "toolsets": {name: str(path)}})
            share = executable_share(factory, name, ts)
            replay = EnvFactory(
                {"domains": [], "toolsets": {name: {"file": str(path), "backend": "replay"}}}
            )
            baseline = executable_share(replay, name, ts)
            tasks, verified = pipeline(name, path, root / f"run-{name}")
            results[name] = {
                "tools_in": len(ts) + len(ts.failures) + len(ts.duplicates),
                "imported": len(ts),
                "executable_share": round(share, 3),
                "baseline_replay_executable_share": round(baseline, 3),
                "tasks": tasks,
                "verified": verified,
                "verified_share": round(verified / tasks, 3) if tasks else 0.0,
                "seconds": round(time.perf_counter() - t0, 1),
            }
            r = results[name]
            print(
                f"{name:16s} in {r['tools_in']:5d}  imported {r['imported']:5d}  "
                f"executable {r['executable_share']:.3f} (replay {baseline:.3f})  "
                f"tasks {tasks:3d}  verified {verified:3d} ({r['verified_share']:.2f})  "
                f"{r['seconds']:.0f}s",
                flush=True,
            )
        graph_s = None
        n_graph = 0
        if not NO_GRAPH:
            seen: set[str] = set()
            unique = [t for t in everything if not (t.name in seen or seen.add(t.name))]
            specs = list(unique)
            k = 2
            while len(specs) < 4000:  # renamed copies up to 4,000 tools
                specs += [
                    t.model_copy(update={"name": f"{t.name[:60]}_{k}"})
                    for t in unique[: 4000 - len(specs)]
                ]
                k += 1
            n_graph = len(specs)
            graph_file = Toolset(name="all", tools=specs).save(root / "all.json")
            graph_s = graph_seconds(graph_file)
            print(f"graph on {n_graph} tools, default similarity: {graph_s} s")
    print(json.dumps({**results, "graph_s_4k": graph_s, "graph_tools": n_graph}))


if __name__ == "__main__":
    main()
