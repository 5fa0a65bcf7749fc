"""Export shards for other tools: full JSONL records, TRL/HF chat datasets.

``trl``: one JSON object per line with ``messages`` and ``tools`` (plus ``id``), the layout
that ``datasets.load_dataset("json", ...)`` and TRL's ``SFTTrainer`` read unchanged. Messages
use the OpenAI/HF chat format: assistant ``tool_calls`` are
``{"type": "function", "id", "function": {"name", "arguments"}}`` with ``arguments`` kept as
JSON text (so rows with different argument shapes do not get merged into one Arrow struct full
of nulls; chat templates such as Qwen3's accept strings), reasoning goes to
``reasoning_content``, and ``tools`` is JSON text (TRL parses it).

``hf``: the same columns (plus ids, domain, capabilities, outcome and quality) saved with
``datasets.Dataset.save_to_disk``, loadable with ``datasets.load_from_disk``.

``jsonl``: every column of every row, JSON columns decoded (the row format of
``schemas/trajectory.schema.json``).

``dpo``: preference pairs in TRL's conversational DPO layout, one JSON object per line with
``prompt``, ``chosen`` and ``rejected`` (lists of chat messages) plus ``tools`` and ``id``,
from rows that carry a pair in ``extra["dpo"]`` (``{"prompt_len", "chosen_len",
"rejected"}``: ``messages[:prompt_len]`` is the prompt, the next ``chosen_len`` messages the
chosen continuation, ``rejected`` the rejected one), as the ``magnet_pairs`` stage writes to
its ``pairs`` output. Rows without a pair are skipped; none at all is an error.

``steca``: STeCa's reward-weighted records (Wang et al. 2025, arXiv:2502.14276, code
``data_collection/data_explored_alfworld.py``), one JSON object per line with ``id``,
``prompt``, ``chosen``, ``rejected`` (chat messages, as in ``dpo``), ``deviation`` (the nDTW
of the chosen and rejected actions) and ``reward`` (``1 + 0.01 · deviation``, the sample's
weight in STeCa's loss), plus ``tools``; from rows that carry ``extra["steca"]``, as the
``steca`` stage writes them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.batch import to_records
from ..core.errors import UserError
from ..core.schema import Message, Trajectory
from .integrity import verify_shards
from .shards import iter_batches, list_shards

__all__ = [
    "EXPORT_FORMATS",
    "export",
    "to_chat_message",
    "to_dpo_row",
    "to_steca_row",
    "to_trl_row",
]

EXPORT_FORMATS = ("trl", "jsonl", "hf", "dpo", "steca")


def to_chat_message(m: Message) -> dict[str, Any]:
    """One message in the HF chat-template format."""
    out: dict[str, Any] = {"role": m.role, "content": m.content or ""}
    if m.tool_calls:
        out["tool_calls"] = [
            {"type": "function", "id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id or ""
        out["name"] = m.name or ""
    if m.reasoning:
        out["reasoning_content"] = m.reasoning
    return out


def to_trl_row(t: Trajectory) -> dict[str, Any]:
    return {
        "id": t.id,
        "messages": [to_chat_message(m) for m in t.messages],
        "tools": json.dumps(t.tools, ensure_ascii=False),
    }


def to_dpo_row(t: Trajectory) -> dict[str, Any] | None:
    """The TRL DPO record of a row holding a pair in ``extra["dpo"]`` (None otherwise)."""
    pair = t.extra.get("dpo") if isinstance(t.extra, dict) else None
    if not isinstance(pair, dict):
        return None
    k, n = int(pair["prompt_len"]), int(pair["chosen_len"])
    rejected = [Message.model_validate(m) for m in pair.get("rejected", [])]
    return {
        "id": t.id,
        "prompt": [to_chat_message(m) for m in t.messages[:k]],
        "chosen": [to_chat_message(m) for m in t.messages[k : k + n]],
        "rejected": [to_chat_message(m) for m in rejected],
        "tools": json.dumps(t.tools, ensure_ascii=False),
    }


def to_steca_row(t: Trajectory) -> dict[str, Any] | None:
    """STeCa's record of a row the ``steca`` stage made (None for other rows)."""
    rec = t.extra.get("steca") if isinstance(t.extra, dict) else None
    if not isinstance(rec, dict) or "prompt_len" not in rec:
        return None
    k, n = int(rec["prompt_len"]), int(rec["chosen_len"])
    rejected = [Message.model_validate(m) for m in rec.get("rejected", [])]
    return {
        "id": t.id,
        "prompt": [to_chat_message(m) for m in t.messages[:k]],
        "chosen": [to_chat_message(m) for m in t.messages[k : k + n]],
        "rejected": [to_chat_message(m) for m in rejected],
        "deviation": float(rec["deviation"]),
        "reward": float(rec["reward"]),
        "tools": json.dumps(t.tools, ensure_ascii=False),
    }


