"""The quality report of a run: one self-contained HTML page (plots inlined) or Markdown with
PNG files beside it.

Sections, each present when the run has what it needs:

1) the stages: rows in and out, seconds; the final output's rows by verdict, flagged when it
   is mostly unverified (the run manifest's ``final_output`` check);
2) quality distribution: histograms of ``quality_score`` at each stage that has scores
   (after score, after filter, ...), so what the filter removed is visible;
3) the filter's rules: per rule, rows dropped first and rows failing; dedup's counts;
4) difficulty mix before and after balancing (grouped bars, with the target mix), and any
   shortfall;
5) clusters: cluster sizes, size entropy, the largest clusters' representative goals;
6) success per capability (bars, with row counts), on the earliest stage that knows success.

The CLI (``trajsynth report``) reads the run and fills a :class:`ReportData`; this module only
draws (matplotlib, Agg backend) and writes.
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import UserError

__all__ = ["ReportData", "render_report"]


@dataclass
class ReportData:
    """Everything a report shows (see the module docstring)."""

    title: str
    stages: list[dict[str, Any]] = field(default_factory=list)  # id, uses, rows_in, rows_out, s
    quality: dict[str, np.ndarray] = field(default_factory=dict)  # stage → quality scores
    summary: dict[str, Any] = field(default_factory=dict)  # stats.manifest_summary(...)
    difficulty: dict[str, dict[str, int]] = field(default_factory=dict)  # label → bucket counts
    target_mix: dict[str, float] | None = None
    clusters: dict[str, Any] | None = None  # cluster_summary / cluster_stats
    capability_success: list[dict[str, Any]] = field(default_factory=list)
    capability_stage: str = ""
    final_output: dict[str, Any] = field(default_factory=dict)  # the manifest's check


def _plt() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UserError(
            "the report needs matplotlib", hint="pip install 'trajsynth[plots]'"
        ) from exc
    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def _quality_plot(data: ReportData) -> bytes | None:
    if not data.quality:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    bins = np.linspace(0, 1, 21)
    for name, values in data.quality.items():
        ax.hist(values, bins=bins, alpha=0.55, label=f"{name} ({len(values):,})")
    ax.set_xlabel("quality_score")
    ax.set_ylabel("rows")
    ax.set_title("Quality distribution")
    ax.legend()
    return _png(fig)


def _difficulty_plot(data: ReportData) -> bytes | None:
    if not data.difficulty:
        return None
    plt = _plt()
    buckets = ["easy", "medium", "hard"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    series = list(data.difficulty.items())
    width = 0.8 / max(1, len(series) + (1 if data.target_mix else 0))
    x = np.arange(len(buckets))
    for i, (name, counts) in enumerate(series):
        total = sum(counts.get(b, 0) for b in buckets) or 1
        shares = [counts.get(b, 0) / total for b in buckets]
        ax.bar(x + i * width, shares, width, label=f"{name} ({total:,})")
    if data.target_mix:
        ax.bar(
            x + len(series) * width,
            [data.target_mix.get(b, 0) for b in buckets],
            width,
            label="target",
            color="none",
            edgecolor="black",
            hatch="//",
        )
    ax.set_xticks(x + width * (len(series) - (0 if data.target_mix else 1)) / 2, buckets)
    ax.set_ylabel("share of rows")
    ax.set_title("Difficulty mix")
    ax.legend()
    return _png(fig)


def _cluster_plot(data: ReportData) -> bytes | None:
    sizes = (data.clusters or {}).get("sizes")
    if not sizes:
        return None
    plt = _plt()
    values = sorted(sizes.values(), reverse=True)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(np.arange(len(values)), values, color="#4c72b0")
    ax.set_xlabel("cluster (largest first)")
    ax.set_ylabel("rows")
    h = data.clusters.get("normalized_entropy") if data.clusters else None
    ax.set_title(
        f"{len(values)} clusters" + (f", normalised size entropy {h:.2f}" if h is not None else "")
    )
    return _png(fig)


def _capability_plot(data: ReportData) -> bytes | None:
    rows = [r for r in data.capability_success if r.get("success_rate") is not None]
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2))
    names = [f"{r['value']} ({r['rows']:,})" for r in rows]
    ax.barh(names, [r["success_rate"] for r in rows], color="#55a868")
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("success rate")
    ax.set_title(f"Success per capability ({data.capability_stage})")
    return _png(fig)


def _tables(data: ReportData) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every table of the report."""
    out: list[tuple[str, list[str], list[list[str]]]] = []
    if data.stages:
        out.append(
            (
                "Stages",
                ["stage", "uses", "rows in", "rows out", "seconds"],
                [
                    [
                        s["id"],
                        s["uses"],
                        f"{s['rows_in']:,}",
                        f"{s['rows_out']:,}",
                        f"{s['seconds']:.1f}",
                    ]
                    for s in data.stages
                ],
            )
        )
    check = data.final_output
    if check.get("stage"):
        flag = ""
        if check.get("mostly_unverified"):
            flag = " — WARNING: mostly unverified" + (
                " (accepted: allow_unverified)" if check.get("allowed") else ", not accepted"
            )
        rows = [
            ["verified (success true)", f"{check['success']:,}"],
            ["failed (success false)", f"{check['failed']:,}"],
            ["never verified (success null)", f"{check['unknown']:,}"],
        ]
        rows += [[f"set aside upstream: {k}", f"{v:,}"] for k, v in check.get("aside", {}).items()]
        out.append(
            (
                f"Final output ({check['stage']}: {check['rows']:,} rows, "
                f"{check['unverified_share']:.0%} not verified){flag}",
                ["rows", "count"],
                rows,
            )
        )
    for f in data.summary.get("filter", []):
        out.append(
            (
                f"Filter rules ({f['stage']}: {f['rows_in']:,} → {f['kept']:,} rows)",
                ["rule", "dropped (first rule)", "failing (any)"],
                [[r["rule"], f"{r['dropped']:,}", f"{r['failing']:,}"] for r in f["rules"]],
            )
        )
    for d in data.summary.get("dedup", []):
        out.append(
            (
                f"Dedup ({d['stage']})",
                ["rows", "exact", "near", "semantic", "kept"],
                [
                    [
                        f"{d.get('rows', 0):,}",
                        f"{d.get('exact_duplicates', 0):,}",
                        f"{d.get('near_duplicates', 0):,}",
                        f"{d.get('semantic_duplicates', 0):,}",
                        f"{d.get('kept', 0):,}",
                    ]
                ],
            )
        )
    for b in data.summary.get("balance", []):
        buckets = ["easy", "medium", "hard"]
        out.append(
            (
                f"Balance ({b['stage']}{', keep all' if b.get('keep_all') else ''})",
                ["bucket", "available", "target", "short by", "kept", "share"],
                [
                    [
                        k,
                        f"{b['available'].get(k, 0):,}",
                        f"{b['targets'].get(k, 0):,}",
                        f"{b['shortfalls'].get(k, 0):,}",
                        f"{b['final'].get(k, 0):,}",
                        f"{b['achieved_mix'].get(k, 0):.1%}",
                    ]
                    for k in buckets
                ],
            )
        )
    if data.clusters and data.clusters.get("largest"):
        out.append(
            (
                f"Largest clusters ({data.clusters.get('clusters', 0)} in all, size entropy "
                f"{data.clusters.get('entropy_bits', 0):.2f} bits)",
                ["cluster", "rows", "representative goal"],
                [
                    [
                        str(c["cluster"]),
                        f"{c['size']:,}",
                        (c.get("representative") or c.get("sample_goal") or "")[:200],
                    ]
                    for c in data.clusters["largest"]
                ],
            )
        )
    return out


