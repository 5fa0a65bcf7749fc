"""``looptool_report``: what a LoopTool run did, per iteration and per capability (the main job's
report; Zhang et al. 2025, "LoopTool: Closing the Data–Training Loop for Robust LLM Tool Calls",
arXiv:2511.09148).

Inputs, told apart by what the stages wrote on them: GCP episode rows (``extra["gcp"]``:
``policy`` student or a role such as ``teacher``, ``set`` data or probe, ``iteration``) and
dataset rows (``extra["looptool"]``: origin and the iteration that made them; rows without
it are the initial seed data); rows with a ``difficulty`` label are the final dataset (the
``difficulty`` stage graded them).

1) accuracy (LoopTool's mastered share: exact multiset match at every step) per iteration,
   policy, set and capability, each with its 95% bootstrap interval over the probe tasks
   (:func:`~trajsynth.quality.intervals.mean_interval`);
2) the capabilities GCP flagged as weak: in the first iteration's probe of the training data,
   those at or below the student's overall accuracy there;
3) data counts by origin: the data each iteration trained on (iteration 1: the seed data;
   iteration k: what iteration k − 1 assembled) and what each iteration assembled;
4) ``report.json`` (``iterations: [{iteration, student: {capability: accuracy},
   student_ci: {capability: [low, high]}, teacher: {...}, counts: {...}, ...}]``),
   ``report.md`` (the same as tables) and ``report.png`` (student vs teacher accuracy on the
   held-out probe set across iterations, and the data composition) in the stage's artifacts
   folder and in the run folder;
5) the static baseline (a ``gcp`` stage with ``probe_set: static``) against the last
   iteration on the same tasks: loop − static overall and per capability with the paired
   bootstrap interval (:func:`~trajsynth.quality.intervals.paired_difference`), and the
   verdict it supports (``verdict``: the loop beats the static data only when the whole
   interval is above 0);
6) where rows carry ``label_noise``'s truth: JGLV's precision and recall against it, per
   iteration and in total (``label_noise``);
7) rows graded by ``difficulty`` (the final dataset, given as one more input) — its
   easy/medium/hard counts against the target ``mix`` (by how many rows a bucket misses its
   share) and the wrong labels left in it (``final_dataset``);
8) ``sections``: further report sections (``{"title", "lines"}``, lines of markdown),
   printed at the end of ``report.md``. The stage adds one for every stage in its ``needs:``
   whose artifacts hold a benchmark's figures: an ``eval_bfcl`` stage's ``bfcl.json``
   (:func:`bfcl_section`: accuracy per category of each model it scored, the questions per
   category, the training data's contamination; the figures also under ``bfcl`` in
   ``report.json``). A caller of :func:`build_report` may append its own before rendering.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field

from ...core.batch import to_records
from ...core.extras import GcpRecord, LoopToolOrigin, get
from ...core.location import put_file
from ...core.schema import Trajectory
from ...quality.balance import BUCKETS
from ...quality.intervals import mean_interval, paired_difference
from ..common.label_noise import noise_of
from ..common.looptool import ORIGINS
from ..context import Context
from ..kinds import GlobalStage, Output, StageConfig
from ..registry import register

__all__ = ["LoopToolReport", "LoopToolReportConfig", "bfcl_section", "build_report"]


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
    mix: tuple[float, float, float] = Field(
        (0.3, 0.5, 0.2),
        description="Target shares of easy, medium, hard rows in the final dataset (the "
        "`balance` stage's mix), against which the report says what the dataset misses.",
    )
    plots: bool = Field(True, description="Write report.png (needs matplotlib).")
    copy_to_run: bool = Field(True, description="Also write the files into the run folder.")


def _scores(rows: list[Trajectory], metric: str) -> dict[str, list[float]]:
    """Per capability (and ``overall``) the per-task scores of ``metric``."""
    per: dict[str, list[float]] = defaultdict(list)
    values = [float((r.reward_components or {}).get(metric, 0.0)) for r in rows]
    for r, v in zip(rows, values, strict=True):
        for cap in r.capabilities or ["untagged"]:
            per[cap].append(v)
    out = dict(sorted(per.items()))
    if rows:
        out["overall"] = values
    return out


def _acc(rows: list[Trajectory], metric: str = "exact_match") -> dict[str, float]:
    return {c: round(sum(v) / len(v), 4) for c, v in _scores(rows, metric).items()}


def _ci(rows: list[Trajectory], metric: str) -> dict[str, list[float | None]]:
    """Step 1's 95% bootstrap interval of every accuracy (resampling the probe tasks)."""
    return {c: list(mean_interval(v)[1]) for c, v in _scores(rows, metric).items()}


