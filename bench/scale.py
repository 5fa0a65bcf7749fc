"""Benchmark: filter → dedup → balance at ten million rows in bounded memory, and the same
pipeline under the Ray executor.

    python bench/scale.py [--rows 10000000] [--baseline-rows 1000000] [--ray-rows 1000000]

1) write synthetic trajectories to Parquet shards column-wise with numpy/pyarrow (no pydantic
   rows): 1–6 tool calls over three domains, a goal naming each call, tool results, scores
   as the ``score`` stage writes them, a difficulty label and a cluster id. Each row's
   content is a pure function of a *content index*, so a row copies any earlier row's
   content across shards: 10% of rows are exact copies, 5% near copies (one word added to
   the goal). Goals end with five words drawn from 4,096 made-up ones, so that unrelated
   goals share few word trigrams (with goals built from a handful of templates only, the
   rows sharing a template, and with them the LSH candidate pairs, grow with the square of
   the row count, which is a property of such data, not of the pipeline);
2) run the pipeline ``filter`` (min quality 0.7) → ``dedup`` (exact + MinHash LSH at Jaccard
   0.85) → ``balance`` (30/50/20) with the local executor (a process pool on every core), at
   ``--baseline-rows`` (the baseline: the same code at 1M rows) and at ``--rows``; wall time
   and the peak resident memory of the whole process tree (the driver and its workers,
   sampled every 0.1 s with psutil) for each;
3) run the ``--ray-rows`` pipeline again under ``--executor ray`` (a local Ray runtime) and
   compare the ids of every stage's output with the local run.

Goals: peak RSS ≤ 4 GB at 10M rows; seconds ≤ 10 × the 1M figure. The last line is one JSON
object: ``rows``, ``seconds``, ``peak_rss_gb``, ``seconds_1m``, ``ratio``, ``ray_identical``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trajsynth.core.batch import conform
from trajsynth.core.schema import ARROW_SCHEMA
from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.executors import LocalExecutor
from trajsynth.pipeline.spec import resolve_pipeline
from trajsynth.quality.columns import mix64
from trajsynth.store.shards import write_shard

# --------------------------------------------------------------------------------------
# 1) rows, column-wise; content a function of the content index
# --------------------------------------------------------------------------------------

DOMAINS = {
    "travel": [
        ("search_flights", "search flights to ", "", "destination", "city"),
        ("book_flight", "book flight ", " for me", "flight_id", "flight"),
        ("convert_currency", "convert ", " dollars to euros", "amount", "amount"),
        ("search_hotels", "find a hotel in ", " for two nights", "city", "city"),
        ("get_weather", "check the weather in ", "", "city", "city"),
    ],
    "files": [
        ("list_dir", "list the folder ", "", "path", "path"),
        ("read_file", "read the file ", "", "path", "path"),
        ("write_file", "write a short note to ", "", "path", "path"),
        ("move_file", "move ", " to the archive", "src", "path"),
        ("delete_file", "delete the file ", "", "path", "path"),
    ],
    "commerce": [
        ("find_order", "look up order ", "", "order_id", "order"),
        ("return_item", "return the item ", " from my last order", "item_id", "item"),
        ("exchange_item", "exchange item ", " for a larger size", "item_id", "item"),
        ("get_user", "find the account of ", "", "name", "name"),
        ("cancel_order", "cancel order ", "", "order_id", "order"),
    ],
}
VERBS = ["Please", "Could you", "I need you to", "Help me", "Can you", "Kindly", "I want to"]
NAMES = ["Ada", "Bo", "Chen", "Dara", "Eli", "Farah", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea"]
CITIES = [
    f"{a}{b}" for a in ("Port ", "San ", "New ", "Old ", "") for b in [*NAMES, "Oslo", "Lima"]
]
#: 4,096 made-up words: each goal ends with a few of them (what the user adds about the
#: occasion), so unrelated goals share few word trigrams, as real requests do
_SYL = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "ti",
    "vo",
    "bel",
    "dor",
    "fen",
    "gar",
    "hul",
    "jin",
    "kor",
    "lum",
]
WORDS = [a + b + c for a in _SYL for b in _SYL for c in _SYL]
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def _h(key: np.ndarray, field: int) -> np.ndarray:
    """A uint64 hash of (key, field): the counter-based random draws of the generator."""
    with np.errstate(over="ignore"):
        return mix64(
            key.astype(np.uint64) * _GOLD + np.uint64((field * 0x2545F4914F6CDD1D) % 2**64)
        )


def _unit(key: np.ndarray, field: int) -> np.ndarray:
    return (_h(key, field) >> np.uint64(11)).astype(np.float64) / 2.0**53


def _pick(values: list[str], key: np.ndarray, field: int) -> pa.Array:
    idx = (_h(key, field) % np.uint64(len(values))).astype(np.int64)
    return pa.array(values, pa.string()).take(pa.array(idx))


def _tools_json(domain: str) -> str:
    return json.dumps(
        [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": f"{prefix.strip()} ...",
                    "parameters": {
                        "type": "object",
                        "properties": {arg: {"type": "string"}},
                        "required": [arg],
                    },
                },
            }
            for name, prefix, _s, arg, _k in DOMAINS[domain]
        ]
    )


def _entities(kind: np.ndarray, key: np.ndarray) -> pa.Array:
    """One entity string per call, by kind, drawn from the call's key."""
    num = pc.cast(pa.array(100 + (_h(key, 10) % np.uint64(999_900)).astype(np.int64)), pa.string())
    city = _pick(CITIES, key, 11)
    name = _pick(NAMES, key, 12)
    options = {
        "flight": pc.binary_join_element_wise("FL", num, ""),
        "amount": num,
        "path": pc.binary_join_element_wise("/home/", pc.utf8_lower(name), "/", num, ".txt", ""),
        "order": pc.binary_join_element_wise("#W", num, ""),
        "item": pc.binary_join_element_wise("IT", num, ""),
        "name": pc.binary_join_element_wise(name, " ", num, ""),
    }
    out = pc.binary_join_element_wise(city, " ", num, "")
    for k, arr in options.items():
        out = pc.if_else(pa.array(kind == k), arr, out)
    return out


