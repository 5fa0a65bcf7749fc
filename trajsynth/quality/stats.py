"""Dataset statistics for ``trajsynth stats``: counts and success rates by method, domain,
difficulty and capability, call/turn distributions, pass@k where rollout counts exist,
quality and difficulty histograms, and cluster summaries; plus, from a run manifest, what the
quality stages dropped and why (:func:`manifest_summary`).

Everything is computed on Arrow columns (no per-row Python objects), so it runs on millions of
rows. ``STATS_COLUMNS`` is the projection the CLI reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from math import comb
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .filters import RULES

__all__ = [
    "STATS_COLUMNS",
    "cluster_stats",
    "dataset_stats",
    "histogram",
    "manifest_summary",
    "outcome_counts",
    "pass_at_k",
]

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
    "goal",
    "difficulty_score",
    "cluster_id",
]


def outcome_counts(columns: Iterable[pa.Array | pa.ChunkedArray]) -> dict[str, int]:
    """Rows by verdict over ``success`` columns: ``success`` (true), ``failed`` (false) and
    ``unknown`` (null: nothing gave the row a verdict).

    >>> outcome_counts([pa.array([True, False, None, True])])
    {'success': 2, 'failed': 1, 'unknown': 1}
    """
    out = {"success": 0, "failed": 0, "unknown": 0}
    for col in columns:
        true = int(pc.sum(pc.cast(pc.fill_null(col, False), pa.int64())).as_py() or 0)
        out["success"] += true
        out["unknown"] += col.null_count
        out["failed"] += len(col) - col.null_count - true
    return out


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
        "quality_histogram": histogram(_optional(table, "quality_score")),
        "difficulty_histogram": histogram(_optional(table, "difficulty_score")),
        "clusters": cluster_stats(table),
    }


def _optional(table: pa.Table, name: str) -> pa.ChunkedArray | None:
    return table.column(name) if name in table.column_names else None


def histogram(
    values: pa.ChunkedArray | pa.Array | None, bins: int = 10, lo: float = 0.0, hi: float = 1.0
) -> dict[str, Any] | None:
    """Counts of the non-null values in ``bins`` equal bins over [lo, hi] (last bin closed).

    >>> histogram(pa.array([0.05, 0.5, 1.0, None, 0.95]), bins=2)["counts"]
    [1, 3]
    """
    if values is None:
        return None
    arr = pc.drop_null(values).to_numpy(zero_copy_only=False).astype(np.float64)
    if arr.size == 0:
        return None
    edges = np.linspace(lo, hi, bins + 1)
    counts, _ = np.histogram(np.clip(arr, lo, hi), bins=edges)
    return {"edges": [round(float(e), 6) for e in edges], "counts": counts.tolist()}


def cluster_stats(table: pa.Table, top: int = 5) -> dict[str, Any] | None:
    """Cluster count, size entropy (bits and normalised) and the largest clusters, each with
    the goal of its first row as a sample (the diversity stage's metrics name the goal
    nearest each centroid)."""
    if "cluster_id" not in table.column_names:
        return None
    col = table.column("cluster_id")
    valid = pc.is_valid(col)
    if not pc.any(valid).as_py():
        return None
    t = table.filter(valid)
    counts = t.group_by("cluster_id").aggregate([("cluster_id", "count")])
    sizes = counts.column("cluster_id_count").to_numpy()
    ids = counts.column("cluster_id").to_numpy()
    p = sizes / sizes.sum()
    h = float(-(p * np.log2(p)).sum()) if len(p) > 1 else 0.0
    order = np.argsort(-sizes, kind="stable")[:top]
    largest = []
    labels = t.column("cluster_id").to_numpy()
    goals = t.column("goal") if "goal" in t.column_names else None
    for i in order:
        first = int(np.argmax(labels == ids[i]))
        largest.append(
            {
                "cluster": int(ids[i]),
                "size": int(sizes[i]),
                "sample_goal": goals[first].as_py() if goals is not None else None,
            }
        )
    return {
        "clusters": len(ids),
        "entropy_bits": h,
        "normalized_entropy": h / float(np.log2(len(ids))) if len(ids) > 1 else 0.0,
        "largest": largest,
    }


def manifest_summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """What each quality stage of a run did, from its manifest's stage metrics.

    Returns ``{"filter": [...], "dedup": [...], "balance": [...], "diversity": [...],
    "difficulty": [...]}``, one entry per stage of that kind: the filter's per-rule counts,
    dedup's duplicate counts, balance's plan, the cluster summary, the label counts.
    """
    out: dict[str, list[dict[str, Any]]] = {
        "filter": [],
        "dedup": [],
        "balance": [],
        "diversity": [],
        "difficulty": [],
    }
    for sid, st in (manifest.get("stages") or {}).items():
        uses = st.get("uses")
        metrics = st.get("metrics") or {}
        counters = metrics.get("counters", {})
        values = metrics.get("values", {})
        if uses == "filter":
            named = {k.split(".", 1)[1] for k in counters if k.startswith(("dropped.", "failing."))}
            rules = [r for r in RULES if r in named] + sorted(named - set(RULES))
            out["filter"].append(
                {
                    "stage": sid,
                    "rows_in": counters.get("rows_in", 0),
                    "kept": counters.get("kept", 0),
                    "rules": [
                        {
                            "rule": r,
                            "dropped": counters.get(f"dropped.{r}", 0),
                            "failing": counters.get(f"failing.{r}", 0),
                        }
                        for r in rules
                    ],
                    "thresholds": values.get("thresholds", {}),
                }
            )
        elif uses == "dedup":
            out["dedup"].append({"stage": sid, **counters, "lsh": values.get("lsh", {})})
        elif uses == "balance":
            out["balance"].append({"stage": sid, **(values.get("plan") or {})})
        elif uses == "diversity":
            out["diversity"].append({"stage": sid, **(values.get("clusters") or {})})
        elif uses in ("difficulty", "difficulty_calibrate"):
            out["difficulty"].append(
                {
                    "stage": sid,
                    **{k: counters.get(k, 0) for k in ("easy", "medium", "hard")},
                    "measured": counters.get("measured", 0),
                    "heuristic": counters.get("heuristic", 0),
                    "calibration": values.get("calibration"),
                }
            )
    return {k: v for k, v in out.items() if v}
