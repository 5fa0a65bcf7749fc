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


def test_prefix_cache_gives_the_same_replies_and_reuses_the_episode_history(
    tiny_model_dir: Path,
) -> None:
    """Three steps of four token-in episodes (prompt → reply → tool result → ...), plus a new
    episode joining at the last step, so one batch mixes rows with long, short and no reused
    prefix: the same token ids and log-probabilities as without the cache, and most of every
    later prompt's tokens reused."""
    from trajsynth.llm.local import LocalBackend

    def backend(mb: int) -> LocalBackend:
        return LocalBackend(
            RoleConfig(backend="local", model=str(tiny_model_dir), local={"prefix_cache_mb": mb})
        )

    def play(b: LocalBackend) -> list[list[tuple[list[int], list[float]]]]:
        tok, _ = b.load()
        result = tok("\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n")
        observation = result["input_ids"] + tok("<|im_start|>assistant\n")["input_ids"]
        prompts = [
            b._prompt_ids(
                ChatRequest(
                    messages=[*CONVERSATION, {"role": "user", "content": f"and in city {i}?"}],
                    tools=TOOLS,
                )
            )
            for i in range(5)
        ]
        live, steps = prompts[:4], []
        for step in range(3):
            if step == 2:
                live.append(prompts[4])
            replies = b.generate(
                [
                    ChatRequest(
                        messages=[], prompt_token_ids=p, temperature=0, max_tokens=7, logprobs=True
                    )
                    for p in live
                ]
            )
            choices = [r.choices[0] for r in replies]
            steps.append([(c.token_ids, [t.logprob for t in c.logprobs]) for c in choices])
            live = [p + c.token_ids + observation for p, c in zip(live, choices, strict=True)]
        return steps

    plain, cached = backend(0), backend(64)
    assert plain.prefix_cache is None and cached.prefix_cache is not None
    want, got = play(plain), play(cached)
    for step_want, step_got in zip(want, got, strict=True):
        for (ids_w, lp_w), (ids_g, lp_g) in zip(step_want, step_got, strict=True):
            assert ids_g == ids_w
            assert lp_g == pytest.approx(lp_w, abs=1e-4)
    stats = cached.prefix_cache.stats
    assert stats["lookups"] == 4 + 4 + 5
    # step 1: the four prompts share the conversation (all but the last question), computed
    # in one batch, so nothing is cached yet; steps 2 and 3 reuse each episode's history, and
    # the new episode at step 3 reuses the shared conversation
    assert stats["hits"] == 4 + 5
    assert stats["reused_tokens"] > 0.6 * stats["prompt_tokens"]


def test_prefix_cache_memory_is_bounded_and_longer_entries_replace_their_prefixes() -> None:
    torch = pytest.importorskip("torch")
    from trajsynth.llm.prefix_cache import PrefixCache

    def layers(n: int) -> list[tuple[Any, Any]]:  # 2 layers, 1 head, dim 4: 64 bytes a token
        return [(torch.full((1, n, 4), float(n)), torch.zeros(1, n, 4)) for _ in range(2)]

    cache = PrefixCache(budget_bytes=64 * 10)
    cache.store([1, 2, 3], layers(3))
    cache.store([1, 2, 3, 4, 5], layers(5))  # extends [1, 2, 3]: replaces it
    assert len(cache) == 1
    hit = cache.lookup([1, 2, 3, 9, 9])
    assert hit is not None and hit.length == 3  # the common prefix of the longer entry
    assert hit.layers[0][0].shape == (1, 3, 4) and float(hit.layers[0][0][0, 0, 0]) == 5.0
    assert cache.lookup([1, 2, 3, 4, 5]).length == 4  # never the whole prompt
    assert cache.lookup([7, 8]) is None
    cache.store([7, 8, 9, 10, 11, 12], layers(6))  # 5 + 6 tokens > 10: the oldest goes
    assert len(cache) == 1 and cache.lookup([1, 2, 3, 4]) is None
    cache.store(list(range(20)), layers(20))  # larger than the whole budget: not kept
    assert len(cache) == 1


def test_a_policy_in_training_never_reuses_keys_and_values(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trajsynth.llm.local import LocalBackend

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    assert LocalBackend.from_model(model, tok).prefix_cache is None