def make_rows(start: int, n: int) -> pa.Table:
    """Rows ``start .. start+n`` of the synthetic stream (see the module docstring)."""
    i = np.arange(start, start + n, dtype=np.int64)
    # which content each row has: its own, or (15%) an earlier row's
    u = _unit(i, 1)
    copy = (u < 0.15) & (i > 0)
    near = (u >= 0.10) & copy
    c = i.copy()
    c[copy] = (_unit(i[copy], 2) * i[copy]).astype(np.int64)
    domain_names = list(DOMAINS)
    dom = (_h(c, 3) % np.uint64(3)).astype(np.int64)
    n_calls = (1 + _h(c, 4) % np.uint64(6)).astype(np.int64)
    c_total = int(n_calls.sum())
    c_row = np.repeat(np.arange(n), n_calls)
    c_j = np.arange(c_total) - np.repeat(np.cumsum(n_calls) - n_calls, n_calls)
    call_key = c[c_row] * 8 + c_j
    act = (_h(call_key, 5) % np.uint64(5)).astype(np.int64)
    table_rows = [(d, a) + DOMAINS[d][a] for d in domain_names for a in range(5)]
    code = dom[c_row] * 5 + act

    def col(k: int) -> pa.Array:
        return pa.array([t[k] for t in table_rows], pa.string()).take(pa.array(code))

    tool_name, prefix, suffix, arg = col(2), col(3), col(4), col(5)
    kind = np.array([t[6] for t in table_rows])[code]
    entity = _entities(kind, call_key)
    segment = pc.binary_join_element_wise(prefix, entity, suffix, "")
    c_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(n_calls, out=c_off[1:])
    joined = pc.binary_join(
        pa.ListArray.from_arrays(pa.array(c_off.astype(np.int32)), segment), ", then "
    )
    verb = _pick(VERBS, c, 6)
    note = pc.binary_join_element_wise(*[_pick(WORDS, c, 30 + k) for k in range(5)], " ")
    goal = pc.binary_join_element_wise(verb, " ", joined, " (", note, ").", "")
    goal = pc.if_else(pa.array(near), pc.binary_join_element_wise(goal, " Thanks", ""), goal)
    call_id = pc.binary_join_element_wise("call_", pc.cast(pa.array(c_j), pa.string()), "")
    arguments = pc.binary_join_element_wise('{"', arg, '": "', entity, '"}', "")
    error = _unit(call_key, 7) < 0.03
    ok = pc.binary_join_element_wise('{"status": "ok", "result": "', entity, ' done"}', "")
    err = pc.binary_join_element_wise('{"error": {"type": "not_found"}}', "", "")
    observation = pc.if_else(pa.array(error), err, ok)
    last_entity = entity.take(pa.array(c_off[1:] - 1))
    answer = pc.binary_join_element_wise("All done, including ", last_entity, ".", "")
    # messages, flat: system, user, (assistant call, tool result) per call, final assistant
    m_count = 3 + 2 * n_calls
    m_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(m_count, out=m_off[1:])
    m_total = int(m_off[-1])
    role = np.full(m_total, 2, dtype=np.int8)
    role[m_off[:-1]] = 0
    role[m_off[:-1] + 1] = 1
    call_pos = m_off[c_row] + 2 + 2 * c_j
    tool_pos = call_pos + 1
    role[tool_pos] = 3
    final_pos = m_off[1:] - 1
    pool = pa.concat_arrays(
        [pa.array(["You are a helpful assistant with tools."]), goal, observation, answer]
    )
    take = np.full(m_total, -1, dtype=np.int64)
    take[m_off[:-1]] = 0
    take[m_off[:-1] + 1] = 1 + np.arange(n)
    take[tool_pos] = 1 + n + np.arange(c_total)
    take[final_pos] = 1 + n + c_total + np.arange(n)
    content = pool.take(pa.array(take, mask=take < 0))
    t_take = np.full(m_total, -1, dtype=np.int64)
    t_take[tool_pos] = np.arange(c_total)
    t_mask = pa.array(t_take, mask=t_take < 0)
    is_call = np.zeros(m_total, dtype=np.int32)
    is_call[call_pos] = 1
    tc_off = np.zeros(m_total + 1, dtype=np.int32)
    np.cumsum(is_call, out=tc_off[1:])
    msg_type = ARROW_SCHEMA.field("messages").type.value_type
    tc_type = msg_type.field("tool_calls").type
    calls = pa.StructArray.from_arrays(
        [call_id, tool_name, arguments], fields=list(tc_type.value_type)
    )
    flat = pa.StructArray.from_arrays(
        [
            pa.array(["system", "user", "assistant", "tool"]).take(pa.array(role)),
            content,
            pa.ListArray.from_arrays(pa.array(tc_off), calls, type=tc_type),
            call_id.take(t_mask),
            tool_name.take(t_mask),
            pa.nulls(m_total, pa.string()),
        ],
        fields=list(msg_type),
    )
    messages = pa.ListArray.from_arrays(
        pa.array(m_off.astype(np.int32)), flat, type=ARROW_SCHEMA.field("messages").type
    )
    # per-row fields (not content): ids, scores, labels
    ids = pc.binary_join_element_wise("row-", pc.cast(pa.array(i), pa.string()), "")
    coherence = np.round(0.4 + 0.6 * _unit(i, 20), 4)
    fmt = _unit(i, 21) < 0.02
    comps = pa.MapArray.from_arrays(
        pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32)),
        pa.array(["coherence", "format_error"]).take(pa.array(np.tile([0, 1], n))),
        pa.array(np.stack([coherence, fmt.astype(np.float64)], axis=1).ravel()),
        type=ARROW_SCHEMA.field("reward_components").type,
    )
    d = _unit(i, 22)
    difficulty = pa.array(["easy", "medium", "hard"]).take(
        pa.array(np.where(d < 0.4, 0, np.where(d < 0.85, 1, 2)))
    )
    table = pa.table(
        {
            "id": ids,
            "task_id": pc.binary_join_element_wise("task-", pc.cast(pa.array(c), pa.string()), ""),
            "goal": goal,
            "domain": pa.array(domain_names).take(pa.array(dom)),
            "tools": pa.array([_tools_json(x) for x in domain_names]).take(pa.array(dom)),
            "messages": messages,
            "num_turns": pa.array(n_calls + 1),
            "num_tool_calls": pa.array(n_calls),
            "success": pa.array(_unit(i, 23) < 0.6),
            "reward_components": comps,
            "quality_score": pa.array(np.round(0.55 + 0.45 * _unit(i, 24), 4)),
            "difficulty": difficulty,
            "cluster_id": pa.array((_h(i, 25) % np.uint64(100)).astype(np.int64)),
            "method": pa.array(np.full(n, "bench")),
        }
    )
    return conform(table)


