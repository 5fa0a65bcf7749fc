"""Export shards for other tools: full JSONL records, TRL/HF chat datasets.

``trl``: one JSON object per line with ``messages`` and ``tools`` (plus ``id``), the layout
that ``datasets.load_dataset("json", ...)`` and TRL's ``SFTTrainer`` read unchanged. Messages
use the OpenAI/HF chat format: assistant ``tool_calls`` are
``{"type": "function", "id", "function": {"name", "arguments"}}`` with ``arguments`` kept as
JSON text (so rows with different argument shapes do not get merged into one Arrow struct full
of nulls; chat templates such as Qwen3's accept strings), reasoning goes to
``reasoning_content``, and ``tools`` is JSON text (TRL parses it).

``hf``: a dataset folder: the ``trl`` columns plus ``task_id``, ``domain``, ``capabilities``,
``success``, ``quality_score``, ``difficulty`` and ``method``, as a ``DatasetDict`` with one
split (``train`` unless told) saved with ``save_to_disk``, and a ``README.md`` dataset card
whose YAML header (``license``, ``task_categories``, ``tags``, ``configs`` naming the split's
Arrow files, ``dataset_info`` with features and splits) lets ``datasets.load_dataset(folder)``
read it as well as ``datasets.load_from_disk(folder)``. The card's body is the caller's (the CLI
writes the run's figures, :mod:`trajsynth.quality.card`).

``verl``: verl / verl-agent RL Parquet, one row per task with the tools and the environment
(:mod:`trajsynth.store.verl`). ``openai-ft``: OpenAI fine-tuning JSONL
(:mod:`trajsynth.store.openai_ft`); rows the format cannot express are skipped and counted.

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
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import extras
from ..core.batch import to_records
from ..core.errors import DataError, UserError
from ..core.schema import Message, Trajectory
from .integrity import verify_shards
from .shards import count_rows, iter_batches, list_shards

__all__ = [
    "EXPORT_FORMATS",
    "ExportResult",
    "export",
    "to_chat_message",
    "to_dpo_row",
    "to_steca_row",
    "to_trl_row",
]

EXPORT_FORMATS = ("trl", "jsonl", "hf", "dpo", "steca", "verl", "openai-ft")
#: the hf export's metadata columns and their types
HF_TYPES = {
    "task_id": "string",
    "domain": "string",
    "capabilities": "list",
    "success": "bool",
    "quality_score": "float64",
    "difficulty": "string",
    "method": "string",
}
#: the card's default tags
HF_TAGS = ("synthetic", "tool-use", "function-calling", "agent", "trajsynth")


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
    pair = extras.get(t.extra, extras.DpoPair)
    if pair is None:
        return None
    k, n = pair.prompt_len, pair.chosen_len
    return {
        "id": t.id,
        "prompt": [to_chat_message(m) for m in t.messages[:k]],
        "chosen": [to_chat_message(m) for m in t.messages[k : k + n]],
        "rejected": [to_chat_message(m) for m in pair.rejected],
        "tools": json.dumps(t.tools, ensure_ascii=False),
    }


def to_steca_row(t: Trajectory) -> dict[str, Any] | None:
    """STeCa's record of a row the ``steca`` stage made (None for other rows)."""
    rec = extras.get(t.extra, extras.StecaRecord)
    if rec is None or rec.prompt_len is None or rec.chosen_len is None:
        return None
    k, n = rec.prompt_len, rec.chosen_len
    if rec.deviation is None or rec.reward is None:
        raise DataError(f'row {t.id}: extra["steca"] has a pair but no deviation or reward')
    return {
        "id": t.id,
        "prompt": [to_chat_message(m) for m in t.messages[:k]],
        "chosen": [to_chat_message(m) for m in t.messages[k : k + n]],
        "rejected": [to_chat_message(m) for m in rec.rejected],
        "deviation": rec.deviation,
        "reward": rec.reward,
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


@dataclass
class ExportResult:
    """What an export wrote. Unpacks as ``(rows, path)``."""

    rows: int
    path: Path
    #: rows left out, by reason (rows the format cannot express, repeated tasks)
    skipped: dict[str, int] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.rows, self.path))


