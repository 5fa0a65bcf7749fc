"""Query trajectory shards with SQL: DuckDB over the verified reader.

:func:`query` filters the rows under a path (a shard file, folder or glob, local or on object
storage) by domain, capability, method, outcome, failure layer, difficulty, quality, or any
SQL condition on any column (``where``), and returns a count, the matching rows (the columns
asked for), or with ``steps=True`` one row per assistant step of them (:data:`STEP_COLUMNS`:
the call, its arguments, the tool's result, the step's state change, its reward and flags,
the tool errors it met, the row's outcome) — "which step went wrong".

The rows reach DuckDB as Arrow record batches from :func:`trajsynth.store.shards.iter_batches`
(only the columns the query names are decoded), so every shard is checked against its run's
record, and shards of an older schema are migrated, exactly as every other reader sees them;
DuckDB filters the stream and stops reading once ``limit`` rows matched. A column the
trajectory schema does not have is one :class:`~trajsynth.core.errors.UserError` naming it.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from ..core.errors import UserError
from ..core.location import as_path, is_url, put_file
from ..core.schema import ARROW_SCHEMA
from .integrity import shard_checks
from .shards import iter_shard, list_shards

__all__ = [
    "DEFAULT_COLUMNS",
    "OUTCOMES",
    "STEP_COLUMNS",
    "Filters",
    "query",
    "step_rows",
    "write_result",
]

T = TypeVar("T")
COLUMNS = tuple(ARROW_SCHEMA.names)
#: what a row query shows when no columns are asked for
DEFAULT_COLUMNS = (
    "id",
    "domain",
    "method",
    "success",
    "failure_layer",
    "difficulty",
    "quality_score",
    "num_tool_calls",
    "goal",
)
#: one row per assistant step (``steps=True``)
STEP_COLUMNS = (
    "id",
    "task_id",
    "domain",
    "step",
    "call",
    "arguments",
    "result",
    "state_diff",
    "step_reward",
    "flags",
    "errors",
    "verdict",
    "outcome",
)
_STEP_SOURCE = (
    "id",
    "task_id",
    "domain",
    "messages",
    "step_rewards",
    "step_flags",
    "step_diffs",
    "success",
    "extra",
)
OUTCOMES = {
    "success": "success IS TRUE",
    "failed": "success IS FALSE",
    "unknown": "success IS NULL",
}


@dataclass
class Filters:
    """What rows to keep (every field that is set must hold)."""

    domain: list[str] = field(default_factory=list)
    capability: list[str] = field(default_factory=list)
    method: list[str] = field(default_factory=list)
    outcome: str | None = None
    failure_layer: list[str] = field(default_factory=list)
    difficulty: list[str] = field(default_factory=list)
    min_quality: float | None = None
    max_quality: float | None = None
    where: str | None = None

    def sql(self) -> tuple[str, list[Any]]:
        """The WHERE condition and its parameters."""
        parts: list[str] = []
        params: list[Any] = []
        for column, values in (
            ("domain", self.domain),
            ("method", self.method),
            ("failure_layer", self.failure_layer),
            ("difficulty", self.difficulty),
        ):
            if values:
                parts.append(f"{column} IN ({', '.join('?' * len(values))})")
                params += values
        for cap in self.capability:
            parts.append("list_contains(capabilities, ?)")
            params.append(cap)
        if self.outcome is not None:
            if self.outcome not in OUTCOMES:
                raise UserError(
                    f"unknown outcome {self.outcome!r}; choose one of {sorted(OUTCOMES)}"
                )
            parts.append(OUTCOMES[self.outcome])
        if self.min_quality is not None:
            parts.append("quality_score >= ?")
            params.append(self.min_quality)
        if self.max_quality is not None:
            parts.append("quality_score <= ?")
            params.append(self.max_quality)
        if self.where:
            parts.append(f"({self.where})")
        return (" AND ".join(parts) or "TRUE"), params

    def columns(self) -> set[str]:
        """The columns the filters read."""
        used = {
            c
            for c, v in (
                ("domain", self.domain),
                ("capabilities", self.capability),
                ("method", self.method),
                ("success", self.outcome),
                ("failure_layer", self.failure_layer),
                ("difficulty", self.difficulty),
                ("quality_score", self.min_quality is not None or self.max_quality is not None),
            )
            if v
        }
        return used | _named_in(self.where or "")


def _named_in(sql: str) -> set[str]:
    """The schema's columns that the SQL text names (string literals aside)."""
    text = re.sub(r"'(?:[^']|'')*'", "''", sql)
    words = set(re.findall(r'"([^"]+)"|\b([A-Za-z_][A-Za-z0-9_]*)\b', text))
    names = {a or b for a, b in words}
    return {c for c in COLUMNS if c in names}


def _check_columns(columns: Iterable[str], what: str) -> None:
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        raise UserError(
            f"unknown column(s) {unknown} in {what}",
            hint=f"columns: {', '.join(COLUMNS)}",
        )


