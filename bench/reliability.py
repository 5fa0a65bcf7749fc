"""Reliability soak: fuzzed outputs through the parser, corrupt shards, and an LLM pipeline
through a fault-injecting proxy against a clean baseline run in the same script.

    PYTHONPATH=. python bench/reliability.py              # the full soak
    PYTHONPATH=. python bench/reliability.py --quick      # a smaller one
    PYTHONPATH=. python bench/reliability.py --fuzz-only  # the parser fuzz alone (~1 min)

Measures (last line, one JSON object):

- ``fuzz_crashes`` / ``fuzz_slow``: of ``--fuzz`` (10,000) seeded outputs built to break a
  tool-call parser and the long adversarial ones (backtick fences, unclosed tags repeated,
  deep brackets, long pythonic calls, near-JSON...) at sizes up to ``--long-chars``
  (200,000, the parser's input cap) (``tests/reliability/faultkit.py``), how many made
  ``parse_output`` raise or return unencodable text, and how many took over ``--slow-s``
  (0.1 s) of CPU (wall time on a shared machine also counts the other processes' turns; the
  table shows both); ``fuzz_max_chars``: the longest output tried (fuzzed outputs past the
  cap are in it too: only their first 200,000 characters are searched for calls);
- ``corrupt_undetected``: of ``--corrupt`` (20) trials that overwrite 2 KB at a random place
  of a random committed shard (size kept), how many were missed by the reader check or
  reused by the rerun instead of rerunning the stage;
- ``fault_slowdown``: wall time of ``magnet_tasks → rejection_sampling`` through a proxy that
  answers ``--fault-rate`` (20%) of requests with a fault (429 with and without
  ``retry-after``, 500, a hang, a truncated body), divided by the mean of the same run
  without faults measured just before and just after it (on a shared machine the load
  drifts; one clean run alone made the ratio swing from 1.2 to 6). A hang costs about the
  hedging delay (a duplicate is sent after the role's p95 latency; ``llm.openai_backend``),
  and a request timeout (``--timeout-s``, 5 s) only when every copy hangs; on a small
  workload a few hangs on the critical path still dominate the ratio. The table shows the
  hangs, the hedged requests and the timeouts;
- ``accepted_vs_clean``: accepted rollouts with faults ÷ without;
- ``infra_as_model_failures``: rejected rollouts of the faulty run whose reason is an endpoint
  failure (5xx, 429, timeout, unreadable body, retries exhausted, circuit open), i.e. endpoint
  failures recorded as the model's; the rollouts the stage dropped and counted instead
  (``infra.lost``) are shown in the table;
- ``kill_identical`` (of ``kill_trials``, ``--kills``, 20): ``kill -9`` of ``trajsynth run
  pipelines/echo_steca.yaml`` (scaled down with ``--set``) at a seeded random moment, then a
  resumed run, identical to an uninterrupted run in every stage folder, with no temporary
  file and no process of the killed run left (``tests/reliability/runkit.py``);
- ``sandbox_escapes``: of the escape cases of ``tests/reliability/escapekit.py`` run against
  the default sandbox, how many got out (``sandbox`` in the table says which isolation);
- ``secret_leaks``: places (files of run folders and caches, the console) where an API key
  passed by flag, environment or YAML, to a working, a 401 and an unreachable endpoint,
  was found.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "reliability"))

from escapekit import escape_sandbox, run_escapes  # noqa: E402
from faultkit import FaultProxy, corrupt_file, fuzz_parser  # noqa: E402
from runkit import kill_trials, secret_trials  # noqa: E402

from trajsynth.core.errors import DataError  # noqa: E402
from trajsynth.llm.server import spawn_server  # noqa: E402
from trajsynth.pipeline.runner import run_pipeline  # noqa: E402
from trajsynth.pipeline.spec import resolve_pipeline  # noqa: E402
from trajsynth.store.integrity import verify_shards  # noqa: E402
from trajsynth.store.shards import count_rows, list_shards  # noqa: E402

CPU_PIPE = {
    "name": "corrupt",
    "defaults": {"seed": 0, "shard_rows": 100},
    "stages": [
        {"id": "raw", "uses": "synthetic", "with": {"rows": 400}},
        {"id": "split", "uses": "split", "from": "raw", "with": {"eval_fraction": 0.2}},
        {"id": "pick", "uses": "sample", "from": "split", "with": {"n": 150}},
    ],
}
FAULTS = ("429", "429-no-retry-after", "500", "hang", "garbage")


def corrupt_trials(trials: int, seed: int) -> dict[str, int]:
    rnd = random.Random(seed)
    missed_reader = missed_rerun = 0
    with tempfile.TemporaryDirectory(prefix="trajsynth-corrupt-") as tmp:
        out = Path(tmp) / "run"
        run_pipeline(resolve_pipeline(CPU_PIPE), out=out)
        for t in range(trials):
            stage = rnd.choice(["raw", "split", "pick"])
            shard = rnd.choice(list_shards(out / stage))
            corrupt_file(shard, 2048, seed=seed + t, anywhere=True)
            try:
                verify_shards([shard])
                missed_reader += 1
            except DataError:
                pass
            result = run_pipeline(resolve_pipeline(CPU_PIPE), out=out)
            if stage not in result.executed:
                missed_rerun += 1
    return {"trials": trials, "missed_reader": missed_reader, "missed_rerun": missed_rerun}


def llm_run(base_url: str, out: Path, tasks: int, n: int, timeout_s: float) -> dict[str, float]:
    llm = {
        "*": {
            "backend": "openai",
            "base_url": base_url,
            "model": "sim",
            "api_key": "none",
            "send_metadata": True,
            "timeout_s": timeout_s,
        }
    }
    pipe = {
        "name": "faults",
        # measure what endpoint failures do to the data instead of stopping at the limit
        "defaults": {"seed": 0, "shard_rows": 500, "llm": llm, "max_infra_error_rate": 1.0},
        "stages": [
            {
                "id": "tasks",
                "uses": "magnet_tasks",
                "with": {
                    "tasks_per_domain": tasks,
                    "domains": ["math", "travel"],
                    "graph": {"similarity": "lexical"},
                },
            },
            {"id": "rollouts", "uses": "rejection_sampling", "from": "tasks", "with": {"n": n}},
        ],
    }
    # the run is a process of its own, as a user's is: the proxy (a thread of this process)
    # must not wait for the GIL behind the pipeline's own work, or its delays become the
    # endpoint's timeouts (and, 20 in a row, open the circuit breaker)
    spec = out.with_suffix(".yaml")
    spec.write_text(yaml.safe_dump(pipe))
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-m", "trajsynth", "run", str(spec), "--out", str(out), "-q"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"the {out.name} run failed:\n{proc.stderr[-3000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    # the stages' own wall time (what the runner measured), without the interpreter's start
    seconds = sum(st.get("seconds", 0.0) for st in manifest["stages"].values())
    import pyarrow.parquet as pq

    failed_dir = out / "rollouts" / "failed"
    infra = 0
    if failed_dir.is_dir() and list(failed_dir.glob("*.parquet")):
        reasons = pq.read_table(failed_dir, columns=["failure_reason"]).column("failure_reason")
        infra = sum(1 for r in reasons.to_pylist() if r and _ENDPOINT_FAILURE.search(r))
    counters = manifest["stages"]["rollouts"]["metrics"].get("counters", {})
    every = [st.get("metrics", {}).get("counters", {}) for st in manifest["stages"].values()]
    return {
        # attempts cut by the timeout, and hedged duplicates, over every stage and role
        "timeouts": sum(v for c in every for k, v in c.items() if k.endswith(".timeouts")),
        "hedges": sum(v for c in every for k, v in c.items() if k.endswith(".hedges")),
        "seconds": seconds,
        "accepted": count_rows(out / "rollouts"),
        "failed": count_rows(failed_dir) if failed_dir.is_dir() else 0,
        "infra": infra,
        "infra_lost": int(counters.get("infra.lost", 0)),
    }


#: what an endpoint failure's message says (``llm.openai_backend``), never a model's outcome
_ENDPOINT_FAILURE = re.compile(
    r"HTTP 5\d\d|\b429\b|rate limited|timed out|failed after \d+ attempts|circuit open|"
    r"unreadable response|malformed completion|connection error|cannot connect"
)


def sandbox_escapes() -> tuple[int, list[str], str]:
    """(escapes, the cases that got out, the isolation) against the default sandbox."""
    from trajsynth.envs.sandbox import describe

    with escape_sandbox() as box:
        info = describe(box.info())
        results = run_escapes(box)
    out = [name for name, (escaped, _) in results.items() if escaped]
    return len(out), out, info


def _progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _table(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--fuzz", type=int, default=10_000)
    ap.add_argument(
        "--long-chars",
        type=int,
        default=200_000,
        help="the longest adversarial outputs fuzzed (the parser's input cap)",
    )
    ap.add_argument("--slow-s", type=float, default=0.1, help="CPU seconds a slow parse takes")
    ap.add_argument("--fuzz-only", action="store_true", help="run the parser fuzz alone")
    ap.add_argument("--corrupt", type=int, default=20)
    ap.add_argument("--tasks", type=int, default=8, help="tasks per domain (2 domains)")
    ap.add_argument("--n", type=int, default=4, help="rollouts per task")
    ap.add_argument("--fault-rate", type=float, default=0.2)
    ap.add_argument("--faults", default=",".join(FAULTS), help="the fault mix, comma-separated")
    ap.add_argument("--hang-s", type=float, default=30.0)
    ap.add_argument("--timeout-s", type=float, default=5.0, help="the roles' request timeout")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kills", type=int, default=None, help="kill -9 trials (default 20)")
    args = ap.parse_args()
    if args.quick:
        args.fuzz, args.corrupt, args.tasks, args.n = 1000, 5, 3, 2
    if args.kills is None:
        args.kills = 3 if args.quick else 20

    rows: list[tuple[str, str]] = []
    fuzz = fuzz_parser(args.fuzz, seed=args.seed, slow_s=args.slow_s, long_chars=args.long_chars)
    _progress(f"fuzzed {fuzz['outputs']:,} outputs")
    rows.append(("fuzz outputs", f"{fuzz['outputs']:,} ({fuzz['chars']:,} chars; {args.fuzz:,} "
                 f"fuzzed, the rest long, up to {args.long_chars:,} chars)"))  # fmt: skip
    rows.append(("fuzz longest output", f"{fuzz['max_chars']:,} chars"))
    rows.append((f"fuzz crashes / slow (> {args.slow_s:g} s CPU)",
                 f"{len(fuzz['crashes'])} / {fuzz['slow']}"))  # fmt: skip
    rows.append(("fuzz slowest parse, CPU / wall", f"{fuzz['max_cpu_s'] * 1000:.0f} ms / "
                 f"{fuzz['max_s'] * 1000:.0f} ms ({fuzz['slowest']})"))  # fmt: skip
    for crash in fuzz["crashes"][:5]:
        rows.append(("  crash", crash))
    fuzz_json = {
        "fuzz_crashes": len(fuzz["crashes"]),
        "fuzz_slow": fuzz["slow"],
        "fuzz_max_chars": fuzz["max_chars"],
        "fuzz_outputs": fuzz["outputs"],
        "fuzz_max_cpu_ms": round(fuzz["max_cpu_s"] * 1000, 1),
    }
    if args.fuzz_only:
        _table(rows)
        print(json.dumps(fuzz_json))
        return

    corrupt = corrupt_trials(args.corrupt, args.seed)
    _progress(f"{args.corrupt} corrupt-shard trials")
    undetected = corrupt["missed_reader"] + corrupt["missed_rerun"]
    rows.append(("corrupt shard trials", str(corrupt["trials"])))
    rows.append(
        ("missed by readers / reruns", f"{corrupt['missed_reader']} / {corrupt['missed_rerun']}")
    )

    with (
        tempfile.TemporaryDirectory(prefix="trajsynth-faults-") as tmp,
        spawn_server("--backend", "sim") as server,
    ):
        llm_run(server.base_url, Path(tmp) / "warmup", 1, 1, args.timeout_s)  # imports, pools
        clean = llm_run(server.base_url, Path(tmp) / "clean", args.tasks, args.n, args.timeout_s)
        _progress(f"clean run {clean['seconds']:.1f} s")
        with FaultProxy(
            server.base_url,
            rate=args.fault_rate,
            faults=tuple(args.faults.split(",")),
            seed=args.seed,
            hang_s=args.hang_s,
            retry_after_s=0.05,
        ) as proxy:
            faulty = llm_run(
                proxy.base_url, Path(tmp) / "faulty", args.tasks, args.n, args.timeout_s
            )
            injected = {k: v for k, v in proxy.counts.items() if k != "ok"}
        _progress(f"faulty run {faulty['seconds']:.1f} s")
        again = llm_run(server.base_url, Path(tmp) / "clean2", args.tasks, args.n, args.timeout_s)
        _progress(f"clean run again {again['seconds']:.1f} s")
        with tempfile.TemporaryDirectory(prefix="trajsynth-secrets-") as sec_tmp:
            secrets = secret_trials(Path(sec_tmp), server.base_url)
        _progress("secret trials")
    escapes, escaped, sandbox = sandbox_escapes()
    before_kills = {
        "fault_slowdown": round(faulty["seconds"] / max((clean["seconds"] + again["seconds"]) / 2,
                                                        1e-9), 2),
        "accepted_vs_clean": round(faulty["accepted"] / max(clean["accepted"], 1), 3),
        "infra_as_model_failures": faulty["infra"],
        **fuzz_json,
        "corrupt_undetected": corrupt["missed_reader"] + corrupt["missed_rerun"],
        "sandbox_escapes": escapes,
        "secret_leaks": secrets["leaks"],
    }  # fmt: skip
    _progress(f"before the kill trials: {json.dumps(before_kills)}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trajsynth-kill-") as kill_tmp:
        kills = kill_trials(Path(kill_tmp), args.kills, seed=args.seed, progress=_progress)
    kill_s = time.perf_counter() - started
    clean_s = (clean["seconds"] + again["seconds"]) / 2
    slowdown = faulty["seconds"] / max(clean_s, 1e-9)
    accepted = faulty["accepted"] / max(clean["accepted"], 1)
    rows.append(
        (
            "clean run, before / after",
            f"{clean['seconds']:.1f} s / {again['seconds']:.1f} s, {clean['accepted']} accepted, "
            f"{clean['failed']} failed",
        )
    )
    rows.append(
        (
            "faulty run",
            f"{faulty['seconds']:.1f} s, {faulty['accepted']} accepted, {faulty['failed']} failed",
        )
    )
    rows.append(("faults injected", ", ".join(f"{k}={v}" for k, v in sorted(injected.items()))))
    rows.append(("rollouts lost to the endpoint", f"{faulty['infra_lost']} (dropped, counted)"))
    rows.append(("request timeout / hang", f"{args.timeout_s:g} s / {args.hang_s:g} s"))
    hangs = injected.get("hang", 0)
    rows.append(("hangs × timeout (upper bound)", f"{hangs} × {args.timeout_s:g} s = "
                 f"{hangs * args.timeout_s:.0f} s"))  # fmt: skip
    hedged = f"{faulty['hedges']} / {faulty['timeouts']}"
    rows.append(("hedged requests / timeouts", f"{hedged} (a hang whose duplicate answered "
                 "costs the hedging delay, not a timeout)"))  # fmt: skip
    bad = [r for r in kills["results"] if not (r["identical"] and not r["orphans"]
                                               and not r["leftovers"])]  # fmt: skip
    rows.append(("kill -9 + resume identical", f"{kills['ok']} of {kills['trials']} "
                 f"(uninterrupted run {kills['reference_s']} s)"))  # fmt: skip
    per_kill = kill_s / max(kills["trials"], 1)
    rows.append(("kill trials wall time", f"{kill_s:.0f} s ({per_kill:.0f} s per trial: the "
                 "reference run shared, the killed and the resumed run)"))  # fmt: skip
    for r in bad:
        rows.append(("  not identical", json.dumps(r)[:300]))
    rows.append(("sandbox", sandbox))
    rows.append(("sandbox escapes", f"{escapes} ({', '.join(escaped) or 'none'})"))
    leaks = [(r["case"], r["leaks"]) for r in secrets["results"] if r["leaks"]]
    rows.append(("secret cases / leaks", f"{secrets['cases']} / {secrets['leaks']} {leaks or ''}"))

    _table(rows)
    print(
        json.dumps(
            {
                "accepted_vs_clean": round(accepted, 3),
                "infra_as_model_failures": faulty["infra"],
                "fault_slowdown": round(slowdown, 2),
                **fuzz_json,
                "corrupt_undetected": undetected,
                "kill_identical": kills["ok"],
                "kill_trials": kills["trials"],
                "sandbox_escapes": escapes,
                "secret_leaks": secrets["leaks"],
            }
        )
    )


if __name__ == "__main__":
    main()