def _writable(dest: Path) -> None:
    """Create ``dest``'s folder, or raise one clear error saying why it cannot be written."""
    try:
        dest.mkdir(parents=True, exist_ok=True)
        probe = dest / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise UserError(
            f"cannot write the export to {dest}: {exc.strerror or exc}",
            hint="choose another --out",
        ) from exc


def _atomic_jsonl(dest: Path, rows: Iterator[dict[str, Any]]) -> int:
    _writable(dest.parent)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    n = 0
    try:
        with open(tmp, "w") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, default=str))
                f.write("\n")
                n += 1
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, dest)
    return n


def _no_rows(path: str | Path, target: Path, what: str, hint: str) -> UserError:
    target.unlink(missing_ok=True)
    return UserError(f"{path} holds no {what}", hint=hint)


def export(
    path: str | Path,
    fmt: str,
    dest: str | Path,
    *,
    split: str = "train",
    card: str | None = None,
    license: str = "other",
) -> ExportResult:
    """Export every row under ``path`` to ``dest`` in format ``fmt``.

    ``split`` names the split (``hf``, ``verl``); ``card`` is the Markdown body of the ``hf``
    dataset card and ``license`` its license id. An unknown format, an input without rows and a
    destination that cannot be written are each one :class:`UserError`.
    """
    dest = Path(dest)
    if fmt not in EXPORT_FORMATS:
        raise UserError(f"unknown export format {fmt!r}; choose one of {list(EXPORT_FORMATS)}")
    if not re.fullmatch(r"\w+(\.\w+)*", split):
        raise UserError(f"bad split name {split!r}", hint="use letters, digits, _ and . only")
    shards = list_shards(path)
    verify_shards(shards)  # a corrupt shard is one clear error, not bad data
    if count_rows(shards) == 0:
        raise UserError(f"{path} holds no rows to export")
    if fmt == "jsonl":
        target = dest if dest.suffix == ".jsonl" else dest / "data.jsonl"
        n = _atomic_jsonl(target, (r.model_dump(mode="json") for r in _records(path)))
        return ExportResult(n, target)
    if fmt == "trl":
        target = dest if dest.suffix == ".jsonl" else dest / "train.jsonl"
        n = _atomic_jsonl(target, (to_trl_row(r) for r in _records(path)))
        return ExportResult(n, target)
    if fmt == "dpo":
        target = dest if dest.suffix == ".jsonl" else dest / "dpo.jsonl"
        n = _atomic_jsonl(target, _pair_rows(path, to_dpo_row))
        if n == 0:
            raise _no_rows(
                path,
                target,
                "chosen/rejected pairs",
                "export the `pairs` output of a magnet_pairs stage (runs/<run>/<stage>/pairs)"
                " or a steca stage's output",
            )
        return ExportResult(n, target)
    if fmt == "steca":
        target = dest if dest.suffix == ".jsonl" else dest / "steca.jsonl"
        n = _atomic_jsonl(target, _pair_rows(path, to_steca_row))
        if n == 0:
            raise _no_rows(
                path,
                target,
                "STeCa calibration records",
                "export the output of a steca stage (runs/<run>/<stage>)",
            )
        return ExportResult(n, target)
    if fmt == "openai-ft":
        return _export_openai_ft(path, dest)
    if fmt == "verl":
        return _export_verl(path, dest, split)
    return _export_hf(path, dest, split, card, license)


def _export_openai_ft(path: str | Path, dest: Path) -> ExportResult:
    from .openai_ft import check_example, to_openai_ft_row

    target = dest if dest.suffix == ".jsonl" else dest / "openai_ft.jsonl"
    skipped: Counter[str] = Counter()

    def rows() -> Iterator[dict[str, Any]]:
        for r in _records(path):
            row = to_openai_ft_row(r)
            errors = check_example(row)
            if errors:
                skipped[errors[0].split(":", 1)[0]] += 1
            else:
                yield row

    n = _atomic_jsonl(target, rows())
    if n == 0:
        raise _no_rows(
            path,
            target,
            "rows OpenAI fine-tuning can express",
            "skipped: " + ", ".join(f"{k} {v}" for k, v in skipped.most_common()),
        )
    return ExportResult(n, target, dict(skipped.most_common()))


