"""Batch API vs live requests: the same rejection-sampling run through ``backend: openai`` and
``backend: openai_batch`` against ``trajsynth serve --backend sim`` (offline), compared on
what it accepts and what each accepted trajectory costs.

1) start ``trajsynth serve --backend sim --batch-delay D`` on 127.0.0.1 (a batch completes D
   seconds after it was created; live requests are answered at once);
2) baseline: Magnet tasks of the five built-in domains → ``rejection_sampling`` (N = 8) →
   ``verify`` → ``filter`` with the teacher on the live endpoint (``backend: openai``), priced
   at $1 / $4 per million prompt / completion tokens;
3) the same run with the teacher on the batch API (``backend: openai_batch``, batch price =
   half the live price, the default ``prices.batch_factor``): requests are collected into
   batch files, the open episodes of the stage advancing one turn per batch;
4) figures: ``same_accepted`` — the accepted trajectories (id and messages of the final
   output's rows) are identical; ``cost_ratio`` — batch ÷ live cost per accepted trajectory
   (target ≤ 0.55); batches made, requests per batch, seconds of each run (the batch run
   waits D seconds per turn: the price of half-price tokens is latency).

Run: ``PYTHONPATH=. python bench/batch.py [--tasks-per-domain 4] [--batch-delay 0.5]``. The
last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trajsynth.llm.server import spawn_server  # noqa: E402
from trajsynth.llm.usage import run_cost  # noqa: E402
from trajsynth.pipeline import run_pipeline  # noqa: E402
from trajsynth.pipeline.spec import resolve_pipeline  # noqa: E402
from trajsynth.store import read_records  # noqa: E402

PRICES = {"prompt_per_mtok": 1.0, "completion_per_mtok": 4.0}


def spec(base_url: str, backend: str, tasks_per_domain: int) -> dict[str, Any]:
    teacher = {
        "backend": backend,
        "base_url": base_url,
        "model": "sim",
        "send_metadata": True,
        "prices": PRICES,
        "batch": {"flush_idle_s": 0.1, "poll_s": 0.1},
    }
    return {
        "name": f"bench-batch-{backend}",
        "defaults": {"seed": 0, "llm": {"teacher": teacher}},
        "stages": [
            {
                "id": "tasks",
                "uses": "magnet_tasks",
                "with": {"tasks_per_domain": tasks_per_domain, "graph": {"similarity": "lexical"}},
            },
            {"id": "rollouts", "uses": "rejection_sampling", "from": "tasks", "with": {"n": 8}},
            {"id": "verified", "uses": "verify", "from": "rollouts"},
            {"id": "filtered", "uses": "filter", "from": "verified"},
        ],
    }


def run(base_url: str, backend: str, tasks_per_domain: int, out: Path) -> dict[str, Any]:
    start = time.perf_counter()
    result = run_pipeline(
        resolve_pipeline(spec(base_url, backend, tasks_per_domain), output=str(out)), out=out
    )
    seconds = time.perf_counter() - start
    counters = result.manifest.stages["rollouts"].metrics.get("counters", {})
    accepted = sorted(
        (r.id, json.dumps([m.model_dump(mode="json") for m in r.messages], sort_keys=True))
        for r in read_records(out / "filtered")
    )
    return {
        "seconds": seconds,
        "cost": run_cost(result.manifest.stages),
        "requests": int(counters.get("llm.teacher.requests", 0)),
        "accepted": accepted,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks-per-domain", type=int, default=4)
    ap.add_argument("--batch-delay", type=float, default=0.5)
    args = ap.parse_args()

    with (
        spawn_server("--backend", "sim", "--batch-delay", str(args.batch_delay)) as server,
        tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp,
    ):
        live = run(server.base_url, "openai", args.tasks_per_domain, Path(tmp) / "live")
        before = server.metrics()
        batch = run(server.base_url, "openai_batch", args.tasks_per_domain, Path(tmp) / "batch")
        m = server.metrics()
    batches = m["batches_created"] - before["batches_created"]
    live_per, batch_per = live["cost"]["cost_per_accepted"], batch["cost"]["cost_per_accepted"]
    same = bool(live["accepted"]) and live["accepted"] == batch["accepted"]
    ratio = batch_per / live_per if live_per and batch_per is not None else None

    print(f"{'arm':<8}{'requests':>10}{'accepted':>10}{'cost $':>10}{'$/accepted':>13}{'s':>8}")
    for name, r in (("live", live), ("batch", batch)):
        c = r["cost"]
        per = c["cost_per_accepted"] or 0.0
        print(
            f"{name:<8}{r['requests']:>10,}{c['accepted']:>10,}{c['cost_usd']:>10.4f}"
            f"{per:>13.6f}{r['seconds']:>8.1f}"
        )
    print(
        f"batches: {batches} ({m['batch_requests'] - before['batch_requests']} requests, "
        f"{(m['batch_requests'] - before['batch_requests']) / max(batches, 1):.1f} per batch), "
        f"custom ids repeated: {m['batch_custom_ids_repeated']}"
    )
    print(
        json.dumps(
            {
                "same_accepted": same,
                "cost_ratio": round(ratio, 4) if ratio is not None else None,
                "accepted": batch["cost"]["accepted"],
                "live_cost_per_accepted": live_per,
                "batch_cost_per_accepted": batch_per,
                "batches": batches,
                "requests": batch["requests"],
                "batch_delay_s": args.batch_delay,
                "live_seconds": round(live["seconds"], 2),
                "batch_seconds": round(batch["seconds"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
