"""The client in process: role settings, the cache, usage counters per context, messages.

Run: PYTHONPATH=. python -m pytest tests/llm/test_client.py -q
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from trajsynth.core.errors import ConfigError
from trajsynth.core.schema import Message, ToolCall
from trajsynth.llm import ChatRequest, client_for_role, llm_usage, role_config
from trajsynth.llm.cache import ResponseCache, request_key
from trajsynth.llm.client import NO_CACHE_ENV, to_openai_messages
from trajsynth.stages import Context, ContextSpec


class _Spec:
    def __init__(self, cache_dir: Path | None) -> None:
        self.cache_dir = str(cache_dir) if cache_dir else None


def test_role_settings_defaults_star_and_clear_errors() -> None:
    assert role_config("teacher", {}).backend == "sim"  # unconfigured: the simulator
    roles = {
        "*": {"temperature": 0.3, "max_concurrency": 8},
        "judge": {
            "backend": "openai",
            "base_url": "http://x/v1/",
            "model": "m",
            "temperature": 0.0,
        },
    }
    judge = role_config("judge", roles)
    assert (judge.temperature, judge.max_concurrency, judge.base_url) == (0.0, 8, "http://x/v1")
    assert role_config("teacher", roles).temperature == 0.3
    with pytest.raises(ConfigError, match=r"defaults\.llm\.judge\.temprature: unknown field"):
        role_config("judge", {"judge": {"temprature": 1}})
    with pytest.raises(ConfigError, match=r"defaults\.llm\.judge\.backend"):
        role_config("judge", {"judge": {"backend": "vllm"}})
    with pytest.raises(ConfigError, match=r"defaults\.llm\.teacher\.sim\.profile\.stop_erly"):
        client_for_role("teacher", {"teacher": {"sim": {"profile": {"stop_erly": 0.1}}}})
    with pytest.raises(ConfigError, match="api_key_env 'NO_SUCH_KEY_VAR' is not set"):
        client_for_role(
            "t", {"t": {"backend": "openai", "model": "m", "api_key_env": "NO_SUCH_KEY_VAR"}}
        )


def test_messages_are_sent_in_openai_form() -> None:
    msgs = to_openai_messages(
        [
            Message(role="user", content="hi"),
            Message(
                role="assistant",
                reasoning="think",
                tool_calls=[ToolCall(id="c1", name="f", arguments='{"a": 1}')],
            ),
            Message(role="tool", tool_call_id="c1", name="f", content="ok"),
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c2", "name": "g", "arguments": {"b": 2}}],
            },
        ]
    )
    assert msgs[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
        ],
    }
    assert msgs[2] == {"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "f"}
    assert msgs[3]["tool_calls"][0]["function"] == {"name": "g", "arguments": '{"b": 2}'}


def _ask(client: Any, text: str = "hello", **kw: Any) -> Any:
    return asyncio.run(client.chat([{"role": "user", "content": text}], **kw))


def test_cache_hits_cost_nothing_and_can_be_bypassed(tmp_path: Path, monkeypatch: Any) -> None:
    roles = {"judge": {"cache": True, "prices": {"prompt_per_mtok": 3.0}}}
    ctx = Context(ContextSpec(stage_id="s", llm=roles, cache_dir=str(tmp_path)))
    first = _ask(ctx.llm("judge"), seed=1)
    second = _ask(ctx.llm("judge"), seed=1)
    assert not first.cached and second.cached and second.choices == first.choices
    assert first.cost_usd == pytest.approx(first.usage.prompt_tokens * 3.0 / 1e6)
    assert second.cost_usd == 0
    c = ctx.metrics.snapshot()["counters"]
    assert c["llm.judge.requests"] == 2 and c["llm.judge.cache_hits"] == 1
    assert c["llm.judge.prompt_tokens"] == first.usage.prompt_tokens  # counted once
    _ask(ctx.llm("judge"), seed=2)  # another seed: another key
    assert len(ResponseCache(tmp_path)) == 2
    # the simulator's answer depends on metadata, so metadata is part of its key
    _ask(ctx.llm("judge"), seed=1, metadata={"role": "judge", "mode": "apigen", "calls": []})
    assert len(ResponseCache(tmp_path)) == 3
    # --no-cache: neither read nor written
    monkeypatch.setenv(NO_CACHE_ENV, "1")
    other = Context(ContextSpec(stage_id="t", llm=roles, cache_dir=str(tmp_path)))
    assert not _ask(other.llm("judge"), seed=1).cached
    assert len(ResponseCache(tmp_path)) == 3


def test_usage_lands_in_the_calling_context_only(tmp_path: Path) -> None:
    spec = ContextSpec(stage_id="s", cache_dir=str(tmp_path))
    a, b = Context(spec), Context(spec)
    assert a.llm("helper").backend is b.llm("helper").backend  # one client per process
    _ask(a.llm("helper"))
    _ask(a.llm("helper"), text="again")
    _ask(b.llm("other"))
    # a simulated teacher needs its task: without metadata the request fails, recorded
    failed = _ask(b.llm("teacher"))
    assert not failed.ok and "sim actor: invalid metadata: ground_truth" in failed.error
    ua, ub = llm_usage(a.metrics.snapshot()), llm_usage(b.metrics.snapshot())
    assert set(ua) == {"helper"} and ua["helper"]["requests"] == 2
    assert ua["helper"]["completion_tokens"] > 0 and ua["helper"]["prompt_tokens"] > 0
    assert set(ub) == {"other", "teacher"} and ub["teacher"]["errors"] == 1


def test_cache_keys_exclude_secrets_and_the_store_survives_torn_lines(tmp_path: Path) -> None:
    req = ChatRequest(messages=[{"role": "user", "content": "x"}], seed=1)
    a = role_config("t", {"t": {"backend": "openai", "model": "m", "api_key": "sk-aaa"}})
    b = role_config("t", {"t": {"backend": "openai", "model": "m", "api_key": "sk-bbb"}})
    assert request_key(a.identity(), req, with_metadata=False) == request_key(
        b.identity(), req, with_metadata=False
    )
    other = req.model_copy(update={"temperature": 0.5})
    assert request_key(a.identity(), other, with_metadata=False) != request_key(
        a.identity(), req, with_metadata=False
    )

    cache = ResponseCache(tmp_path)
    cache.put("a" * 40, {"reply": {"x": 1}})
    cache.put("b" * 40, {"reply": {"x": 2}})
    # another process's segment, with a torn last line (a crash mid-write)
    seg = tmp_path / "llm" / "seg-999-deadbeef.jsonl"
    good = json.dumps({"k": "c" * 40, "v": {"reply": {"x": 3}, "format": 1}})
    seg.write_text(good + "\n" + '{"k": "' + "d" * 40 + '", "v": {"rep')
    fresh = ResponseCache(tmp_path)
    assert fresh.get("a" * 40) == {"reply": {"x": 1}, "format": 1}
    assert fresh.get("c" * 40)["reply"] == {"x": 3}
    assert fresh.get("d" * 40) is None and len(fresh) == 3
    # a segment that grows later is picked up on a miss (at most once per refresh_s)
    live = ResponseCache(tmp_path, refresh_s=0.0)
    assert live.get("e" * 40) is None
    with open(seg, "a") as f:
        f.write("\n" + json.dumps({"k": "e" * 40, "v": {"reply": {"x": 5}, "format": 1}}) + "\n")
    assert live.get("e" * 40)["reply"] == {"x": 5}


def test_scripted_backend_answers_stage_requests_through_the_same_client() -> None:
    from trajsynth.core.errors import EndpointError
    from trajsynth.llm import use_scripted

    ctx = Context(ContextSpec(stage_id="jglv"))

    def judge(request: ChatRequest) -> Any:
        text = request.messages[-1]["content"]
        if text == "fail":
            raise EndpointError("HTTP 400: context too long")
        if text == "call":
            return '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
        return ["RESPONSE1_INCORRECT.", "BOTH_CORRECT."]

    backend = use_scripted(ctx, "judge", judge, prices={"completion_per_mtok": 10.0})
    votes = _ask(ctx.llm("judge"), text="vote", n=3)
    assert [c.message.content for c in votes.choices] == [
        "RESPONSE1_INCORRECT.",
        "BOTH_CORRECT.",
        "RESPONSE1_INCORRECT.",
    ]
    assert votes.backend == "scripted" and votes.cost_usd > 0
    call = _ask(ctx.llm("judge"), text="call").choices[0].message.tool_calls[0]
    assert (call.name, call.arguments) == ("f", '{"x": 1}')
    failed = _ask(ctx.llm("judge"), text="fail")
    assert not failed.ok and "context too long" in failed.error
    assert [r.messages[-1]["content"] for r in backend.requests] == ["vote", "call", "fail"]
    c = ctx.metrics.snapshot()["counters"]
    assert c["llm.judge.requests"] == 3 and c["llm.judge.errors"] == 1