def write_rows(folder: Path, rows: int, shard_rows: int) -> float:
    """``rows`` rows as Parquet shards of ``shard_rows``; returns the seconds it took."""
    start = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    for k, s in enumerate(range(0, rows, shard_rows)):
        write_shard(make_rows(s, min(shard_rows, rows - s)), folder / f"part-{k:05d}.parquet")
    return time.perf_counter() - start


# --------------------------------------------------------------------------------------
# 2) the pipeline, with the process tree's memory sampled
# --------------------------------------------------------------------------------------

STAGES = ("kept", "unique", "mixed")


def pipeline(source: Path, shard_rows: int, executor: str) -> dict:
    return {
        "name": "scale",
        "defaults": {"seed": 0, "shard_rows": shard_rows, "executor": executor},
        "stages": [
            # the rule set the README's figures were measured with (`unsuccessful` was off)
            {"id": "kept", "uses": "filter", "from": str(source), "with": {"unsuccessful": False}},
            {"id": "unique", "uses": "dedup", "from": "kept"},
            {"id": "mixed", "uses": "balance", "from": "unique"},
        ],
    }


class TreeMemory:
    """Peak resident memory of this process and all its descendants (sampled)."""

    def __init__(self, every: float = 0.1) -> None:
        import psutil

        self._me = psutil.Process()
        self._psutil = psutil
        self.every = every
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        total = 0
        procs = [self._me]
        with contextlib.suppress(self._psutil.Error):
            procs += self._me.children(recursive=True)
        for p in procs:
            try:
                total += p.memory_info().rss
            except self._psutil.Error:
                continue
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.every)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


