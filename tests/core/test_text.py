"""Text from outside (lone surrogates, NUL, invalid UTF-8) passes every encode path: the
cleaning helper itself, ids, the LLM cache, Arrow batches, the client and tool outputs. The
one word splitter gives the words the graph, the simulated environments, the simulator's
phrasing and the methods compare names with.

Run: PYTHONPATH=. python -m pytest tests/core/test_text.py -q
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow as pa

from trajsynth.core.batch import to_batch, to_records
from trajsynth.core.ids import stable_hash
from trajsynth.core.schema import Message, Trajectory
from trajsynth.core.surface import param_words
from trajsynth.core.text import clean_json, clean_text, decode_text, is_clean, split_words
from trajsynth.envs.base import ToolResult
from trajsynth.graph.signature import words
from trajsynth.llm.base import Backend, BackendReply, ChatRequest, RawChoice, RoleConfig
from trajsynth.llm.cache import ResponseCache
from trajsynth.llm.client import LLMClient

LONE = "Done \ud83d"  # what json.loads('"Done \\ud83d"') gives
PAIR = "\ud83d\ude00"  # a surrogate pair as two code points (json-repair output)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def test_clean_text_replaces_lone_surrogates_joins_pairs_and_drops_nul() -> None:
    assert json.loads('"Done \\ud83d"') == LONE
    assert clean_text(LONE) == "Done \ufffd"
    assert clean_text(PAIR) == "\U0001f600"
    assert clean_text("a\x00b\udc80c") == "ab\ufffdc"
    assert clean_text("plain ascii") == "plain ascii"
    valid = "café 😀 ok"
    assert clean_text(valid) is valid and is_clean(valid)
    assert not is_clean(LONE) and not is_clean("\x00")
    assert decode_text(b"caf\xc3\xa9 \xff\xfe\x00!") == "café \ufffd\ufffd!"


def test_clean_json_cleans_every_string_and_key_without_recursion() -> None:
    value = {"k\ud800": [LONE, {"x": PAIR, "n": 1, "t": (1, "\x00")}], "ok": None}
    out = clean_json(value)
    want = {"k\ufffd": ["Done \ufffd", {"x": "\U0001f600", "n": 1, "t": [1, ""]}], "ok": None}
    assert out == want
    same = {"a": ["b", {"c": 1.5}]}
    assert clean_json(same) is same
    deep: list = []
    node = deep
    for _ in range(50_000):  # far deeper than the interpreter's recursion limit
        node.append([])
        node = node[0]
    node.append(LONE)
    cleaned = clean_json(deep)
    for _ in range(50_000):
        cleaned = cleaned[0]
    assert cleaned == ["Done \ufffd"]


def test_ids_hash_any_string_and_valid_text_exactly_as_before() -> None:
    assert len(stable_hash({"content": LONE})) == 32
    assert stable_hash({"content": LONE}) != stable_hash({"content": "Done \ufffd"})
    # unchanged for valid text: the hash is BLAKE2b of the UTF-8 canonical JSON
    import hashlib

    want = hashlib.blake2b('{"a":"é😀"}'.encode(), digest_size=16).hexdigest()
    assert stable_hash({"a": "é😀"}) == want


def test_cache_put_never_raises_and_round_trips_lone_surrogates(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    key = "a" * 40
    cache.put(key, {"reply": {"choices": [{"content": LONE}]}})
    cache.put("b" * 40, {"reply": {"bad": object()}})  # not JSON: lost, not raised
    assert cache.get(key)["reply"]["choices"][0]["content"] == LONE
    assert cache.get("b" * 40) is None
    for seg in (tmp_path / "llm").iterdir():
        seg.read_bytes().decode("utf-8")  # the segment is valid UTF-8
    fresh = ResponseCache(tmp_path)  # another process reads it back
    assert fresh.get(key)["reply"]["choices"][0]["content"] == LONE


def test_to_batch_writes_rows_with_lone_surrogates_as_valid_utf8() -> None:
    row = Trajectory(
        id="t1",
        task_id="task1",
        messages=[Message(role="user", content="hi\x00"), Message(role="assistant", content=LONE)],
    )
    batch = to_batch([row])
    assert isinstance(batch, pa.RecordBatch) and batch.num_rows == 1
    back = to_records(batch)[0]
    assert back.messages[1].content == "Done \ufffd"
    assert all(_utf8(m.content or "") for m in back.messages)


def test_tool_output_is_clean_text() -> None:
    r = ToolResult(call_id="c", name="echo", arguments={}, output={"text": LONE, "raw": "a\x00"})
    content = r.content()
    assert _utf8(content) and "\ufffd" in content
    assert _utf8(ToolResult(call_id="c", name="e", arguments={}, output=PAIR).content())


class _SurrogateBackend(Backend):
    name = "fake"

    async def complete(self, request: ChatRequest) -> BackendReply:
        return BackendReply(
            choices=[
                RawChoice(
                    content="Done \ud83d\x00",
                    reasoning="hmm \udfff",
                    tool_calls=[{"id": "c\ud800", "name": "say", "arguments": '{"t": "\ud83d"}'}],
                )
            ],
            model="fake",
        )


def test_client_cleans_replies_before_caching_and_parsing(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    client = LLMClient("teacher", RoleConfig(backend="sim"), _SurrogateBackend(), cache)

    async def ask() -> tuple:
        first = await client.chat([{"role": "user", "content": "x"}])
        second = await client.chat([{"role": "user", "content": "x"}])
        return first, second

    first, second = asyncio.run(ask())
    assert not first.cached and second.cached
    for result in (first, second):
        msg = result.choices[0].message
        assert msg.content == "Done \ufffd" and msg.reasoning == "hmm \ufffd"
        call = msg.tool_calls[0]
        assert call.name == "say" and _utf8(call.id) and _utf8(call.arguments)
        assert _utf8(json.dumps(result.model_dump(mode="json"), ensure_ascii=False))
    for seg in (tmp_path / "llm").iterdir():
        seg.read_bytes().decode("utf-8")


def test_split_words_splits_every_way_a_name_is_written() -> None:
    assert split_words("getOrderDetails") == ["get", "order", "details"]
    assert split_words("get_order-details.v2") == ["get", "order", "details", "v2"]
    assert split_words("flights[].flightId: Flight id, e.g. 'SW101'") == [
        "flights", "flight", "id", "flight", "id", "e", "g", "sw101"
    ]  # fmt: skip
    assert split_words("user2Name") == ["user2", "name"]
    # a run of capitals is one word, so a plural acronym keeps its "s"
    assert split_words("reportIDs") == ["report", "ids"]
    assert split_words("HTTPServer") == ["httpserver"]
    assert split_words("  __ ") == []


def test_the_graph_and_the_phrasing_read_names_through_the_splitter() -> None:
    # content words: numbers alone, stop words and a plural "s" dropped
    assert words("flights[].flightId: Flight id, e.g. 'SW101'") == (
        "flight", "flight", "id", "flight", "id", "sw101"
    )  # fmt: skip
    assert words("The 3 itemsByDate") == ("item", "date")
    assert param_words("maxPrice") == param_words("max_price") == "max price"
    assert param_words("filters.departure-date") == "filters departure date"
