"""Column-wise views of trajectory rows, for the quality stages at a million rows.

Nothing here builds a Python object per row: messages and tool calls are flattened with
``pyarrow.compute`` into parallel numpy/Arrow arrays that carry the row (and message) index of
every element, and per-row results are folded back with ``np.bincount`` / ``reduceat``.

- :func:`flatten_messages` / :func:`flatten_calls`: one element per message / per tool call,
  with its row and message index;
- :func:`tokens` / :func:`normalize_text`: lowercase word tokens (a byte-table lookup over the
  whole column), and those tokens joined by single spaces;
- :func:`action_skeletons`: per row, the tool names in call order, calls of one assistant
  message (parallel calls) sorted by name, so their order does not matter;
- :func:`hash_strings`: a 64-bit content hash of every string (FNV-1a over the bytes with a
  splitmix64 finish), vectorised over strings of equal position, and stable across processes;
- :func:`map_value`: one key of a ``map<string, double>`` column (``reward_components``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    "tokens",
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
        offset_type: type[np.signedinteger[Any]] = np.int64
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


#: byte map of the tokenizer: ASCII letters lowercased, other ASCII → space, bytes ≥ 128 kept
_TOKEN_BYTES = np.arange(256, dtype=np.uint8)
for _c in range(128):
    if not chr(_c).isalnum():
        _TOKEN_BYTES[_c] = 32
    elif chr(_c).isupper():
        _TOKEN_BYTES[_c] = ord(chr(_c).lower())


def tokens(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each string as a list of lowercase word tokens (a ``list<string>`` array).

    Letters and digits make words; every other ASCII character separates them. Non-ASCII
    text is lowercased and kept inside words (so accented words stay whole, while non-ASCII
    punctuation such as an em dash sticks to its neighbour: the price of doing this as one
    byte-table lookup over the whole column instead of a regular expression per string).

    >>> tokens(pa.array(["  Book a FLIGHT, to São-Paulo!! ", None])).to_pylist()
    [['book', 'a', 'flight', 'to', 'são', 'paulo'], []]
    """
    arr = pc.utf8_lower(pc.fill_null(as_array(values).cast(pa.string()), ""))
    if len(arr) == 0:
        return pa.array([], pa.list_(pa.string()))
    bufs = arr.buffers()
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else None
    if data is not None and len(data):
        mapped = pa.StringArray.from_buffers(
            len(arr), bufs[1], pa.py_buffer(_TOKEN_BYTES[data]), bufs[0], arr.null_count, arr.offset
        )
    else:
        mapped = arr
    trimmed = pc.ascii_trim_whitespace(mapped)
    split = pc.ascii_split_whitespace(trimmed)
    empty = pc.equal(pc.binary_length(trimmed), 0)
    if pc.any(empty).as_py():
        split = pc.if_else(empty, pa.scalar([], split.type), split)
    return split


def normalize_text(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The :func:`tokens` of each string joined by single spaces.

    >>> normalize_text(pa.array(["  Book a FLIGHT, to Paris!! ", None])).to_pylist()
    ['book a flight to paris', '']
    """
    return pc.fill_null(pc.binary_join(tokens(values), " "), "")


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


def _chunk_calls(chunk: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(names, message index, row index) of every call in one chunk (indices chunk-local)."""
    if chunk.null_count:
        chunk = pc.fill_null(chunk, pa.scalar([], type=chunk.type))
    msg_row = pc.list_parent_indices(chunk).to_numpy(zero_copy_only=False).astype(np.int64)
    tc = pc.struct_field(pc.list_flatten(chunk), "tool_calls")
    if tc.null_count:
        tc = pc.fill_null(tc, pa.scalar([], type=tc.type))
    call_msg = pc.list_parent_indices(tc).to_numpy(zero_copy_only=False).astype(np.int64)
    names = pc.fill_null(pc.struct_field(pc.list_flatten(tc), "name"), "")
    return names, call_msg, msg_row[call_msg] if len(call_msg) else call_msg


def action_skeletons(
    messages: pa.Array | pa.ChunkedArray,
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Per row, its tool names in order: ``(names, row, offsets)``.

    ``names`` is one string per call ordered by (row, message, name): calls made in one
    assistant message (parallel calls) are sorted by name, so two trajectories that issue the
    same parallel calls in a different order have the same skeleton. ``offsets`` (N+1) gives
    each row's slice of ``names``. A chunked column is read chunk by chunk (never combined:
    only the tool names are copied out).
    """
    chunks = messages.chunks if isinstance(messages, pa.ChunkedArray) else [messages]
    n = len(messages)
    all_names: list[pa.Array] = []
    msgs: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    row_base = msg_base = 0
    for chunk in chunks:
        names, call_msg, call_row = _chunk_calls(chunk)
        all_names.append(names)
        msgs.append(call_msg + msg_base)
        rows.append(call_row + row_base)
        row_base += len(chunk)
        msg_base += int(pc.sum(pc.fill_null(pc.list_value_length(chunk), 0)).as_py() or 0)
    names = pa.concat_arrays(all_names) if all_names else pa.array([], pa.string())
    message = np.concatenate(msgs) if msgs else np.zeros(0, dtype=np.int64)
    row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    if len(names):
        enc = as_array(pc.dictionary_encode(names))
        dict_rank = pc.rank(enc.dictionary, sort_keys="ascending", tiebreaker="dense").to_numpy()
        name_code = dict_rank[enc.indices.to_numpy(zero_copy_only=False)]
        order = np.lexsort((name_code, message))
        names = names.take(pa.array(order))
        row = row[order]
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
