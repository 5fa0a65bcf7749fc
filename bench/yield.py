"""Yield of the repair methods: verified trajectories per 1,000 LLM calls, rejection sampling
alone vs rejection sampling + ECHO + STeCa, at equal minimum quality.

Rejection sampling keeps what the teacher got right and throws the rest away; ECHO relabels
what the failures did achieve and STeCa calibrates the step where they went wrong. Both cost
LLM calls of their own, so the fair figure is yield per call, with every call counted:

1) one pipeline run, offline (the simulator): Magnet tasks of the five built-in domains →
   ``rejection_sampling`` (N = 8) with a simulated teacher whose skill profile gives about 30 %
   success;
2) baseline: rejection sampling's verified rollouts → ``verify`` → ``score`` → ``filter``;
3) repair: the same rollouts plus ``echo`` (from the failures) and ``steca`` (from both
   outputs) → the same ``verify`` → ``score`` → ``filter`` (same minimum quality);
4) calls: every request each arm's stages made, from the run manifest's
   ``llm.<role>.requests`` (teacher rollouts; ECHO's rewriter; STeCa's Monte Carlo rollouts
   and reflector). Task synthesis (the query writer) is shared by both arms and not counted;
5) figures: rows that pass verification and the filter, per 1,000 calls, and their ratio
   (target ≥ 2×); also the same after exact/near dedup, and per million completion tokens.

Run: ``PYTHONPATH=. python bench/yield.py [--tasks-per-domain 12] [--quick]``. The last line
of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trajsynth.pipeline import run_pipeline  # noqa: E402
from trajsynth.store import read_records  # noqa: E402

#: a teacher that succeeds on about 30 % of Magnet tasks (the default profile: about 40 %)
TEACHER_PROFILE = {
    "drop_optional_param": 0.2,
    "wrong_argument_value": 0.05,
    "missing_dependent_call": 0.3,
    "wrong_call_order": 0.1,
    "stop_early": 0.08,
}


def spec(tasks_per_domain: int, steca: dict[str, Any]) -> dict[str, Any]:
    quality = [
        ("verified", "verify"),
        ("scored", "score"),
        ("filtered", "filter"),
        ("deduped", "dedup"),
    ]
    stages: list[dict[str, Any]] = [
        {
            "id": "tasks",
            "uses": "magnet_tasks",
            "with": {"tasks_per_domain": tasks_per_domain, "graph": {"similarity": "lexical"}},
        },
        {"id": "rollouts", "uses": "rejection_sampling", "from": "tasks", "with": {"n": 8}},
        {"id": "echo", "uses": "echo", "from": "rollouts:failed"},
        {"id": "steca", "uses": "steca", "from": ["rollouts", "rollouts:failed"], "with": steca},
        {"id": "union", "uses": "concat", "from": ["rollouts", "echo", "steca"]},
    ]
    for arm, source in (("base", "rollouts"), ("repair", "union")):
        prev = source
        for sid, uses in quality:
            stages.append({"id": f"{arm}_{sid}", "uses": uses, "from": prev})
            prev = f"{arm}_{sid}"
    return {
        "name": "bench_yield",
        "defaults": {
            "seed": 0,
            "shard_rows": 2000,
            "llm": {"teacher": {"sim": {"profile": TEACHER_PROFILE}}},
        },
        "stages": stages,
    }


def counters(manifest: dict[str, Any], stage: str) -> dict[str, float]:
    return manifest["stages"][stage]["metrics"].get("counters", {})


def requests(manifest: dict[str, Any], stage: str) -> dict[str, float]:
    """Requests per role made by one stage."""
    out = {}
    for k, v in counters(manifest, stage).items():
        if k.startswith("llm.") and k.endswith(".requests"):
            out[k[4 : -len(".requests")]] = v
    return out


def tokens(manifest: dict[str, Any], stage: str) -> float:
    return sum(v for k, v in counters(manifest, stage).items() if k.endswith(".completion_tokens"))


def verified(path: Path) -> tuple[int, dict[str, int]]:
    rows = read_records(path) if any(path.glob("*.parquet")) else []
    ok = [r for r in rows if r.success]
    by: dict[str, int] = {}
    for r in ok:
        by[r.method] = by.get(r.method, 0) + 1
    return len(ok), by


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks-per-domain", type=int, default=12)
    ap.add_argument("--quick", action="store_true", help="4 tasks per domain")
    ap.add_argument("--out", type=Path, default=None, help="Keep the run here.")
    args = ap.parse_args()
    tpd = 4 if args.quick else args.tasks_per_domain
    steca_cfg: dict[str, Any] = {"horizon": "turn"}
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "run"
        pipe = Path(tmp) / "bench_yield.yaml"
        pipe.write_text(yaml.safe_dump(spec(tpd, steca_cfg), sort_keys=False))
        t0 = time.perf_counter()
        result = run_pipeline(pipe, out=out, reporter=None)
        seconds = time.perf_counter() - t0
        manifest = json.loads((result.run_dir / "manifest.json").read_text())
        rs = counters(manifest, "rollouts")
        base_calls = sum(requests(manifest, "rollouts").values())
        repair_parts = {s: sum(requests(manifest, s).values()) for s in ("echo", "steca")}
        repair_calls = base_calls + sum(repair_parts.values())
        base_tok = tokens(manifest, "rollouts")
        repair_tok = base_tok + tokens(manifest, "echo") + tokens(manifest, "steca")
        figures: dict[str, Any] = {}
        arms = (("base", base_calls, base_tok), ("repair", repair_calls, repair_tok))
        for arm, calls, tok in arms:
            n, by = verified(result.output(f"{arm}_filtered"))
            d, _ = verified(result.output(f"{arm}_deduped"))
            figures[arm] = {
                "verified": n,
                "by_method": by,
                "distinct": d,
                "calls": calls,
                "per_1k_calls": 1000 * n / calls if calls else 0.0,
                "distinct_per_1k_calls": 1000 * d / calls if calls else 0.0,
                "per_1m_tokens": 1e6 * n / tok if tok else 0.0,
            }
    success = rs.get("passed", 0) / max(1, rs.get("rollouts", 1))
    b, r = figures["base"], figures["repair"]
    ratio = r["per_1k_calls"] / b["per_1k_calls"] if b["per_1k_calls"] else 0.0
    base_distinct = b["distinct_per_1k_calls"]
    ratio_distinct = r["distinct_per_1k_calls"] / base_distinct if base_distinct else 0.0
    ratio_tokens = r["per_1m_tokens"] / b["per_1m_tokens"] if b["per_1m_tokens"] else 0.0
    print(
        f"tasks: {counters(manifest, 'tasks').get('tasks', 0):.0f}; teacher success "
        f"{success:.1%} over {rs.get('rollouts', 0):.0f} rollouts; run {seconds:.1f}s"
    )
    print(
        f"calls: rejection {base_calls:.0f}, echo {repair_parts['echo']:.0f}, "
        f"steca {repair_parts['steca']:.0f}"
    )
    print(f"{'arm':<28}{'verified':>10}{'calls':>9}{'per 1k':>9}{'distinct':>10}{'per 1k':>9}")
    for name, f in (("rejection sampling", b), ("rejection + ECHO + STeCa", r)):
        print(
            f"{name:<28}{f['verified']:>10}{f['calls']:>9.0f}{f['per_1k_calls']:>9.1f}"
            f"{f['distinct']:>10}{f['distinct_per_1k_calls']:>9.1f}"
        )
    print(f"by method (repair arm): {r['by_method']}")
    print(
        f"ratio {ratio:.2f}x per call (distinct: {ratio_distinct:.2f}x; per token: "
        f"{ratio_tokens:.2f}x)"
    )
    print(
        json.dumps(
            {
                "bench": "yield",
                "teacher_success": round(success, 4),
                "rejection_per_1k_calls": round(b["per_1k_calls"], 2),
                "recovered_per_1k_calls": round(r["per_1k_calls"], 2),
                "ratio": round(ratio, 3),
                "ratio_distinct": round(ratio_distinct, 3),
                "ratio_per_token": round(ratio_tokens, 3),
                "calls": {"rejection": base_calls, **repair_parts},
                "verified": {"rejection": b["verified"], "repair": r["verified"]},
                "repair_by_method": r["by_method"],
                "seconds": round(seconds, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
