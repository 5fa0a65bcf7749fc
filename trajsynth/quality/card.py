"""The figures of a dataset card, and its Markdown body.

:func:`card_figures` measures exported rows (an Arrow table holding
:data:`~trajsynth.quality.stats.STATS_COLUMNS`) and, when the rows come from a run, what the
run recorded: ``run`` is ``{"pipeline", "run_id", "stage", "stages": {id: {"uses",
"rows_in", "rows_out"}}, "usage": {role: {counter: value}}}`` for the exported stage and the
stages upstream of it (the caller reads them from the run manifest). The figures:

- rows and tasks; rows (and success rate) by method, by domain and by difficulty;
- the pass@k histogram: tasks by how many of their rollouts passed (``"c/n"``), and the mean
  pass@1 and pass@n over those tasks;
- the dedup rate: rows the run's dedup stages removed ÷ rows they read (None without a run,
  0 stages when the run has none);
- the LLM cost of the run and the cost per accepted trajectory (that cost ÷ the exported
  rows); None ("not recorded") when the run recorded no cost — a figure is never made up.

:func:`card_markdown` renders them. Everything here is a pure function of its inputs.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .stats import dataset_stats, pass_at_k

__all__ = ["card_figures", "card_markdown", "pass_histogram"]

NOT_RECORDED = "not recorded"


def pass_histogram(table: pa.Table) -> dict[str, Any] | None:
    """Tasks by passed/total rollouts, with mean pass@1 and pass@n (None without counts)."""
    if "rollouts_total" not in table.column_names or table.num_rows == 0:
        return None
    t = table.filter(pc.is_valid(table.column("rollouts_total")))
    if t.num_rows == 0:
        return None
    per_task: dict[str, tuple[int, int]] = {}
    for tid, n, c in zip(
        t.column("task_id").to_pylist(),
        t.column("rollouts_total").to_pylist(),
        t.column("rollouts_passed").to_pylist(),
        strict=True,
    ):
        per_task.setdefault(tid, (int(n), int(c or 0)))
    counts: dict[str, int] = {}
    for n, c in sorted(per_task.values(), key=lambda nc: (nc[0], nc[1])):
        key = f"{c}/{n}"
        counts[key] = counts.get(key, 0) + 1
    pairs = [(n, c) for n, c in per_task.values() if n > 0]
    k = min((n for n, _ in pairs), default=0)
    out: dict[str, Any] = {"tasks": len(per_task), "counts": counts}
    if pairs:
        out["pass@1"] = sum(pass_at_k(n, c, 1) for n, c in pairs) / len(pairs)
        out[f"pass@{k}"] = sum(pass_at_k(n, c, k) for n, c in pairs) / len(pairs)
    return out


def _dedup(run: dict[str, Any]) -> dict[str, Any]:
    stages = [
        {"stage": sid, "rows_in": int(st["rows_in"]), "rows_out": int(st["rows_out"])}
        for sid, st in run.get("stages", {}).items()
        if st.get("uses") == "dedup"
    ]
    rows_in = sum(s["rows_in"] for s in stages)
    removed = sum(s["rows_in"] - s["rows_out"] for s in stages)
    return {"stages": stages, "rate": removed / rows_in if rows_in else None}


def _cost(run: dict[str, Any], rows: int) -> dict[str, Any] | None:
    usage = run.get("usage") or {}
    total: dict[str, Any] = {
        key: sum(float(u.get(key, 0)) for u in usage.values())
        for key in ("requests", "prompt_tokens", "completion_tokens", "cost_usd")
    }
    if not usage or not any(float(u.get("cost_usd", 0)) for u in usage.values()):
        return None
    total["per_accepted_usd"] = total["cost_usd"] / rows if rows else None
    total["roles"] = sorted(usage)
    return total


def card_figures(table: pa.Table, run: dict[str, Any] | None = None) -> dict[str, Any]:
    """The card's figures for the exported ``table`` (and the ``run`` it comes from)."""
    stats = dataset_stats(table)
    figures: dict[str, Any] = {
        "rows": stats["rows"],
        "tasks": stats["tasks"],
        "success_rate": stats["success_rate"],
        "by_method": stats["by_method"],
        "by_domain": stats["by_domain"],
        "by_difficulty": stats["by_difficulty"],
        "pass_histogram": pass_histogram(table),
        "run": None,
        "dedup": None,
        "cost": None,
    }
    if run is not None:
        figures["run"] = {k: run.get(k) for k in ("pipeline", "run_id", "stage")}
        figures["dedup"] = _dedup(run)
        figures["cost"] = _cost(run, stats["rows"])
    return figures


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _groups(title: str, key: str, groups: list[dict[str, Any]]) -> list[str]:
    lines = [f"### Rows by {title}", "", f"| {key} | rows | success |", "|---|---:|---:|"]
    lines += [f"| {g['value']} | {g['rows']:,} | {_pct(g['success_rate'])} |" for g in groups]
    return [*lines, ""]