class _Rows:
    """The rows DuckDB reads: record batches from the verified reader; an error the reader
    raises (a corrupt shard, ...) is kept, to be raised as itself instead of DuckDB's
    wrapping of it."""

    def __init__(self, path: Any, columns: Sequence[str], *, positions: bool = False) -> None:
        self.shards = list_shards(path)
        self.columns = list(columns)
        #: add ``_shard`` and ``_row`` (where each row is), for a second, narrower read
        self.positions = positions
        self.error: BaseException | None = None

    def reader(self) -> pa.RecordBatchReader:
        fields = [ARROW_SCHEMA.field(c) for c in self.columns]
        if self.positions:
            fields += [pa.field("_shard", pa.int32()), pa.field("_row", pa.int64())]
        return pa.RecordBatchReader.from_batches(pa.schema(fields), self._batches())

    def _batches(self) -> Iterator[pa.RecordBatch]:
        try:
            checks = shard_checks(self.shards)
            for k, shard in enumerate(self.shards):
                start = 0
                for b in iter_shard(shard, columns=self.columns, check=checks[shard]):
                    b = b.select(self.columns) if b.schema.names != self.columns else b
                    if self.positions:
                        n = b.num_rows
                        b = pa.RecordBatch.from_arrays(
                            [*b.columns, pa.array([k] * n, pa.int32()),
                             pa.array(range(start, start + n), pa.int64())],
                            names=[*self.columns, "_shard", "_row"],
                        )  # fmt: skip
                        start += n
                    yield b
        except BaseException as exc:
            self.error = exc
            raise


def _run(sql: str, params: list[Any], rows: _Rows, consume: Callable[[Any], T]) -> T:
    """Run ``sql`` over ``rows`` and hand the result to ``consume`` (which fetches from it);
    a reader's error comes out as itself, DuckDB's as one :class:`UserError`."""
    import duckdb

    con = duckdb.connect()
    con.register("rows", rows.reader())
    try:
        return consume(con.execute(sql, params))
    except duckdb.Error as exc:
        if rows.error is not None:
            raise rows.error from None
        first = str(exc).splitlines()[0]
        if isinstance(exc, duckdb.BinderException):
            m = re.search(r'column "?([^"\s]+)"? not found', first, re.IGNORECASE)
            named = f"unknown column {m.group(1)!r}" if m else "a column or function it names"
            raise UserError(
                f"query: {named} ({first})", hint=f"columns: {', '.join(COLUMNS)}"
            ) from None
        raise UserError(f"query: the condition cannot run ({first})") from None


def query(
    path: Any,
    filters: Filters | None = None,
    *,
    columns: Sequence[str] | None = None,
    steps: bool = False,
    count: bool = False,
    limit: int | None = None,
) -> int | pa.Table:
    """The rows under ``path`` that pass ``filters``: their number (``count``), the rows
    (``columns``, default :data:`DEFAULT_COLUMNS`), or one row per assistant step of them
    (``steps``, :data:`STEP_COLUMNS`; ``limit`` counts step rows then). See the module
    docstring."""
    filters = filters or Filters()
    cond, params = filters.sql()
    wanted = list(columns or (_STEP_SOURCE if steps else DEFAULT_COLUMNS))
    _check_columns(wanted, "--columns")
    if count:
        read = sorted(filters.columns()) or ["id"]
        sql = f"SELECT count(*) FROM rows WHERE {cond}"
        return int(_run(sql, params, _Rows(path, read), lambda r: r.fetchone()[0]))
    source = list(_STEP_SOURCE) if steps else wanted
    read = [c for c in COLUMNS if c in set(source) | filters.columns()]
    rows = _Rows(path, read)
    select = ", ".join(f'"{c}"' for c in source)
    if not steps:
        tail = f" LIMIT {int(limit)}" if limit is not None else ""
        return _run(f"SELECT {select} FROM rows WHERE {cond}{tail}", params, rows, _arrow)

    def explode(result: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        names = [d[0] for d in result.description]
        while limit is None or len(out) < limit:
            batch = result.fetchmany(256)
            if not batch:
                break
            for values in batch:
                out += step_rows(dict(zip(names, values, strict=True)))
        return out if limit is None else out[:limit]

    if limit is None:
        every = _run(f"SELECT {select} FROM rows WHERE {cond}", params, rows, explode)
        return pa.Table.from_pylist(every, schema=_STEP_SCHEMA)
    # a slice: find the first matching rows from the narrow columns alone (their turns add
    # up to ``limit`` steps), then read the wide ones (messages, ...) of those rows only
    narrow = _Rows(path, sorted(filters.columns() | {"num_turns"}), positions=True)

    def first_rows(result: Any) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        turns = 0
        while turns < limit:
            batch = result.fetchmany(1024)
            if not batch:
                break
            for shard, row, n in batch:
                found.append((shard, row))
                turns += n or 0
                if turns >= limit:
                    break
        return found

    sql = f"SELECT _shard, _row, num_turns FROM rows WHERE {cond}"
    found = _run(sql, params, narrow, first_rows)
    out: list[dict[str, Any]] = []
    by_shard: dict[int, list[int]] = {}
    for shard, row in found:
        by_shard.setdefault(shard, []).append(row)
    for shard, picked in sorted(by_shard.items()):
        table = pa.Table.from_batches(
            list(iter_shard(narrow.shards[shard], columns=list(_STEP_SOURCE)))
        ).take(pa.array(picked))
        for values in table.to_pylist():
            out += step_rows(values)
    return pa.Table.from_pylist(out[:limit], schema=_STEP_SCHEMA)


def _arrow(result: Any) -> pa.Table:
    for name in ("to_arrow_table", "fetch_arrow_table", "arrow"):  # across DuckDB versions
        fetch = getattr(result, name, None)
        if fetch is not None:
            table = fetch()
            return table if isinstance(table, pa.Table) else table.read_all()
    raise RuntimeError("this DuckDB returns no Arrow tables")


_STEP_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("task_id", pa.string()),
        ("domain", pa.string()),
        ("step", pa.int32()),
        ("call", pa.string()),
        ("arguments", pa.string()),
        ("result", pa.string()),
        ("state_diff", pa.string()),
        ("step_reward", pa.float64()),
        ("flags", pa.list_(pa.string())),
        ("errors", pa.list_(pa.string())),
        ("verdict", pa.string()),
        ("outcome", pa.string()),
    ]
)


