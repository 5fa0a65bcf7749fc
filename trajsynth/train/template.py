"""The student's chat template (Hermes / Qwen2.5 tool-call style) and trajectory → chat messages.

The template is the contract between training, serving and evaluation: SFT renders rows with
it and masks the loss by its ``{% generation %}`` markers, ``trajsynth serve --backend local``
and vLLM render prompts with it, and GRPO rollouts extend token sequences with its pieces. It
follows Qwen2.5's layout (``<|im_start|>role ... <|im_end|>``, tools in a ``<tools>`` block of
the system turn, calls as ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``,
tool results as ``<tool_response>`` blocks inside one user turn), which is what vLLM's
``hermes`` tool parser reads. Differences from Qwen2.5's own template, each for a reason:

1) ``{% generation %}`` spans exactly what the model writes after the generation prompt
   ``<|im_start|>assistant\\n``: reasoning, text, calls and the closing ``<|im_end|>`` (so the
   model learns to stop), nothing else. Qwen's training variant (TRL ``qwen2_5_training``)
   also puts the newline after ``<|im_end|>`` in the span; we leave it out so the masked tokens
   are the generated tokens, one for one;
2) tools can be written as one compact signature line each (``tool_format="signature"``,
   e.g. ``book_flight(flight_id: string, seats?: integer) - Book a flight.``) instead of
   Qwen's full JSON schema per tool (``tool_format="json"``): the tiny CPU student reads a
   prompt several times shorter, and learns the same call format;
3) the fixed instruction text around ``<tools>`` is one line, for the same reason;
4) an assistant message's ``reasoning`` is written as ``<think>...</think>`` before its text,
   as Qwen3 does.

The template is prefix-preserving: rendering the first k messages gives a prefix of rendering
k+1 (TRL checks this; GRPO's token-in/token-out rollouts rely on it, see
:func:`continuation_ids`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from ..core.schema import Message, Trajectory

__all__ = [
    "ADDED_TOKENS",
    "BOS",
    "DEFAULT_SYSTEM",
    "EOS",
    "GENERATION_PROMPT",
    "PAD",
    "SPECIAL_TOKENS",
    "chat_template",
    "continuation_ids",
    "hf_messages",
    "row_messages",
]

BOS = "<|im_start|>"
EOS = "<|im_end|>"  # end of every turn; the token generation stops on
PAD = "<|endoftext|>"
#: control tokens (never produced as text, skipped when decoding with skip_special_tokens)
SPECIAL_TOKENS = [PAD, BOS, EOS]
#: single tokens that stay in decoded text (vLLM's hermes parser needs the call tags as tokens)
ADDED_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<tools>",
    "</tools>",
    "<think>",
    "</think>",
]
GENERATION_PROMPT = f"{BOS}assistant\n"
DEFAULT_SYSTEM = "You are a helpful assistant. Use the tools to complete the task."

_TOOL_JSON = "{{- tool | tojson }}"
# name(param: type, optional?: type) - description; enums as type[a|b]
_TOOL_SIGNATURE = (
    "{%- set f = tool.function if tool.function is defined else tool %}"
    "{%- set ps = f.parameters if f.parameters is defined and f.parameters else {} %}"
    "{%- set req = ps.required if ps.required is defined and ps.required else [] %}"
    "{{- f.name ~ '(' }}"
    "{%- if ps.properties is defined and ps.properties %}"
    "{%- for pname, p in ps.properties.items() %}"
    "{{- pname }}{%- if pname not in req %}?{%- endif %}"
    "{{- ': ' ~ (p.type if p.type is defined else 'any') }}"
    "{%- if p.enum is defined and p.enum %}{{- '[' ~ (p.enum | join('|')) ~ ']' }}{%- endif %}"
    "{%- if not loop.last %}{{- ', ' }}{%- endif %}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- ')' }}"
    "{%- if f.description is defined and f.description %}{{- ' - ' ~ f.description }}{%- endif %}"
)

_TEMPLATE = """\
{%- if messages and messages[0].role == 'system' %}
    {%- set system = messages[0].content %}
{%- else %}
    {%- set system = '__DEFAULT_SYSTEM__' %}
{%- endif %}
{{- '<|im_start|>system\\n' ~ system }}
{%- if tools %}
    {{- '\\nCall tools as <tool_call>{"name": ..., "arguments": {...}}</tool_call>.\\n<tools>' }}
    {%- for tool in tools %}
        {{- '\\n' }}__TOOL__
    {%- endfor %}
    {{- '\\n</tools>' }}
{%- endif %}
{{- '<|im_end|>\\n' }}
{%- for message in messages %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' ~ message.role ~ '\\n' ~ message.content ~ '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant\\n' }}
        {%- generation %}
        {%- set rc = message.reasoning_content if message.reasoning_content is defined else none %}
        {%- if rc %}
            {{- '<think>\\n' ~ rc ~ '\\n</think>\\n' }}
        {%- endif %}
        {%- if message.content %}
            {{- message.content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- set call = tool_call.function if tool_call.function is defined else tool_call %}
                {%- if message.content or not loop.first %}
                    {{- '\\n' }}
                {%- endif %}
                {%- set args = call.arguments %}
                {{- '<tool_call>\\n{"name": "' ~ call.name ~ '", "arguments": ' }}
                {{- args if args is string else (args | tojson) }}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' ~ message.content ~ '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""


def chat_template(
    tool_format: Literal["signature", "json"] = "signature", system: str = DEFAULT_SYSTEM
) -> str:
    """The Jinja chat template (module docstring); ``system`` is used when a row has none.

    >>> t = chat_template()
    >>> "{%- generation %}" in t and "<tool_call>" in t
    True
    """
    if "'" in system or "\\" in system:
        raise ValueError("the default system prompt may not contain quotes or backslashes")
    tool = _TOOL_SIGNATURE if tool_format == "signature" else _TOOL_JSON
    return _TEMPLATE.replace("__DEFAULT_SYSTEM__", system).replace("__TOOL__", tool)


def _arguments(text: str) -> Any:
    """Call arguments as a JSON value when they parse (HF convention), else the raw text."""
    try:
        return json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return text


def hf_messages(
    messages: Sequence[Message | dict[str, Any]], *, reasoning: bool = True
) -> list[dict[str, Any]]:
    """Chat messages in the form HF chat templates take: OpenAI ``tool_calls`` entries with
    arguments as objects, ``reasoning`` as ``reasoning_content``, content never None.

    >>> call = {"id": "c1", "name": "f", "arguments": '{"a": 1}'}
    >>> hf_messages([Message(role="assistant", tool_calls=[call])])[0]["tool_calls"][0]["function"]
    {'name': 'f', 'arguments': {'a': 1}}
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        msg = m if isinstance(m, Message) else Message.model_validate(m)
        d: dict[str, Any] = {"role": msg.role, "content": msg.content or ""}
        if msg.tool_calls:
            d["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _arguments(c.arguments)},
                }
                for c in msg.tool_calls
            ]
        if msg.role == "tool":
            d["tool_call_id"] = msg.tool_call_id
            if msg.name:
                d["name"] = msg.name
        if reasoning and msg.reasoning:
            d["reasoning_content"] = msg.reasoning
        out.append(d)
    return out


def row_messages(row: Trajectory, *, reasoning: bool = True) -> list[dict[str, Any]]:
    """A trajectory row's conversation, ready for ``apply_chat_template`` (tools go separately:
    ``row.tools``). A task row (no messages yet) gives its first user request."""
    if row.messages:
        return hf_messages(row.messages, reasoning=reasoning)
    return [{"role": "user", "content": row.goal}]


def continuation_ids(
    tokenizer: Any,
    history: list[dict[str, Any]],
    new: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
) -> list[int]:
    """The token ids that follow an assistant turn's closing end-of-turn token when ``new``
    messages (tool results, a user turn) come after ``history`` (which ends with that
    assistant turn), up to and including the next generation prompt.

    GRPO rollouts append these ids to the ids the model generated, so what the model wrote is
    never re-tokenized. Both renderings are tokenized the way SFT tokenizes them
    (``apply_chat_template``), and the template must be prefix-preserving (checked here).
    """
    kwargs: dict[str, Any] = {"tools": tools or None, "tokenize": True, "return_dict": False}
    before = list(tokenizer.apply_chat_template(history, **kwargs))
    after = list(tokenizer.apply_chat_template(history + new, add_generation_prompt=True, **kwargs))
    eos = tokenizer.convert_tokens_to_ids(EOS)
    ends = [i for i, t in enumerate(before) if t == eos]
    if after[: len(before)] != before or not ends:
        raise ValueError("the chat template is not prefix-preserving after an assistant turn")
    return after[ends[-1] + 1 :]