def card_markdown(figures: dict[str, Any], *, title: str, usage: str = "") -> str:
    """The card's Markdown body (what follows the YAML header)."""
    run = figures["run"]
    lines = [f"# {title}", ""]
    source = (
        f": pipeline `{run['pipeline']}`, run `{run['run_id']}`, stage `{run['stage']}`."
        if run
        else " (exported from shards without a run manifest)."
    )
    lines.append("Synthetic tool-use agent trajectories made with trajsynth" + source)
    lines += ["", usage, ""] if usage else [""]
    lines += ["## Figures", ""]
    lines.append(
        f"{figures['rows']:,} rows, {figures['tasks']:,} tasks, success rate "
        f"{_pct(figures['success_rate'])}."
    )
    lines.append("")
    lines += _groups("method", "method", figures["by_method"])
    lines += _groups("domain", "domain", figures["by_domain"])
    lines += _groups("difficulty", "difficulty", figures["by_difficulty"])
    lines += ["### pass@k", ""]
    hist = figures["pass_histogram"]
    if hist is None:
        lines += ["No rollout counts in these rows (pass@k not measured).", ""]
    else:
        means = ", ".join(f"{k} {v:.1%}" for k, v in hist.items() if k.startswith("pass@"))
        lines += [f"{hist['tasks']:,} tasks with rollouts; mean {means}.", ""]
        lines += ["| rollouts passed | tasks |", "|---|---:|"]
        lines += [f"| {k} | {v:,} |" for k, v in hist["counts"].items()]
        lines.append("")
    lines += ["### Dedup", ""]
    dedup = figures["dedup"]
    if dedup is None:
        lines.append(f"Dedup rate: {NOT_RECORDED} (no run manifest).")
    elif dedup["rate"] is None:
        lines.append("Dedup rate: no dedup stage ran upstream of these rows.")
    else:
        detail = "; ".join(
            f"`{s['stage']}` {s['rows_in']:,} → {s['rows_out']:,}" for s in dedup["stages"]
        )
        lines.append(f"Dedup rate: {dedup['rate']:.1%} of rows removed as duplicates ({detail}).")
    lines += ["", "### Cost", ""]
    cost = figures["cost"]
    if cost is None:
        lines.append(f"Cost per accepted trajectory: {NOT_RECORDED}.")
    else:
        per = cost["per_accepted_usd"]
        lines.append(
            f"Cost per accepted trajectory: ${per:.6f} (LLM cost of the run ${cost['cost_usd']:.4f}"
            f" over {figures['rows']:,} exported rows; {cost['requests']:,.0f} requests, "
            f"{cost['prompt_tokens']:,.0f} prompt and {cost['completion_tokens']:,.0f} completion"
            " tokens)."
            if per is not None
            else f"Cost per accepted trajectory: {NOT_RECORDED}."
        )
    lines.append("")
    return "\n".join(lines)
