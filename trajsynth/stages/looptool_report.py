"""``looptool_report``: what a LoopTool run did, per iteration and per capability (the main job's
report; Zhang et al. 2025, "LoopTool: Closing the Data–Training Loop for Robust LLM Tool Calls",
arXiv:2511.09148).

Inputs, told apart by what the stages wrote on them: GCP episode rows (``extra["gcp"]``:
``policy`` student or a role such as ``teacher``, ``set`` data or probe, ``iteration``) and
dataset rows (``extra["looptool"]``: origin and the iteration that made them; rows without
it are the initial seed data).

1) accuracy (LoopTool's mastered share: exact multiset match at every step) per iteration,
   policy, set and capability;
2) the capabilities GCP flagged as weak: in the first iteration's probe of the training data,
   those at or below the student's overall accuracy there;
3) data counts by origin: the data each iteration trained on (iteration 1: the seed data;
   iteration k: what iteration k − 1 assembled) and what each iteration assembled;
4) ``report.json`` (``iterations: [{iteration, student: {capability: accuracy}, teacher:
   {...}, counts: {...}, ...}]``), ``report.md`` (the same as tables) and ``report.png``
   (student vs teacher accuracy on the held-out probe set across iterations, and the data
   composition) in the stage's artifacts folder and in the run folder.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field

from ..core.batch import to_records
from ..core.location import put_file
from ..core.schema import Trajectory
from .common.looptool import ORIGINS
from .context import Context
from .kinds import GlobalStage, Output, StageConfig
from .registry import register

__all__ = ["LoopToolReport", "LoopToolReportConfig", "build_report"]


class LoopToolReportConfig(StageConfig):
    probe_set: str = Field("probe", description="The held-out set the report compares on.")
    metric: Literal["exact_match", "tool_match", "call_match", "call_accuracy"] = Field(
        "exact_match",
        description="Accuracy of the report: exact_match (LoopTool's: every step's calls equal "
        "the gold as a multiset), tool_match (the right tools, arguments aside), call_match "
        "(BFCL), call_accuracy (share of call steps matched). exact_match is always added.",
    )
    baseline_set: str = Field(
        "static",
        description="Probe set name of the static-data baseline (a `gcp` stage with this "
        "`probe_set` probing the baseline student on the held-out tasks); compared with the "
        "last iteration when present.",
    )
    plots: bool = Field(True, description="Write report.png (needs matplotlib).")
    copy_to_run: bool = Field(True, description="Also write the files into the run folder.")


def _acc(rows: list[Trajectory], metric: str = "exact_match") -> dict[str, float]:
    per: dict[str, list[float]] = defaultdict(list)
    values = [float((r.reward_components or {}).get(metric, 0.0)) for r in rows]
    for r, v in zip(rows, values, strict=True):
        for cap in r.capabilities or ["untagged"]:
            per[cap].append(v)
    out = {c: round(sum(v) / len(v), 4) for c, v in sorted(per.items())}
    if rows:
        out["overall"] = round(sum(values) / len(values), 4)
    return out


def _weak_mean(acc: dict[str, float], weak: list[str]) -> float | None:
    """Mean accuracy over the weak capabilities the probe set has tasks for."""
    vals = [acc[c] for c in weak if c in acc]
    return round(sum(vals) / len(vals), 4) if vals else None


def build_report(
    rows: list[Trajectory],
    probe_set: str = "probe",
    metric: str = "exact_match",
    baseline_set: str = "static",
) -> dict[str, Any]:
    """Steps 1-3 (and step 4's baseline comparison) as a JSON-ready dict."""
    episodes: dict[tuple[str, str, int], list[Trajectory]] = defaultdict(list)
    data: list[Trajectory] = []
    for r in rows:
        gcp = (r.extra or {}).get("gcp")
        if r.method == "gcp" and gcp:
            episodes[(gcp.get("policy", "student"), gcp.get("set", "data"), r.iteration)].append(r)
        else:
            data.append(r)
    baseline = [r for (p, s, _), v in episodes.items() if p == "student" and s == baseline_set
                for r in v]  # fmt: skip
    iterations = sorted({k for (p, s, k) in episodes if p == "student" and s != baseline_set})
    teacher_rows = [
        r for (p, s, _), v in episodes.items() if p != "student" and s == probe_set for r in v
    ]
    teacher = _acc(teacher_rows, metric)
    # 2) weak capabilities from the first probe of the training data
    first = episodes.get(("student", "data", iterations[0]), []) if iterations else []
    first_acc = _acc(first, metric)
    weak = sorted(
        c for c, a in first_acc.items() if c != "overall" and a <= first_acc.get("overall", 0.0)
    )
    # 3) counts by origin
    made: dict[int, Counter[str]] = defaultdict(Counter)
    for r in data:
        lt = (r.extra or {}).get("looptool")
        made[lt["iteration"] if lt else 0][lt["origin"] if lt else "seed"] += 1
    out_iters = []
    for k in iterations:
        trained = made.get(k - 1, Counter())
        probe = episodes.get(("student", probe_set, k), [])
        out_iters.append(
            {
                "iteration": k,
                "student": _acc(probe, metric),
                "teacher": teacher,
                "student_exact_match": _acc(probe, "exact_match"),
                "student_tool_match": _acc(probe, "tool_match"),
                "teacher_exact_match": _acc(teacher_rows, "exact_match"),
                "teacher_tool_match": _acc(teacher_rows, "tool_match"),
                "student_on_data": _acc(episodes.get(("student", "data", k), []), metric),
                "counts": {o: trained.get(o, 0) for o in ORIGINS},
                "next_counts": {o: made.get(k, Counter()).get(o, 0) for o in ORIGINS},
            }
        )
    caps = sorted({c for it in out_iters for c in it["student"] if c != "overall"})
    rising = {c: [it["student"].get(c) for it in out_iters] for c in caps}
    weak_rise = None
    if out_iters:
        first_weak = _weak_mean(out_iters[0]["student"], weak)
        last_weak = _weak_mean(out_iters[-1]["student"], weak)
        if first_weak is not None and last_weak is not None:
            weak_rise = {
                "first": first_weak,
                "last": last_weak,
                "change": round(last_weak - first_weak, 4),
            }
    static = None
    if baseline and out_iters:
        base_acc = _acc(baseline, metric)
        last = out_iters[-1]["student"]
        static = {
            "student": base_acc,
            "student_tool_match": _acc(baseline, "tool_match"),
            "tasks": len(baseline),
            "loop_minus_static": round(last.get("overall", 0.0) - base_acc.get("overall", 0.0), 4),
            "loop_minus_static_weak": (
                round(_weak_mean(last, weak) - _weak_mean(base_acc, weak), 4)  # type: ignore[operator]
                if _weak_mean(last, weak) is not None and _weak_mean(base_acc, weak) is not None
                else None
            ),
        }
    return {
        "metric": metric,
        "probe_set": probe_set,
        "probe_tasks": len(episodes.get(("student", probe_set, iterations[0]), []))
        if iterations
        else 0,
        "weak_capabilities": weak,
        "iterations": out_iters,
        "student_by_capability": rising,
        "weak_capabilities_change": weak_rise,
        "static_baseline": static,
    }


def _markdown(report: dict[str, Any]) -> str:
    its = report["iterations"]
    caps = sorted(
        {c for it in its for c in it["student"]} | {c for it in its for c in it["teacher"]}
    )
    weak = (
        ", ".join(c if c in caps else f"{c} (no probe task)" for c in report["weak_capabilities"])
        or "none"
    )
    lines = [
        "# LoopTool report",
        "",
        f"Held-out probe set: {report['probe_tasks']} tasks; accuracy = {report['metric']}. "
        f"Weak capabilities (GCP, iteration 1): {weak}.",
        "",
        "| capability | "
        + " | ".join(f"student it{it['iteration']}" for it in its)
        + " | teacher |",
        "|---|" + "---|" * (len(its) + 1),
    ]
    teacher = its[0]["teacher"] if its else {}
    for c in caps:
        cells = [f"{it['student'].get(c, float('nan')):.2f}" for it in its]
        weak = " (weak)" if c in report["weak_capabilities"] else ""
        lines.append(
            f"| {c}{weak} | " + " | ".join(cells) + f" | {teacher.get(c, float('nan')):.2f} |"
        )
    tm = [it.get("student_tool_match", {}).get("overall") for it in its]
    if report["metric"] != "tool_match" and all(v is not None for v in tm):
        lines.append(
            "| overall, tool_match | "
            + " | ".join(f"{v:.2f}" for v in tm)
            + f" | {_teacher_tool(its):s} |"
        )
    change = report.get("weak_capabilities_change")
    if change:
        lines += [
            "",
            f"Weak capabilities, mean {report['metric']}: {change['first']:.2f} in iteration "
            f"{its[0]['iteration']} → {change['last']:.2f} in iteration {its[-1]['iteration']} "
            f"({change['change']:+.2f}).",
        ]
    static = report.get("static_baseline")
    if static:
        overall = static["student"].get("overall", 0.0)
        weak_line = (
            f", {static['loop_minus_static_weak']:+.2f} on the weak capabilities"
            if static.get("loop_minus_static_weak") is not None
            else ""
        )
        lines += [
            "",
            f"Static baseline (the same student and training budget on as many plain "
            f"teacher rows as the loop trained on): {report['metric']} {overall:.2f} on the "
            f"probe set; the loop's last iteration against it: "
            f"{static['loop_minus_static']:+.2f}{weak_line}.",
        ]
    lines += [
        "",
        "| iteration | trained on: " + " | ".join(ORIGINS) + " |",
        "|---|" + "---|" * len(ORIGINS),
    ]
    for it in its:
        lines.append(
            f"| {it['iteration']} | " + " | ".join(str(it["counts"][o]) for o in ORIGINS) + " |"
        )
    return "\n".join(lines) + "\n"


def _teacher_tool(its: list[dict[str, Any]]) -> str:
    """The teacher's overall tool_match, when the probe scored it."""
    value = its[0].get("teacher_tool_match", {}).get("overall") if its else None
    return f"{value:.2f}" if value is not None else "-"


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    its = report["iterations"]
    xs = [it["iteration"] for it in its]
    caps = sorted({c for it in its for c in it["student"] if c != "overall"})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, c in enumerate(["overall", *caps]):
        color = colors[i % len(colors)]
        width = 2.5 if c == "overall" or c in report["weak_capabilities"] else 1.0
        ax1.plot(
            xs,
            [it["student"].get(c, 0.0) for it in its],
            marker="o",
            color=color,
            lw=width,
            label=c,
        )
        if its and c in its[0]["teacher"]:
            ax1.axhline(its[0]["teacher"][c], color=color, ls="--", lw=0.8)
    ax1.set_xlabel("iteration")
    ax1.set_ylabel(f"held-out accuracy ({report['metric']})")
    ax1.set_title("student (lines) vs teacher (dashed)")
    ax1.set_xticks(xs)
    ax1.set_ylim(-0.02, 1.02)
    ax1.legend(fontsize=7, loc="best")
    bottom = [0] * len(its)
    for o in ORIGINS:
        vals = [it["counts"][o] for it in its]
        ax2.bar(xs, vals, bottom=bottom, label=o)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax2.set_xlabel("iteration")
    ax2.set_ylabel("training rows")
    ax2.set_title("data trained on, by origin")
    ax2.set_xticks(xs)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


@register
class LoopToolReport(GlobalStage[LoopToolReportConfig]):
    """LoopTool report: per-iteration, per-capability student vs teacher accuracy and counts."""

    name = "looptool_report"
    makes_artifact = True
    inputs_range = (1, None)

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        rows = [r for b in batches for r in to_records(b)]
        # 1-3)
        report = build_report(rows, cfg.probe_set, cfg.metric, cfg.baseline_set)
        # 4) files
        folder = ctx.artifacts_dir
        (folder / "report.json").write_text(json.dumps(report, indent=2))
        (folder / "report.md").write_text(_markdown(report))
        files = ["report.json", "report.md"]
        if cfg.plots and report["iterations"]:
            try:
                _plot(report, folder / "report.png")
                files.append("report.png")
            except ImportError:
                ctx.log.warning("matplotlib is not installed: no report.png")
        if cfg.copy_to_run:
            for name in files:
                put_file(folder / name, ctx.run_dir / name)  # a bucket URL too
        ctx.metrics.set("weak_capabilities", report["weak_capabilities"])
        for it in report["iterations"]:
            ctx.metrics.set(f"student.{it['iteration']}", it["student"].get("overall"))
        ctx.log.info("%s", _markdown(report))
        yield from ()
