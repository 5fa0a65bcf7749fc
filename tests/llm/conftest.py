"""Fixtures for the LLM tests: `trajsynth serve` subprocesses and a tiny local model.

Servers are started on 127.0.0.1 with ``--port 0`` (the port is read from the line the server
prints when ready) and stopped when the test ends. The tiny model is built here from a config
and a tokenizer trained on a few lines (nothing is downloaded).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trajsynth.llm.client import aclose, reset_clients
from trajsynth.llm.server import ServeProcess, spawn_server

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def serve() -> Iterator[Callable[..., ServeProcess]]:
    """``serve("--latency-ms", "5")`` starts a server; all are stopped after the test."""
    started: list[ServeProcess] = []

    def _start(*args: str) -> ServeProcess:
        server = spawn_server(*args)
        started.append(server)
        return server

    yield _start
    for s in started:
        s.stop()


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    """Process-wide LLM clients are per settings; start every test without old ones."""
    reset_clients()
    yield
    reset_clients()


# -- tiny local model ----------------------------------------------------------------------

CHAT_TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
Call a tool with <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- elif message.role == 'assistant' %}<|im_start|>assistant
{% if message.content %}{{ message.content }}{% endif %}
{%- for tc in message.tool_calls or [] %}
<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

_CORPUS = [
    'user assistant tool system <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
    "</tool_call> The weather in Paris is sunny. Book a flight from Lisbon to Oslo.",
    "What is the time in Tokyo? It is 10 am. Convert 100 USD to EUR: 92 EUR.",
]


def build_tiny_model(folder: Path) -> Path:
    """A random 2-layer Qwen2 with a 400-token byte-level BPE tokenizer and a tool template."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    specials = [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<tool_call>",
        "</tool_call>",
        "<think>",
        "</think>",
    ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 20, trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(hf),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        eos_token_id=hf.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=hf.pad_token_id,
        tie_word_embeddings=True,
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)
    hf.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


def arun(coro: Any) -> Any:
    """asyncio.run, closing the HTTP connections the clients opened on that loop."""

    async def main() -> Any:
        try:
            return await coro
        finally:
            await aclose()

    return asyncio.run(main())
