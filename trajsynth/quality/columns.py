"""Column-wise views of trajectory rows, for the quality stages at a million rows.

Nothing here builds a Python object per row: messages and tool calls are flattened with
``pyarrow.compute`` into parallel numpy/Arrow arrays that carry the row (and message) index of
every element, and per-row results are folded back with ``np.bincount`` / ``reduceat``.

- :func:`flatten_messages` / :func:`flatten_calls`: one element per message / per tool call,
  with its row and message index;
- :func:`normalize_text`: lowercase, every run of non-letters/digits → one space, trimmed;
- :func:`action_skeletons`: per row, the tool names in call order, calls of one assistant
  message (parallel calls) sorted by name, so their order does not matter;
- :func:`hash_strings`: a 64-bit content hash of every string (FNV-1a over the bytes with a
  splitmix64 finish), vectorised over strings of equal position, and stable across processes;
- :func:`map_value`: one key of a ``map<string, double>`` column (``reward_components``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "FlatCalls",
    "FlatMessages",
    "action_skeletons",
    "as_array",
    "flatten_calls",
    "flatten_messages",
    "hash_strings",
    "map_value",
    "mix64",
    "normalize_text",
    "skeleton_strings",
]

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def as_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous Arrow array (chunked arrays are concatenated)."""
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return values


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective avalanche of uint64 values (vectorised)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64, copy=True)
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


def hash_strings(values: pa.Array | pa.ChunkedArray, seed: int = 0) -> np.ndarray:
    """A uint64 hash of each string's UTF-8 bytes (nulls hash like the empty string).

    FNV-1a over the bytes, processed position by position across all strings at once
    (strings sorted by length, so pass ``p`` touches only strings longer than ``p``), then
    mixed with the length and ``seed`` by :func:`mix64`. Equal strings give equal hashes in
    every process and on every machine.

    >>> a = hash_strings(pa.array(["book_flight", "", "book_flight", None]))
    >>> bool(a[0] == a[2]), bool(a[1] == a[3]), bool(a[0] != a[1])
    (True, True, True)
    """
    arr = as_array(values)
    if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type):
        offset_type = np.int64
    else:
        arr = arr.cast(pa.string()) if not pa.types.is_string(arr.type) else arr
        offset_type = np.int32
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=offset_type)[arr.offset : arr.offset + n + 1].astype(
        np.int64
    )
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    if arr.null_count:
        lengths = np.where(np.asarray(arr.is_valid()), lengths, 0)
    h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    order = np.argsort(-lengths, kind="stable")
    sorted_len = lengths[order]
    max_len = int(sorted_len[0]) if n else 0
    # number of strings longer than p, for every p (sorted descending → a prefix)
    active_counts = np.searchsorted(-sorted_len, -np.arange(max_len), side="left")
    with np.errstate(over="ignore"):
        for p in range(max_len):
            idx = order[: active_counts[p]]
            h[idx] = (h[idx] ^ data[starts[idx] + p].astype(np.uint64)) * _FNV_PRIME
    return mix64(h ^ mix64(lengths.astype(np.uint64) + np.uint64(seed)))