def render_report(data: ReportData, out: Path) -> list[Path]:
    """Write the report to ``out`` (``.html``, or ``.md`` with PNGs in ``<stem>_files/``).

    Returns the files written.
    """
    plots = [
        ("Quality distribution", "quality", _quality_plot(data)),
        ("Difficulty mix before and after balancing", "difficulty", _difficulty_plot(data)),
        ("Clusters", "clusters", _cluster_plot(data)),
        ("Success per capability", "capabilities", _capability_plot(data)),
    ]
    tables = _tables(data)
    out.parent.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if out.suffix.lower() in (".md", ".markdown"):
        files = out.parent / f"{out.stem}_files"
        files.mkdir(exist_ok=True)
        lines = [f"# {data.title}", ""]
        for title, header, rows in tables:
            lines += [f"## {title}", "", "| " + " | ".join(header) + " |"]
            lines.append("|" + "---|" * len(header))
            lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
            lines.append("")
        for title, name, png in plots:
            if png is None:
                continue
            path = files / f"{name}.png"
            path.write_bytes(png)
            written.append(path)
            lines += [f"## {title}", "", f"![{title}]({files.name}/{name}.png)", ""]
        out.write_text("\n".join(lines))
        return [out, *written]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(data.title)}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;}"
        "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
        "td,th{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left}</style>",
        f"</head><body><h1>{html.escape(data.title)}</h1>",
    ]
    for title, header, rows in tables:
        parts.append(f"<h2>{html.escape(title)}</h2><table><tr>")
        parts += [f"<th>{html.escape(h)}</th>" for h in header]
        parts.append("</tr>")
        for r in rows:
            parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>")
        parts.append("</table>")
    for title, name, png in plots:
        if png is None:
            continue
        b64 = base64.b64encode(png).decode()
        parts.append(
            f"<h2>{html.escape(title)}</h2><img alt='{name}' src='data:image/png;base64,{b64}'>"
        )
    parts.append("</body></html>")
    out.write_text("\n".join(parts))
    return [out]