def _paired(
    loop: list[Trajectory], static: list[Trajectory]
) -> tuple[list[Trajectory], list[Trajectory]] | None:
    """The two students' episodes on the same probe tasks, in the same order (by task id),
    or None when they were not probed on the same tasks."""
    a = sorted(loop, key=lambda r: r.task_id)
    b = sorted(static, key=lambda r: r.task_id)
    if not a or [r.task_id for r in a] != [r.task_id for r in b]:
        return None
    return a, b


def _difference(
    loop: list[Trajectory], static: list[Trajectory], metric: str
) -> dict[str, dict[str, Any]]:
    """Step 5: loop − static per capability and overall on the same tasks, with the paired
    bootstrap interval."""
    paired = _paired(loop, static)
    if paired is None:
        return {}
    a, b = _scores(paired[0], metric), _scores(paired[1], metric)
    out = {}
    for c in a:
        diff, ci = paired_difference(a[c], b[c])
        out[c] = {"difference": diff, "ci": list(ci), "tasks": len(a[c])}
    return out


def _verdict(diff: dict[str, Any] | None) -> str:
    """Whether the loop beats the static data, in words, from the overall difference's
    interval."""
    if not diff or diff["ci"][0] is None:
        return "not measured"
    lo, hi = diff["ci"]
    if lo > 0:
        return "the loop beats the static data"
    if hi < 0:
        return "the static data beats the loop"
    return "no difference the probe set can detect"


def _weak_mean(acc: dict[str, float], weak: list[str]) -> float | None:
    """Mean accuracy over the weak capabilities the probe set has tasks for."""
    vals = [acc[c] for c in weak if c in acc]
    return round(sum(vals) / len(vals), 4) if vals else None


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def _label_noise(
    episodes: dict[tuple[str, str, int], list[Trajectory]],
    data: list[Trajectory],
    made: dict[int, list[Trajectory]],
    iterations: list[int],
) -> dict[str, Any] | None:
    """Step 6: JGLV against the truth ``label_noise`` kept on the rows (None when no row
    carries it). Per iteration: the wrong labels in the data the student trained on, in what
    GCP probed, and those the student failed at the wrong step (what JGLV can judge); the
    labels JGLV replaced (``relabelled``), the wrong ones among them (``found``) and the right
    ones (``false_alarms``). Precision = found / relabelled; recall = found / wrong labels
    GCP probed (JGLV only sees what GCP probed)."""
    if not any(noise_of(r.extra) for r in data) and not any(
        noise_of(r.extra) for v in episodes.values() for r in v
    ):
        return None
    seed = made.get(0, [])
    out_iters: list[dict[str, Any]] = []
    totals: Counter[str] = Counter()
    for k in iterations:
        trained = made.get(k - 1, [])
        probed = episodes.get(("student", "data", k), [])
        noisy = [e for e in probed if noise_of(e.extra)]
        judged = []
        for e in noisy:
            gcp, noise = get(e.extra, GcpRecord), noise_of(e.extra) or {}
            if gcp is not None and gcp.status == "failed" and gcp.step == noise.get("step"):
                judged.append(e)
        judged_ids = {e.parent_ids[0] for e in judged if e.parent_ids}
        relabelled = [r for r in made.get(k, []) if r.method == "jglv"]
        found = sum(1 for r in relabelled if r.parent_ids and r.parent_ids[0] in judged_ids)
        counts = {
            "trained_on": len(trained),
            "trained_on_noisy": sum(1 for r in trained if noise_of(r.extra)),
            "probed": len(probed),
            "probed_noisy": len(noisy),
            "judged_noisy": len(judged),
            "relabelled": len(relabelled),
            "found": found,
            "false_alarms": len(relabelled) - found,
        }
        totals.update(counts)
        out_iters.append(
            {
                "iteration": k,
                **counts,
                "precision": _ratio(found, len(relabelled)),
                "recall": _ratio(found, len(noisy)),
            }
        )
    return {
        "seed_rows": len(seed),
        "seed_noisy": sum(1 for r in seed if noise_of(r.extra)),
        "rate": _ratio(sum(1 for r in seed if noise_of(r.extra)), len(seed)),
        "kinds": dict(Counter(n["kind"] for r in seed if (n := noise_of(r.extra)))),
        "iterations": out_iters,
        "total": {
            **dict(totals),
            "precision": _ratio(totals["found"], totals["relabelled"]),
            "recall": _ratio(totals["found"], totals["probed_noisy"]),
        },
    }