def _export_verl(path: str | Path, dest: Path, split: str) -> ExportResult:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .verl import tool_names, verl_rows, verl_schema

    target = dest if dest.suffix == ".parquet" else dest / f"{split}.parquet"
    # first pass, over the tools column only: one tools_kwargs struct for every row
    names = tool_names(
        text for b in iter_batches(path, columns=["tools"]) for text in b.column(0).to_pylist()
    )
    schema = verl_schema(names)
    skipped: Counter[str] = Counter()
    _writable(target.parent)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    n = 0
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            chunk: list[dict[str, Any]] = []
            for row in verl_rows(_records(path), split=split, names=names, skipped=skipped):
                chunk.append(row)
                if len(chunk) >= 1024:
                    writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
                    n, chunk = n + len(chunk), []
            if chunk:
                writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
                n += len(chunk)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if n == 0:
        tmp.unlink(missing_ok=True)
        raise UserError(
            f"{path} holds no task with ground truth (verl's reward needs one)",
            hint="export rows made from tasks (magnet_tasks, rejection_sampling, ...)",
        )
    os.replace(tmp, target)
    return ExportResult(n, target, dict(skipped.most_common()))


def _export_hf(
    path: str | Path, dest: Path, split: str, card: str | None, license: str
) -> ExportResult:
    try:
        import datasets
        from huggingface_hub import DatasetCardData
    except ImportError as exc:  # pragma: no cover - depends on extras
        raise UserError(
            "the hf format needs the `datasets` package", hint="pip install 'trajsynth[train]'"
        ) from exc
    from datasets.info import DatasetInfo, DatasetInfosDict
    from datasets.splits import SplitDict, SplitInfo

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
    _writable(dest)
    ds = datasets.Dataset.from_list(rows)
    # columns that are null in every row are typed as their schema column is
    for name, dtype in HF_TYPES.items():
        feature = ds.features[name]
        if dtype == "list":
            if getattr(feature.feature, "dtype", None) == "null":
                ds = ds.cast_column(name, datasets.Sequence(datasets.Value("string")))
        elif getattr(feature, "dtype", None) == "null":
            ds = ds.cast_column(name, datasets.Value(dtype))
    datasets.DatasetDict({split: ds}).save_to_disk(str(dest))
    splits = SplitDict()
    splits.add(SplitInfo(name=split, num_bytes=ds.data.nbytes, num_examples=len(ds)))
    info = DatasetInfo(features=ds.features, splits=splits, dataset_size=ds.data.nbytes)
    data = DatasetCardData(
        license=license,
        task_categories=["text-generation"],
        tags=list(HF_TAGS),
        pretty_name="trajsynth tool-use trajectories",
        size_categories=[_size_category(len(ds))],
        configs=[
            {"config_name": "default", "data_files": [{"split": split, "path": f"{split}/*.arrow"}]}
        ],
    )
    DatasetInfosDict({"default": info}).to_dataset_card_data(data)
    body = card if card is not None else f"# {data.pretty_name}\n"
    (dest / "README.md").write_text(f"---\n{data.to_yaml()}\n---\n\n{body}")
    return ExportResult(len(ds), dest)


def _size_category(n: int) -> str:
    """The Hub's size category of ``n`` rows (``n<1K``, ``1K<n<10K``, ...)."""
    names = ["1K", "10K", "100K", "1M", "10M", "100M", "1B", "10B", "100B", "1T"]
    if n < 1_000:
        return "n<1K"
    for i in range(1, len(names)):
        if n < 10 ** (3 + i):
            return f"{names[i - 1]}<n<{names[i]}"
    return "n>1T"