def _pair_rows(path: str | Path, convert: Any) -> Iterator[dict[str, Any]]:
    for r in _records(path):
        row = convert(r)
        if row is not None:
            yield row


def _records(path: str | Path) -> Iterator[Trajectory]:
    for batch in iter_batches(path):
        yield from to_records(batch)


def _atomic_jsonl(dest: Path, rows: Iterator[dict[str, Any]]) -> int:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    n = 0
    with open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, default=str))
            f.write("\n")
            n += 1
    os.replace(tmp, dest)
    return n


def export(path: str | Path, fmt: str, dest: str | Path) -> tuple[int, Path]:
    """Export every row under ``path`` to ``dest`` in format ``fmt``; returns (rows, file)."""
    dest = Path(dest)
    if fmt not in EXPORT_FORMATS:
        raise UserError(f"unknown export format {fmt!r}; choose one of {list(EXPORT_FORMATS)}")
    verify_shards(list_shards(path))  # a corrupt shard is one clear error, not bad data
    if fmt == "jsonl":
        target = dest if dest.suffix == ".jsonl" else dest / "data.jsonl"
        n = _atomic_jsonl(target, (r.model_dump(mode="json") for r in _records(path)))
        return n, target
    if fmt == "trl":
        target = dest if dest.suffix == ".jsonl" else dest / "train.jsonl"
        n = _atomic_jsonl(target, (to_trl_row(r) for r in _records(path)))
        return n, target
    if fmt == "dpo":
        target = dest if dest.suffix == ".jsonl" else dest / "dpo.jsonl"
        n = _atomic_jsonl(target, _pair_rows(path, to_dpo_row))
        if n == 0:
            target.unlink(missing_ok=True)
            raise UserError(
                f"{path} holds no chosen/rejected pairs",
                hint="export the `pairs` output of a magnet_pairs stage (runs/<run>/<stage>/pairs)"
                " or a steca stage's output",
            )
        return n, target
    if fmt == "steca":
        target = dest if dest.suffix == ".jsonl" else dest / "steca.jsonl"
        n = _atomic_jsonl(target, _pair_rows(path, to_steca_row))
        if n == 0:
            target.unlink(missing_ok=True)
            raise UserError(
                f"{path} holds no STeCa calibration records",
                hint="export the output of a steca stage (runs/<run>/<stage>)",
            )
        return n, target
    # hf
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - depends on extras
        raise UserError(
            "the hf format needs the `datasets` package", hint="pip install 'trajsynth[train]'"
        ) from exc
    rows = []
    for r in _records(path):
        row = to_trl_row(r)
        row.update(
            {
                "task_id": r.task_id,
                "domain": r.domain,
                "capabilities": r.capabilities,
                "success": r.success,
                "quality_score": r.quality_score,
                "difficulty": r.difficulty,
                "method": r.method,
            }
        )
        rows.append(row)
    ds = datasets.Dataset.from_list(rows)
    ds.save_to_disk(str(dest))
    return len(rows), dest
