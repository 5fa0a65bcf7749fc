"""The local transformers backend on a tiny random Qwen2 built in a fixture (nothing
downloaded): chat template with tools, batched generation, logprobs, token ids, greedy
determinism; and end to end over HTTP with `trajsynth serve --backend local`.

Run: PYTHONPATH=. python -m pytest tests/llm/test_local.py -q
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

from trajsynth.core.errors import ConfigError
from trajsynth.llm import BackendReply, ChatRequest, RawChoice, RoleConfig, aclose, client_for_role
from trajsynth.llm.server import ChatServer, ServerOptions

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "You help with travel."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]


def test_batched_generation_with_template_logprobs_and_token_ids(tiny_model_dir: Path) -> None:
    from trajsynth.llm.local import LocalBackend, _hf_messages

    backend = LocalBackend(
        RoleConfig(
            backend="local", model=str(tiny_model_dir), local={"batch_size": 8, "batch_wait_ms": 20}
        )
    )
    tok, _ = backend.load()
    prompt = tok.apply_chat_template(
        _hf_messages(CONVERSATION), tools=TOOLS, add_generation_prompt=True, tokenize=False
    )
    assert '"name": "get_weather"' in prompt and '"arguments": {"city": "Paris"}' in prompt
    assert prompt.endswith("<|im_start|>assistant\n")

    def request(text: str, **kw: Any) -> ChatRequest:
        return ChatRequest(
            messages=[*CONVERSATION, {"role": "user", "content": text}],
            tools=TOOLS,
            max_tokens=6,
            **kw,
        )

    async def main() -> list[BackendReply]:
        reqs = [
            request(f"question {i}", temperature=0, logprobs=True, top_logprobs=3) for i in range(5)
        ]
        return list(await asyncio.gather(*(backend.complete(r) for r in reqs)))

    replies = asyncio.run(main())
    assert backend.stats == {"batches": 1, "prompts": 5}  # five concurrent requests, one batch
    for reply in replies:
        choice = reply.choices[0]
        assert choice.token_ids and len(choice.logprobs) == len(choice.token_ids) <= 6
        assert all(t.logprob <= 0 and len(t.top) == 3 for t in choice.logprobs)
        # greedy: the chosen token is the most likely one
        assert all(math.isclose(t.logprob, t.top[0][1], abs_tol=1e-5) for t in choice.logprobs)
        assert reply.usage.completion_tokens == len(choice.token_ids)
        assert reply.usage.prompt_tokens > 50
    # greedy decoding is deterministic; sampling with n gives n choices
    again = asyncio.run(
        backend.complete(request("question 0", temperature=0, logprobs=True, top_logprobs=3))
    )
    assert again.choices[0].token_ids == replies[0].choices[0].token_ids
    sampled = asyncio.run(backend.complete(request("q", temperature=1.0, n=3, seed=4)))
    assert len(sampled.choices) == 3


def test_missing_model_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        client_for_role(
            "student", {"student": {"backend": "local", "model": str(tmp_path / "nope")}}
        )


def test_server_parses_local_model_text_into_native_tool_calls() -> None:
    class Fixed:
        stats: dict[str, int] = {}

        async def complete(self, request: ChatRequest) -> BackendReply:
            text = (
                '<think>need weather</think><tool_call>\n{"name": "get_weather", '
                '"arguments": {"city": "Oslo"}}\n</tool_call>'
            )
            return BackendReply(choices=[RawChoice(content=text, finish_reason="stop")])

    import json

    server = ChatServer(Fixed(), ServerOptions(parse_calls=True))  # type: ignore[arg-type]
    reply = asyncio.run(Fixed().complete(ChatRequest(messages=[])))
    body = json.loads(server._render(reply, 1, 1))
    msg = body["choices"][0]["message"]
    assert msg["content"] is None and msg["reasoning_content"] == "need weather"
    assert msg["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }


@pytest.mark.slow
def test_openai_backend_against_serve_local(tiny_model_dir: Path, serve: Any) -> None:
    server = serve("--backend", "local", "--model", str(tiny_model_dir))
    client = client_for_role(
        "student",
        {
            "student": {
                "backend": "openai",
                "base_url": server.base_url,
                "model": tiny_model_dir.name,
            }
        },
    )

    async def main() -> Any:
        try:
            return await asyncio.gather(
                *(
                    client.chat(
                        [*CONVERSATION, {"role": "user", "content": f"and in city {i}?"}],
                        TOOLS,
                        n=2,
                        temperature=0.7,
                        seed=i,
                        max_tokens=8,
                        logprobs=True,
                    )
                    for i in range(4)
                )
            )
        finally:
            await aclose()

    results = asyncio.run(main())
    for r in results:
        assert r.ok and len(r.choices) == 2 and r.attempts == 1
        for c in r.choices:
            assert c.logprobs and 1 <= len(c.logprobs) <= 8
            assert c.message.role == "assistant"
        assert r.usage.completion_tokens >= 2 and r.usage.prompt_tokens > 50
    m = server.metrics()
    assert m["chat_requests"] == 4 and m["ok"] == 4
    assert m["backend"]["prompts"] == 4 and m["backend"]["batches"] <= 4