def _final(rows: list[Trajectory], mix: tuple[float, float, float]) -> dict[str, Any] | None:
    """Step 7: the final dataset's difficulty mix against the target, and the wrong labels
    left in it."""
    if not rows:
        return None
    counts: Counter[str | None] = Counter(r.difficulty for r in rows)
    total = sum(mix)
    target = dict(zip(BUCKETS, (m / total for m in mix), strict=True))
    # rows a bucket lacks for its target share of this many rows (0: met)
    short = {b: max(0, math.ceil(target[b] * len(rows) - counts.get(b, 0) - 1e-9)) for b in BUCKETS}
    return {
        "rows": len(rows),
        "difficulty": {b: counts.get(b, 0) for b in BUCKETS},
        "shares": {b: round(counts.get(b, 0) / len(rows), 4) for b in BUCKETS},
        "target": {b: round(v, 4) for b, v in target.items()},
        "short": short,
        "wrong_labels": sum(1 for r in rows if noise_of(r.extra)),
    }


def build_report(
    rows: list[Trajectory],
    probe_set: str = "probe",
    metric: str = "exact_match",
    baseline_set: str = "static",
    mix: tuple[float, float, float] = (0.3, 0.5, 0.2),
) -> dict[str, Any]:
    """Steps 1-3 (and step 4's baseline comparison) as a JSON-ready dict."""
    episodes: dict[tuple[str, str, int], list[Trajectory]] = defaultdict(list)
    data: list[Trajectory] = []
    final: list[Trajectory] = []
    for r in rows:
        gcp = get(r.extra, GcpRecord)
        if r.method == "gcp" and gcp:
            episodes[(gcp.policy, gcp.set, r.iteration)].append(r)
        elif r.difficulty:  # graded: the final dataset
            final.append(r)
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
    made_rows: dict[int, list[Trajectory]] = defaultdict(list)
    made: dict[int, Counter[str]] = defaultdict(Counter)
    for r in data:
        lt = get(r.extra, LoopToolOrigin)
        made[lt.iteration if lt else 0][lt.origin if lt else "seed"] += 1
        made_rows[lt.iteration if lt else 0].append(r)
    out_iters: list[dict[str, Any]] = []
    for k in iterations:
        trained = made.get(k - 1, Counter())
        probe = episodes.get(("student", probe_set, k), [])
        out_iters.append(
            {
                "iteration": k,
                "student": _acc(probe, metric),
                "student_ci": _ci(probe, metric),
                "teacher": teacher,
                "teacher_ci": _ci(teacher_rows, metric),
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
        # 5) the paired difference on the same tasks
        diff = _difference(
            episodes.get(("student", probe_set, iterations[-1]), []), baseline, metric
        )
        loop_weak, static_weak = _weak_mean(last, weak), _weak_mean(base_acc, weak)
        static = {
            "student": base_acc,
            "student_ci": _ci(baseline, metric),
            "student_tool_match": _acc(baseline, "tool_match"),
            "tasks": len(baseline),
            "loop_minus_static": round(last.get("overall", 0.0) - base_acc.get("overall", 0.0), 4),
            "loop_minus_static_ci": (diff.get("overall") or {}).get("ci", [None, None]),
            "loop_minus_static_by_capability": diff,
            "verdict": _verdict(diff.get("overall")),
            "loop_minus_static_weak": (
                round(loop_weak - static_weak, 4)
                if loop_weak is not None and static_weak is not None
                else None
            ),
        }
    return {
        "metric": metric,
        "probe_set": probe_set,
        "probe_tasks": len(episodes.get(("student", probe_set, iterations[0]), []))
        if iterations
        else 0,
        "probe_tasks_by_capability": {
            c: len(v)
            for c, v in _scores(
                episodes.get(("student", probe_set, iterations[0]), []) if iterations else [],
                metric,
            ).items()
        },
        "weak_capabilities": weak,
        "iterations": out_iters,
        "student_by_capability": rising,
        "weak_capabilities_change": weak_rise,
        "static_baseline": static,
        "label_noise": _label_noise(episodes, data, made_rows, iterations),
        "final_dataset": _final(final, mix),
        # further sections (title + markdown lines), rendered at the end of report.md
        "sections": [],
    }


def _cell(value: float | None, ci: list[float | None] | None, fmt: str = ".2f") -> str:
    """A figure and its interval, e.g. ``0.42 [0.28, 0.56]`` (``fmt`` ``+.2f``: signed)."""
    if value is None:
        return "-"
    if not ci or ci[0] is None:
        return f"{value:{fmt}}"
    return f"{value:{fmt}} [{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _span(bounds: Any) -> str:
    """`` [low, high]`` of a 95% interval, or nothing when there is none."""
    if not isinstance(bounds, list | tuple) or len(bounds) != 2 or None in bounds:
        return ""
    return f" [{bounds[0]:.2f}, {bounds[1]:.2f}]"


def _markdown(report: dict[str, Any]) -> str:
    its = report["iterations"]
    static = report.get("static_baseline")
    caps = sorted(
        {c for it in its for c in it["student"]} | {c for it in its for c in it["teacher"]}
    )
    caps = [c for c in caps if c != "overall"] + (["overall"] if "overall" in caps else [])
    weak = (
        ", ".join(c if c in caps else f"{c} (no probe task)" for c in report["weak_capabilities"])
        or "none"
    )
    tasks = report.get("probe_tasks_by_capability") or {}
    lines = [
        "# LoopTool report",
        "",
        f"Held-out probe set: {report['probe_tasks']} tasks; accuracy = {report['metric']}, "
        "each with its 95% bootstrap interval over the probe tasks. "
        f"Weak capabilities (GCP, iteration 1): {weak}.",
        "",
        "| capability (probe tasks) | "
        + " | ".join(f"student it{it['iteration']}" for it in its)
        + (" | static baseline" if static else "")
        + " | teacher |",
        "|---|" + "---|" * (len(its) + 1 + bool(static)),
    ]
    teacher = its[0]["teacher"] if its else {}
    teacher_ci = its[0].get("teacher_ci", {}) if its else {}
    for c in caps:
        cells = [_cell(it["student"].get(c), it.get("student_ci", {}).get(c)) for it in its]
        if static:
            cells.append(_cell(static["student"].get(c), static.get("student_ci", {}).get(c)))
        cells.append(_cell(teacher.get(c), teacher_ci.get(c)))
        name = c + (" (weak)" if c in report["weak_capabilities"] else "")
        if c in tasks:
            name += f" ({tasks[c]})"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    tm = [it.get("student_tool_match", {}).get("overall") for it in its]
    if report["metric"] != "tool_match" and all(v is not None for v in tm):
        static_tm = [_pct(static.get("student_tool_match", {}).get("overall"))] if static else []
        lines.append(
            "| overall, tool_match | "
            + " | ".join([f"{v:.2f}" for v in tm] + static_tm)
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
    if static:
        overall = static["student"].get("overall", 0.0)
        weak_line = (
            f", {static['loop_minus_static_weak']:+.2f} on the weak capabilities"
            if static.get("loop_minus_static_weak") is not None
            else ""
        )
        diff = _cell(static["loop_minus_static"], static.get("loop_minus_static_ci"), "+.2f")
        lines += [
            "",
            f"Static baseline (the same student and training budget on as many plain "
            f"teacher rows as the loop trained on): {report['metric']} {overall:.2f} on the "
            f"probe set; the loop's last iteration against it: "
            f"{static['loop_minus_static']:+.2f}{weak_line}. Loop − static on the same "
            f"{static['tasks']} tasks, with its paired bootstrap interval: {diff}: "
            f"{static.get('verdict', 'not measured')}.",
        ]
    noise = report.get("label_noise")
    if noise:
        total = noise["total"]
        lines += [
            "",
            f"Label noise: {noise['seed_noisy']} of the {noise['seed_rows']} seed rows "
            f"({_pct(noise['rate'])}) carry a wrong label (`label_noise`: "
            + ", ".join(f"{k} {v}" for k, v in sorted(noise["kinds"].items()))
            + "). JGLV against that truth: precision "
            f"{_pct(total['precision'])} ({total['found']} of {total['relabelled']} labels it "
            f"replaced were wrong), recall {_pct(total['recall'])} ({total['found']} of the "
            f"{total['probed_noisy']} wrong labels GCP probed).",
            "",
            "| iteration | trained on (wrong) | probed (wrong) | failed at the wrong step "
            "| relabelled | found | false alarms | precision | recall |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for it in noise["iterations"]:
            lines.append(
                f"| {it['iteration']} | {it['trained_on']} ({it['trained_on_noisy']}) | "
                f"{it['probed']} ({it['probed_noisy']}) | {it['judged_noisy']} | "
                f"{it['relabelled']} | {it['found']} | {it['false_alarms']} | "
                f"{_pct(it['precision'])} | {_pct(it['recall'])} |"
            )
    lines += [
        "",
        "| iteration | trained on: " + " | ".join(ORIGINS) + " |",
        "|---|" + "---|" * len(ORIGINS),
    ]
    for it in its:
        lines.append(
            f"| {it['iteration']} | " + " | ".join(str(it["counts"][o]) for o in ORIGINS) + " |"
        )
    final = report.get("final_dataset")
    if final:
        mix = " / ".join(f"{final['difficulty'][b]} {b}" for b in BUCKETS)
        shares = "/".join(f"{100 * final['shares'][b]:.0f}" for b in BUCKETS)
        target = "/".join(f"{100 * final['target'][b]:.0f}" for b in BUCKETS)
        short = [f"{b} short by {n}" for b, n in final["short"].items() if n]
        lines += [
            "",
            f"Final dataset: {final['rows']} rows, {mix} ({shares}% against the target "
            f"{target}%: " + (", ".join(short) if short else "the mix is met") + "); "
            f"wrong labels left in it: {final['wrong_labels']}.",
        ]
    for section in report.get("sections") or []:
        lines += ["", f"## {section['title']}", "", *section["lines"]]
    return "\n".join(lines) + "\n"


#: keys of ``bfcl.json`` that are not a model's scores
_BFCL_META = ("limit", "contamination", "trained", "intervals")


def bfcl_section(data: dict[str, Any], stage_id: str = "bfcl") -> dict[str, Any]:
    """Step 8's section for an ``eval_bfcl`` stage's ``bfcl.json``: one row per model it
    scored (``base``, then each checkpoint by its training stage's id; ``trained`` is the
    last of them, so not repeated), a column per category and the ``mean``, each with its
    95% interval where the file has it, how many questions each category had, and the
    training rows' contamination."""
    models = {k: v for k, v in data.items() if k not in _BFCL_META and isinstance(v, dict)}
    if not models and isinstance(data.get("trained"), dict):
        models = {"trained": data["trained"]}
    columns: list[str] = []
    for scores in models.values():
        columns += [c for c in scores if c not in columns and c != "mean"]
    if any("mean" in scores for scores in models.values()):
        columns.append("mean")
    limit = data.get("limit")
    per = (
        f"{limit} questions per category, so one question is {1 / limit:.2f} of a category's "
        "accuracy"
        if limit
        else "every question of each category"
    )
    lines = [
        f"BFCL single-turn, scored by the `{stage_id}` stage (`eval_bfcl`: the project's AST "
        f"checker, greedy, the checkpoint's own tool template): {per}.",
        "",
        "| model | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    intervals = data.get("intervals") if isinstance(data.get("intervals"), dict) else {}
    for name, scores in models.items():
        bounds = intervals.get(name) if isinstance(intervals.get(name), dict) else {}
        cells = [_pct(scores.get(c)) + _span(bounds.get(c)) for c in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    found = data.get("contamination")
    if isinstance(found, dict):
        lines += [
            "",
            f"BFCL single-turn function names or questions in the training rows: "
            f"{found.get('count', 0)} (in {found.get('rows', 0)} rows).",
        ]
    return {"title": "BFCL", "lines": lines}


def _needed_sections(report: dict[str, Any], ctx: Context) -> None:
    """Step 8: the sections of the stages in ``needs:`` that wrote a benchmark's figures."""
    for stage_id, folder in ctx.spec.artifacts_in.items():
        path = Path(folder) / "bfcl.json"
        if path.is_file():
            data = json.loads(path.read_text())
            report["bfcl"] = {"stage": stage_id, **data}
            report["sections"].append(bfcl_section(data, stage_id))


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
        report = build_report(rows, cfg.probe_set, cfg.metric, cfg.baseline_set, cfg.mix)
        _needed_sections(report, ctx)  # 8)
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