def step_rows(row: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per assistant step of ``row`` (its :data:`_STEP_SOURCE` columns).

    ``call``: the tool names the step called (``a, b`` for parallel calls; null for a text
    step); ``arguments``: their arguments (JSON text, a list for parallel calls); ``result``:
    the tool messages answering them (the text, a JSON list for several) or the assistant's
    text; ``state_diff``: what the step changed (JSON text; null where not recorded);
    ``errors``: the tool error types of its calls; ``verdict``: ``error`` when a call failed,
    ``deviated``/``format_error``… from its flags, else ``ok``; ``outcome``: the row's.
    """
    messages = row.get("messages") or []
    rewards = row.get("step_rewards") or []
    flags = row.get("step_flags") or []
    diffs = row.get("step_diffs") or []
    try:
        extra = json.loads(row.get("extra") or "{}")
    except (TypeError, ValueError):
        extra = {}
    errors: dict[int, list[str]] = {}
    for err in (extra.get("tool_errors") or []) if isinstance(extra, dict) else []:
        if isinstance(err, dict) and isinstance(err.get("step"), int):
            errors.setdefault(err["step"], []).append(str(err.get("type") or "error"))
    success = row.get("success")
    outcome = "unknown" if success is None else ("success" if success else "failed")
    answers: dict[str, str] = {
        m.get("tool_call_id") or "": m.get("content") or ""
        for m in messages
        if m.get("role") == "tool"
    }
    out = []
    step = 0
    for m in messages:
        if m.get("role") != "assistant":
            continue
        calls = m.get("tool_calls") or []
        step_flags = list(flags[step]) if step < len(flags) and flags[step] else []
        step_errors = errors.get(step, [])
        if calls:
            names = ", ".join(c.get("name") or "" for c in calls)
            args = [c.get("arguments") or "{}" for c in calls]
            arguments = args[0] if len(args) == 1 else "[" + ", ".join(args) + "]"
            results = [answers.get(c.get("id") or "") for c in calls]
            result = results[0] if len(results) == 1 else json.dumps(results, ensure_ascii=False)
        else:
            names, arguments, result = None, None, m.get("content")
        verdict = "error" if step_errors else (step_flags[0] if step_flags else "ok")
        out.append(
            {
                "id": row.get("id"),
                "task_id": row.get("task_id"),
                "domain": row.get("domain"),
                "step": step,
                "call": names,
                "arguments": arguments,
                "result": result,
                "state_diff": diffs[step] if step < len(diffs) else None,
                "step_reward": rewards[step] if step < len(rewards) else None,
                "flags": step_flags,
                "errors": step_errors,
                "verdict": verdict,
                "outcome": outcome,
            }
        )
        step += 1
    return out


def write_result(table: pa.Table, out: Any, fmt: str) -> None:
    """Write a query's result as ``jsonl`` or ``parquet`` to ``out`` (a path or a URL)."""
    if fmt not in ("jsonl", "parquet"):
        raise UserError(f"unknown output format {fmt!r}; choose table, jsonl or parquet")
    dest = as_path(out)
    with tempfile.TemporaryDirectory(prefix="trajsynth-query-") as tmp:
        local = Path(tmp) / f"result.{fmt}" if is_url(dest) else Path(dest)
        local.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "jsonl":
            with open(local, "w", encoding="utf-8") as f:
                for row in table.to_pylist():
                    f.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        else:
            import duckdb

            con = duckdb.connect()
            con.register("result", table)
            con.execute(
                f"COPY result TO '{str(local).replace(chr(39), chr(39) * 2)}' (FORMAT parquet)"
            )
        if is_url(dest):
            put_file(local, dest)