def run(source: Path, out: Path, shard_rows: int, executor: str, workers: int) -> dict:
    """One pipeline run: seconds, peak RSS (GB), rows per stage and per-stage seconds."""
    spec = pipeline(source, shard_rows, executor)
    ex = LocalExecutor(workers=workers) if executor == "local" else None
    try:
        with TreeMemory() as mem:
            start = time.perf_counter()
            result = run_pipeline(resolve_pipeline(spec), out=out, executor=ex, force=True)
            seconds = time.perf_counter() - start
    finally:
        if ex is not None:
            ex.close()
    stages = result.manifest.stages
    return {
        "seconds": seconds,
        "peak_rss_gb": mem.peak / 2**30,
        "rows": {s: stages[s].rows_out() for s in STAGES},
        "stage_seconds": {s: stages[s].seconds for s in STAGES},
        "dedup": stages["unique"].metrics.get("counters", {}),
    }


def ids_of(run_dir: Path) -> dict[str, list[str]]:
    from trajsynth.store import read_table

    return {s: read_table(run_dir / s, columns=["id"]).column("id").to_pylist() for s in STAGES}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--baseline-rows", type=int, default=1_000_000)
    ap.add_argument("--ray-rows", type=int, default=1_000_000, help="0: skip the Ray run")
    ap.add_argument("--shard-rows", type=int, default=250_000)
    ap.add_argument("--workers", type=int, default=0, help="processes (0: one per core)")
    ap.add_argument("--work-dir", type=Path, default=None, help="default: a temporary folder")
    args = ap.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="trajsynth-scale-"))
    runs: dict[str, dict] = {}
    try:
        sizes = sorted({args.baseline_rows, args.rows} | ({args.ray_rows} - {0}))
        data = {}
        for n in sizes:
            data[n] = work / f"data-{n}"
            secs = write_rows(data[n], n, min(args.shard_rows, n))
            print(f"wrote {n:,} rows in {secs:.1f} s", file=sys.stderr)
        shard_rows = 50_000
        for n in sizes:
            runs[f"local {n:,}"] = run(
                data[n], work / f"local-{n}", shard_rows, "local", args.workers
            )
            print(f"local {n:,}: {runs[f'local {n:,}']['seconds']:.1f} s", file=sys.stderr)
        identical = None
        if args.ray_rows:
            import ray

            ray.init(
                num_cpus=args.workers or None,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}},
            )
            try:
                n = args.ray_rows
                runs[f"ray {n:,}"] = run(data[n], work / f"ray-{n}", shard_rows, "ray", 0)
            finally:
                ray.shutdown()
            identical = ids_of(work / f"ray-{n}") == ids_of(work / f"local-{n}")
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)

    print(f"{'run':<16} {'seconds':>8} {'peak GB':>8} {'kept':>10} {'unique':>10} {'mixed':>10}")
    for name, r in runs.items():
        rows = r["rows"]
        print(
            f"{name:<16} {r['seconds']:>8.1f} {r['peak_rss_gb']:>8.2f} {rows['kept']:>10,} "
            f"{rows['unique']:>10,} {rows['mixed']:>10,}"
        )
        stage_s = ", ".join(f"{s} {v:.1f}s" for s, v in r["stage_seconds"].items())
        print(f"{'':<16} stages: {stage_s}; dedup: {r['dedup']}")
    main_run = runs[f"local {args.rows:,}"]
    base = runs[f"local {args.baseline_rows:,}"]
    print(
        json.dumps(
            {
                "rows": args.rows,
                "seconds": round(main_run["seconds"], 1),
                "peak_rss_gb": round(main_run["peak_rss_gb"], 2),
                "baseline_rows": args.baseline_rows,
                "seconds_1m": round(base["seconds"], 1),
                "peak_rss_gb_1m": round(base["peak_rss_gb"], 2),
                "ratio": round(main_run["seconds"] / base["seconds"], 2),
                "ray_rows": args.ray_rows,
                "ray_identical": identical,
            }
        )
    )


if __name__ == "__main__":
    main()
