"""Dataset statistics for ``trajsynth stats``: counts and success rates by method, domain,
difficulty and capability, call/turn distributions, and pass@k where rollout counts exist.

Everything is computed on Arrow columns (no per-row Python objects), so it runs on millions of
rows. ``STATS_COLUMNS`` is the projection the CLI reads.
"""

from __future__ import annotations

from math import comb
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["STATS_COLUMNS", "dataset_stats", "pass_at_k"]

STATS_COLUMNS = [
    "id",
    "task_id",
    "success",
    "method",
    "domain",
    "difficulty",
    "capabilities",
    "num_tool_calls",
    "num_turns",
    "quality_score",
    "rollouts_total",
    "rollouts_passed",
]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021, Codex paper).

    >>> pass_at_k(8, 0, 1), pass_at_k(8, 8, 1), round(pass_at_k(8, 2, 8), 3)
    (0.0, 1.0, 1.0)
    >>> round(pass_at_k(4, 1, 2), 3)
    0.5
    """
    if n <= 0 or k > n:
        raise ValueError(f"need 0 < k <= n (n={n}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _group(table: pa.Table, key: str) -> list[dict[str, Any]]:
    if table.num_rows == 0:
        return []
    success = table.column("success")
    t = pa.table(
        {
            "key": pc.fill_null(table.column(key).cast(pa.string()), "(none)"),
            "ok": pc.cast(pc.fill_null(success, False), pa.int64()),
            "known": pc.cast(pc.is_valid(success), pa.int64()),
        }
    )
    agg = t.group_by("key").aggregate([("ok", "sum"), ("known", "sum"), ("key", "count")])
    out = []
    for row in agg.to_pylist():
        known = row["known_sum"]
        out.append(
            {
                "value": row["key"],
                "rows": row["key_count"],
                "success_rate": (row["ok_sum"] / known) if known else None,
            }
        )
    return sorted(out, key=lambda r: (-r["rows"], r["value"]))


def _pass_table(table: pa.Table, ks: tuple[int, ...]) -> dict[str, dict[str, float]]:
    """Per capability (and overall): mean pass@k over tasks that have rollout counts."""
    if "rollouts_total" not in table.column_names:
        return {}
    mask = pc.is_valid(table.column("rollouts_total"))
    t = table.filter(mask)
    if t.num_rows == 0:
        return {}
    # one entry per task (rows of the same task carry the same counts)
    seen: dict[str, tuple[int, int, list[str]]] = {}
    for tid, n, c, caps in zip(
        t.column("task_id").to_pylist(),
        t.column("rollouts_total").to_pylist(),
        t.column("rollouts_passed").to_pylist(),
        t.column("capabilities").to_pylist(),
        strict=True,
    ):
        seen.setdefault(tid, (int(n), int(c or 0), list(caps or [])))
    groups: dict[str, list[tuple[int, int]]] = {"(all)": []}
    for n, c, caps in seen.values():
        groups["(all)"].append((n, c))
        for cap in caps:
            groups.setdefault(cap, []).append((n, c))
    out = {}
    for name, pairs in sorted(groups.items()):
        row: dict[str, float] = {"tasks": float(len(pairs))}
        for k in ks:
            vals = [pass_at_k(n, c, k) for n, c in pairs if n >= k]
            if vals:
                row[f"pass@{k}"] = float(np.mean(vals))
        out[name] = row
    return out


def _describe(values: pa.ChunkedArray) -> dict[str, float] | None:
    arr = values.drop_null().to_numpy(zero_copy_only=False)
    if arr.size == 0:
        return None
    return {
        "mean": float(arr.mean()),
        "min": float(arr.min()),
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "max": float(arr.max()),
    }


def dataset_stats(table: pa.Table, *, ks: tuple[int, ...] = (1, 8)) -> dict[str, Any]:
    """Summary of a table holding (at least) :data:`STATS_COLUMNS`."""
    n = table.num_rows
    success = table.column("success")
    known = int(pc.sum(pc.cast(pc.is_valid(success), pa.int64())).as_py() or 0)
    ok = int(pc.sum(pc.cast(pc.fill_null(success, False), pa.int64())).as_py() or 0)
    caps = pc.list_flatten(table.column("capabilities")) if n else pa.array([], pa.string())
    cap_table = (
        pa.table(
            {"capability": caps, "success": pc.list_parent_indices(table.column("capabilities"))}
        )
        if n
        else None
    )
    by_capability: list[dict[str, Any]] = []
    if cap_table is not None and cap_table.num_rows:
        parent = cap_table.column("success").to_numpy()
        succ = success.to_pylist()
        expanded = pa.table(
            {
                "capability": cap_table.column("capability"),
                "success": pa.array([succ[i] for i in parent], pa.bool_()),
            }
        )
        by_capability = _group(expanded, "capability")
    return {
        "rows": n,
        "tasks": len(pc.unique(table.column("task_id"))) if n else 0,
        "success_known": known,
        "successes": ok,
        "success_rate": ok / known if known else None,
        "by_method": _group(table, "method"),
        "by_domain": _group(table, "domain"),
        "by_difficulty": _group(table, "difficulty"),
        "by_capability": by_capability,
        "tool_calls": _describe(table.column("num_tool_calls")),
        "turns": _describe(table.column("num_turns")),
        "quality_score": _describe(table.column("quality_score")),
        "pass_at_k": _pass_table(table, ks),
    }
