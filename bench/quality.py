"""Benchmark: the quality stages at a million rows, and MinHash dedup against datasketch.

    python bench/quality.py [--rows 1000000] [--compare-rows 100000]

1) generate ``--rows`` synthetic trajectory rows column-wise with numpy/pyarrow (the
   ``synthetic`` stage makes one pydantic row at a time, ~0.3 ms each, too slow here): 1–6
   tool calls per row over three domains, a goal naming what each call does, tool results
   (3% errors), scores as the ``score`` stage would have written them, a difficulty label and
   a cluster id; 10% of rows are exact copies of an earlier row's content and 5% near copies
   (the same trajectory with one word added to the goal);
2) run the real stages in memory, batch by batch as the runner feeds them (no Parquet I/O;
   ``bench/store.py`` measures that): ``filter`` (min quality 0.7) → ``dedup`` (exact + MinHash
   LSH at Jaccard 0.85) → ``balance`` (30/50/20); rows/s per stage and the total;
3) on ``--compare-rows`` rows, from the same shingle sets: our vectorised MinHash signatures +
   LSH candidate pairs against datasketch's fastest path (``MinHash.bulk``, an LSH insertion
   session and one query per row) with the same permutations and the same bands; and the
   near-duplicate pairs each finds after exact verification.

Targets: the 1M pass ≤ 60 s on 2 cores; MinHash ≥ 10× datasketch. The last line is
one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trajsynth.core.batch import conform
from trajsynth.core.schema import ARROW_SCHEMA
from trajsynth.quality.columns import tokens
from trajsynth.quality.dedup import (
    jaccard_pairs,
    lsh_candidates,
    minhash_signatures,
    optimal_bands,
    priority_rank,
    shingles,
)
from trajsynth.stages import Context, ContextSpec
from trajsynth.stages.quality.balance import Balance
from trajsynth.stages.quality.dedup import Dedup
from trajsynth.stages.quality.filter import Filter, FilterConfig

# --------------------------------------------------------------------------------------
# 1) column-wise rows
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


def _strings(values: list[str]) -> pa.Array:
    return pa.array(values, pa.string())


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


def _entities(kind: np.ndarray, rng: np.random.Generator) -> pa.Array:
    """One entity string per call, by kind (vectorised)."""
    n = len(kind)
    num = pc.cast(pa.array(rng.integers(100, 99_999, n)), pa.string())
    city = _strings(CITIES).take(pa.array(rng.integers(0, len(CITIES), n)))
    name = _strings(NAMES).take(pa.array(rng.integers(0, len(NAMES), n)))
    options = {
        "city": city,
        "flight": pc.binary_join_element_wise("FL", num, ""),
        "amount": num,
        "path": pc.binary_join_element_wise("/home/", pc.utf8_lower(name), "/", num, ".txt", ""),
        "order": pc.binary_join_element_wise("#W", num, ""),
        "item": pc.binary_join_element_wise("IT", num, ""),
        "name": pc.binary_join_element_wise(name, " ", num, ""),
    }
    out = options["city"]
    for k, arr in options.items():
        out = pc.if_else(pa.array(kind == k), arr, out)
    return out


def make_rows(n: int, seed: int = 0) -> pa.Table:
    """``n`` rows under the trajectory schema, built column-wise (see the module docstring)."""
    rng = np.random.default_rng(seed)
    domain_names = list(DOMAINS)
    dom = rng.integers(0, len(domain_names), n)
    n_calls = rng.integers(1, 7, n)
    c_total = int(n_calls.sum())
    c_row = np.repeat(np.arange(n), n_calls)
    c_j = np.arange(c_total) - np.repeat(np.cumsum(n_calls) - n_calls, n_calls)
    act = rng.integers(0, 5, c_total)
    table_rows = [(d, a) + DOMAINS[d][a] for d in domain_names for a in range(5)]
    code = dom[c_row] * 5 + act
    tool_name = _strings([t[2] for t in table_rows]).take(pa.array(code))
    prefix = _strings([t[3] for t in table_rows]).take(pa.array(code))
    suffix = _strings([t[4] for t in table_rows]).take(pa.array(code))
    arg = _strings([t[5] for t in table_rows]).take(pa.array(code))
    kind = np.array([t[6] for t in table_rows])[code]
    entity = _entities(kind, rng)
    segment = pc.binary_join_element_wise(prefix, entity, suffix, "")
    # goal: "<verb> seg1, then seg2, then seg3."
    c_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(n_calls, out=c_off[1:])
    joined = pc.binary_join(
        pa.ListArray.from_arrays(pa.array(c_off.astype(np.int32)), segment), ", then "
    )
    verb = _strings(VERBS).take(pa.array(rng.integers(0, len(VERBS), n)))
    goal = pc.binary_join_element_wise(verb, " ", joined, ".", "")
    # calls and results
    call_id = pc.binary_join_element_wise("call_", pc.cast(pa.array(c_j), pa.string()), "")
    arguments = pc.binary_join_element_wise('{"', arg, '": "', entity, '"}', "")
    error = rng.random(c_total) < 0.03
    ok = pc.binary_join_element_wise('{"status": "ok", "result": "', entity, ' done"}', "")
    err = pc.binary_join_element_wise(
        '{"error": {"type": "not_found", "message": "unknown ', entity, '"}}', ""
    )
    observation = pc.if_else(pa.array(error), err, ok)
    reasoning = pc.binary_join_element_wise("Next I will ", segment, ".", "")
    last_entity = entity.take(pa.array(c_off[1:] - 1))
    answer = pc.binary_join_element_wise("All done, including ", last_entity, ".", "")
    # messages, flat: system, user, (assistant call, tool result) per call, final assistant
    m_count = 3 + 2 * n_calls
    m_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(m_count, out=m_off[1:])
    m_total = int(m_off[-1])
    role = np.full(m_total, 2, dtype=np.int8)  # assistant
    role[m_off[:-1]] = 0
    role[m_off[:-1] + 1] = 1
    call_pos = m_off[c_row] + 2 + 2 * c_j  # the assistant message making call c
    tool_pos = call_pos + 1
    role[tool_pos] = 3
    final_pos = m_off[1:] - 1
    # content: one take from [system | goals | observations | answers]
    pool = pa.concat_arrays(
        [_strings(["You are a helpful assistant with tools."]), goal, observation, answer]
    )
    take = np.full(m_total, -1, dtype=np.int64)
    take[m_off[:-1]] = 0
    take[m_off[:-1] + 1] = 1 + np.arange(n)
    take[tool_pos] = 1 + n + np.arange(c_total)
    take[final_pos] = 1 + n + c_total + np.arange(n)
    content = pool.take(pa.array(take, mask=take < 0))
    r_take = np.full(m_total, -1, dtype=np.int64)
    r_take[call_pos] = np.arange(c_total)
    msg_reasoning = reasoning.take(pa.array(r_take, mask=r_take < 0))
    t_take = np.full(m_total, -1, dtype=np.int64)
    t_take[tool_pos] = np.arange(c_total)
    tool_call_id = call_id.take(pa.array(t_take, mask=t_take < 0))
    tool_msg_name = tool_name.take(pa.array(t_take, mask=t_take < 0))
    is_call = np.zeros(m_total, dtype=np.int32)
    is_call[call_pos] = 1
    tc_off = np.zeros(m_total + 1, dtype=np.int32)
    np.cumsum(is_call, out=tc_off[1:])
    msg_type = ARROW_SCHEMA.field("messages").type.value_type
    tc_type = msg_type.field("tool_calls").type
    calls_struct = pa.StructArray.from_arrays(
        [call_id, tool_name, arguments], fields=list(tc_type.value_type)
    )
    tool_calls = pa.ListArray.from_arrays(pa.array(tc_off), calls_struct, type=tc_type)
    roles = _strings(["system", "user", "assistant", "tool"]).take(pa.array(role))
    flat = pa.StructArray.from_arrays(
        [roles, content, tool_calls, tool_call_id, tool_msg_name, msg_reasoning],
        fields=list(msg_type),
    )
    messages = pa.ListArray.from_arrays(
        pa.array(m_off.astype(np.int32)), flat, type=ARROW_SCHEMA.field("messages").type
    )
    tools_by_domain = _strings([_tools_json(d) for d in domain_names])
    base = pa.table(
        {
            "goal": goal,
            "domain": _strings(domain_names).take(pa.array(dom)),
            "tools": tools_by_domain.take(pa.array(dom)),
            "messages": messages,
            "num_turns": pa.array(n_calls + 1),
            "num_tool_calls": pa.array(n_calls),
        }
    )
    # planted duplicates: 10% exact copies, 5% near copies of an earlier row's content
    u = rng.random(n)
    src = np.arange(n)
    exact = (u < 0.10) & (src > 0)
    near = (u >= 0.10) & (u < 0.15) & (src > 0)
    copy = exact | near
    src[copy] = (rng.random(int(copy.sum())) * src[copy]).astype(np.int64)
    # copy an original, not another copy: follow each chain to the row that kept its content
    while True:
        nxt = src[src]
        if np.array_equal(nxt, src):
            break
        src = nxt
    table = base.take(pa.array(src))
    goal_col = table.column("goal").combine_chunks()
    table = table.set_column(
        0,
        "goal",
        pc.if_else(pa.array(near), pc.binary_join_element_wise(goal_col, " Thanks", ""), goal_col),
    )
    ids = pc.binary_join_element_wise("row-", pc.cast(pa.array(np.arange(n)), pa.string()), "")
    fmt = rng.random(n) < 0.02
    errors = pa.array([["wrong_type: amount"] if f else [] for f in fmt], pa.list_(pa.string()))
    comp_type = ARROW_SCHEMA.field("reward_components").type
    coherence = np.round(rng.beta(8, 2, n), 4)
    fmt_comp = fmt.astype(np.float64)
    keys = _strings(["coherence", "format_error"]).take(pa.array(np.tile([0, 1], n)))
    vals = pa.array(np.stack([coherence, fmt_comp], axis=1).ravel(), pa.float64())
    comps = pa.MapArray.from_arrays(
        pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32)), keys, vals, type=comp_type
    )
    extra = {
        "id": ids,
        "task_id": ids,
        "success": pa.array(rng.random(n) < 0.6),
        "format_errors": errors,
        "quality_score": pa.array(np.round(rng.beta(5, 2, n), 4)),
        "reward_components": comps,
        "difficulty": _strings(["easy", "medium", "hard"]).take(
            pa.array(rng.choice(3, n, p=[0.4, 0.45, 0.15]))
        ),
        "cluster_id": pa.array(rng.integers(0, 100, n)),
        "method": pa.array(np.full(n, "bench"), pa.string()),
    }
    for name, col in extra.items():
        table = table.append_column(name, col)
    table = conform(table)
    return table, {"exact_planted": int(exact.sum()), "near_planted": int(near.sum())}


# --------------------------------------------------------------------------------------
# 2) the stages, in memory
# --------------------------------------------------------------------------------------


def run_stage(stage, batches, stage_id: str) -> tuple[pa.Table, float, dict]:
    ctx = Context(ContextSpec(stage_id=stage_id, seed=0))
    start = time.perf_counter()
    out = [b for b in stage.process(iter(batches), ctx) if not hasattr(b, "name")]
    seconds = time.perf_counter() - start
    tables = [pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b for b in out]
    table = pa.concat_tables(tables) if tables else pa.table({})
    return table, seconds, ctx.metrics.snapshot()


def rss_mb() -> float:
    """Peak resident memory of this process in MB (since the last :func:`reset_peak`)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak() -> None:
    """Start a new peak-memory window (Linux: writing 5 to clear_refs resets VmHWM)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


# --------------------------------------------------------------------------------------
# 3) MinHash against datasketch
# --------------------------------------------------------------------------------------


def compare_datasketch(table: pa.Table, threshold: float = 0.85, num_perm: int = 128) -> dict:
    from datasketch import MinHash, MinHashLSH

    goal = tokens(table.column("goal"))
    sets = shingles(goal, table.column("messages"))
    bands = optimal_bands(threshold, num_perm)
    rank = priority_rank(table.column("id"), None)
    # ours: signatures + candidate pairs
    start = time.perf_counter()
    sig = minhash_signatures(sets, num_perm)
    ours_pairs = lsh_candidates(sig, *bands, rank)
    ours_s = time.perf_counter() - start
    # datasketch, fastest path, same shingles (their 8 bytes), same permutations and bands
    data = [
        [v.tobytes() for v in sets.values[sets.offsets[i] : sets.offsets[i + 1]]]
        for i in range(sets.rows)
    ]
    start = time.perf_counter()
    mh = MinHash.bulk(data, num_perm=num_perm)
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm, params=bands)
    with lsh.insertion_session() as session:
        for i, m in enumerate(mh):
            session.insert(i, m)
    ds_pairs = {(min(i, j), max(i, j)) for i, m in enumerate(mh) for j in lsh.query(m) if j != i}
    ds_s = time.perf_counter() - start
    ds_arr = np.array(sorted(ds_pairs), dtype=np.int64).reshape(-1, 2)
    ours_true = {
        tuple(p) for p in ours_pairs[jaccard_pairs(sets, ours_pairs) >= threshold].tolist()
    }
    ds_true = {tuple(p) for p in ds_arr[jaccard_pairs(sets, ds_arr) >= threshold].tolist()}
    return {
        "rows": sets.rows,
        "shingles": len(sets.values),
        "bands": bands,
        "ours_s": ours_s,
        "datasketch_s": ds_s,
        "speedup": ds_s / ours_s,
        "near_pairs_ours": len(ours_true),
        "near_pairs_datasketch": len(ds_true),
        "near_pairs_both": len(ours_true & ds_true),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--compare-rows", type=int, default=100_000)
    parser.add_argument("--batch-rows", type=int, default=50_000)
    args = parser.parse_args()
    load = os.getloadavg()[0]

    # 3) first, on its own rows (so the 1M tables are not held while datasketch runs)
    cmp_table, _ = make_rows(min(args.compare_rows, args.rows), seed=1)
    cmp = compare_datasketch(cmp_table)
    del cmp_table
    gc.collect()
    pa.default_memory_pool().release_unused()
    peak_compare = rss_mb()

    # 1) the rows
    start = time.perf_counter()
    table, planted = make_rows(args.rows)
    gen_s = time.perf_counter() - start
    n_rows = table.num_rows
    batches = table.to_batches(max_chunksize=args.batch_rows)
    del table
    gc.collect()
    pa.default_memory_pool().release_unused()  # give the generator's scratch memory back
    peak_generate = rss_mb()
    reset_peak()
    rss_start = rss_mb()

    # 2) the stages, each table released once the next stage has read it
    figures: dict[str, dict] = {}
    # the rule set the README's figures were measured with (`unsuccessful` was off by default)
    filt, s, m = run_stage(Filter(FilterConfig(unsuccessful=False)), batches, "filter")
    figures["filter"] = {"rows_in": n_rows, "rows_out": filt.num_rows, "s": s, "m": m}
    del batches
    ded, s, m = run_stage(Dedup(), filt.to_batches(max_chunksize=args.batch_rows), "dedup")
    figures["dedup"] = {"rows_in": filt.num_rows, "rows_out": ded.num_rows, "s": s, "m": m}
    del filt
    bal, s, m = run_stage(Balance(), ded.to_batches(max_chunksize=args.batch_rows), "balance")
    figures["balance"] = {"rows_in": ded.num_rows, "rows_out": bal.num_rows, "s": s, "m": m}
    total_s = sum(f["s"] for f in figures.values())
    peak_pass = rss_mb()

    load_after = os.getloadavg()[0]
    print(f"quality stages on {n_rows:,} rows ({os.cpu_count()} cores; load average {load:.2f}")
    print(f"  before, {load_after:.2f} after: other processes share these cores)")
    print(
        f"  generated column-wise in {gen_s:.1f}s; planted {planted['exact_planted']:,} exact and "
        f"{planted['near_planted']:,} near duplicates"
    )
    print(f"  {'stage':<8} {'rows in':>10} {'rows out':>10} {'seconds':>8} {'rows/s':>10}")
    for name, f in figures.items():
        rate = f["rows_in"] / f["s"]
        print(f"  {name:<8} {f['rows_in']:>10,} {f['rows_out']:>10,} {f['s']:>8.2f} {rate:>10,.0f}")
    rate = n_rows / total_s
    print(f"  {'total':<8} {n_rows:>10,} {bal.num_rows:>10,} {total_s:>8.2f} {rate:>10,.0f}")
    dc = figures["dedup"]["m"]["counters"]
    steps = ", ".join(
        f"{k} {v:.1f}s" for k, v in figures["dedup"]["m"]["values"]["seconds"].items()
    )
    print(
        f"  dedup dropped {dc['exact_duplicates']:,} exact and {dc['near_duplicates']:,} near "
        f"duplicates of the rows the filter kept ({steps})"
    )
    print(
        f"  peak RSS during the stages {peak_pass:,.0f} MB (the generated rows alone "
        f"{rss_start:,.0f} MB; peak while generating {peak_generate:,.0f} MB)"
    )
    print(
        f"MinHash + LSH candidates on {cmp['rows']:,} rows ({cmp['shingles']:,} shingles, "
        f"{cmp['bands'][0]} bands x {cmp['bands'][1]} rows, 128 permutations):"
    )
    print(f"  trajsynth (numpy)  {cmp['ours_s']:8.2f}s")
    print(f"  datasketch         {cmp['datasketch_s']:8.2f}s   ({cmp['speedup']:.1f}x slower)")
    print(
        f"  near-duplicate pairs (Jaccard >= 0.85) found: ours {cmp['near_pairs_ours']:,}, "
        f"datasketch {cmp['near_pairs_datasketch']:,}, both {cmp['near_pairs_both']:,}"
    )
    result = {
        "bench": "quality",
        "rows": n_rows,
        "generate_s": round(gen_s, 2),
        "filter_rows_per_s": round(figures["filter"]["rows_in"] / figures["filter"]["s"]),
        "dedup_rows_per_s": round(figures["dedup"]["rows_in"] / figures["dedup"]["s"]),
        "balance_rows_per_s": round(figures["balance"]["rows_in"] / figures["balance"]["s"]),
        "total_s": round(total_s, 2),
        "target_total_s": 60,
        "exact_duplicates": dc["exact_duplicates"],
        "near_duplicates": dc["near_duplicates"],
        "rows_out": bal.num_rows,
        "compare_rows": cmp["rows"],
        "minhash_s": round(cmp["ours_s"], 3),
        "datasketch_s": round(cmp["datasketch_s"], 3),
        "minhash_vs_datasketch": round(cmp["speedup"], 1),
        "near_pairs_ours": cmp["near_pairs_ours"],
        "near_pairs_datasketch": cmp["near_pairs_datasketch"],
        "peak_rss_mb": round(peak_pass),
        "rows_rss_mb": round(rss_start),
        "peak_rss_mb_generate": round(peak_generate),
        "peak_rss_mb_compare": round(peak_compare),
        "load_avg_before": round(load, 2),
        "load_avg_after": round(load_after, 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