def normalize_text(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Lowercase; every run of characters that are not letters or digits → one space; trimmed.

    >>> normalize_text(pa.array(["  Book a FLIGHT, to Paris!! ", None])).to_pylist()
    ['book a flight to paris', '']
    """
    arr = pc.fill_null(as_array(values).cast(pa.string()), "")
    arr = pc.replace_substring_regex(pc.utf8_lower(arr), r"[^\pL\pN]+", " ")
    return pc.utf8_trim_whitespace(arr)


@dataclass
class FlatMessages:
    """Every message of every row, in order, with the row it belongs to."""

    row: np.ndarray  # (M,) int64: row index of each message
    offsets: np.ndarray  # (N+1,) int64: messages of row r are [offsets[r], offsets[r+1])
    role: pa.Array
    content: pa.Array
    reasoning: pa.Array
    tool_call_id: pa.Array
    tool_calls: pa.Array  # list<struct<id, name, arguments>> per message


@dataclass
class FlatCalls:
    """Every tool call of every row, in order, with its row and message index."""

    row: np.ndarray  # (C,) int64
    message: np.ndarray  # (C,) int64: global index into FlatMessages
    id: pa.Array
    name: pa.Array
    arguments: pa.Array


def flatten_messages(messages: pa.Array | pa.ChunkedArray) -> FlatMessages:
    """Flatten a ``messages`` column (list<struct>) into per-message arrays."""
    arr = as_array(messages)
    n = len(arr)
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar([], type=arr.type))
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = pc.list_flatten(arr)
    row = np.repeat(np.arange(n, dtype=np.int64), lengths)
    return FlatMessages(
        row=row,
        offsets=offsets,
        role=pc.struct_field(flat, "role"),
        content=pc.struct_field(flat, "content"),
        reasoning=pc.struct_field(flat, "reasoning"),
        tool_call_id=pc.struct_field(flat, "tool_call_id"),
        tool_calls=pc.struct_field(flat, "tool_calls"),
    )


def flatten_calls(msgs: FlatMessages) -> FlatCalls:
    """Every tool call, with the row and (global) message index it belongs to."""
    tc = msgs.tool_calls
    if tc.null_count:
        tc = pc.fill_null(tc, pa.scalar([], type=tc.type))
    counts = pc.fill_null(pc.list_value_length(tc), 0).to_numpy(zero_copy_only=False)
    message = np.repeat(np.arange(len(tc), dtype=np.int64), counts)
    flat = pc.list_flatten(tc)
    return FlatCalls(
        row=msgs.row[message] if len(message) else np.zeros(0, dtype=np.int64),
        message=message,
        id=pc.struct_field(flat, "id"),
        name=pc.fill_null(pc.struct_field(flat, "name"), ""),
        arguments=pc.struct_field(flat, "arguments"),
    )


def action_skeletons(
    messages: pa.Array | pa.ChunkedArray,
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Per row, its tool names in order: ``(names, row, offsets)``.

    ``names`` is one string per call ordered by (row, message, name): calls made in one
    assistant message (parallel calls) are sorted by name, so two trajectories that issue the
    same parallel calls in a different order have the same skeleton. ``offsets`` (N+1) gives
    each row's slice of ``names``.
    """
    msgs = flatten_messages(messages)
    calls = flatten_calls(msgs)
    n = len(msgs.offsets) - 1
    names = calls.name
    if len(names):
        name_code = pc.rank(names, sort_keys="ascending", tiebreaker="dense").to_numpy()
        order = np.lexsort((name_code, calls.message))
        names = names.take(pa.array(order))
        row = calls.row[order]
    else:
        row = calls.row
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=n), out=offsets[1:])
    return names, row, offsets


def skeleton_strings(messages: pa.Array | pa.ChunkedArray, sep: str = " ") -> pa.Array:
    """Each row's skeleton as one string (names joined by ``sep``); "" for no calls.

    >>> from trajsynth.core.schema import ARROW_SCHEMA
    >>> m = pa.array([[{"role": "assistant", "tool_calls": [{"id": "1", "name": "b"},
    ...     {"id": "2", "name": "a"}]}, {"role": "assistant", "tool_calls": [
    ...     {"id": "3", "name": "c"}]}], []], ARROW_SCHEMA.field("messages").type)
    >>> skeleton_strings(m).to_pylist()
    ['a b c', '']
    """
    names, _row, offsets = action_skeletons(messages)
    lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), names)
    return pc.fill_null(pc.binary_join(lists, sep), "")


def map_value(column: pa.Array | pa.ChunkedArray, key: str) -> np.ndarray:
    """The value under ``key`` in each row of a ``map<string, double>`` column (NaN if absent).

    >>> t = pa.array([[("a", 1.0)], [], None], pa.map_(pa.string(), pa.float64()))
    >>> map_value(t, "a").tolist()
    [1.0, nan, nan]
    """
    arr = as_array(column)
    if len(arr) == 0:
        return np.zeros(0, dtype=np.float64)
    values = pc.map_lookup(arr, pa.scalar(key, pa.string()), "first")
    return pc.fill_null(values.cast(pa.float64()), np.nan).to_numpy(zero_copy_only=False)
