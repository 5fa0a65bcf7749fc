"""The student's chat template: ChatML with tools (Hermes / Qwen2.5 tool-call style).

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
   prompt several times shorter, and learns the same call format. ``described`` adds a
   line per parameter that has a description (``  seats: How many seats, 1 to 9.``): what a
   parameter means, its format, unit and default live there, and a benchmark's answers
   depend on them, at a fraction of the JSON schema's length;
3) the fixed instruction text around ``<tools>`` is one line, for the same reason;
4) an assistant message's ``reasoning`` is written as ``<think>...</think>`` before its text,
   as Qwen3 does.

The template is prefix-preserving: rendering the first k messages gives a prefix of rendering
k+1 (TRL checks this; GRPO's token-in/token-out rollouts rely on it, see
``trajsynth.train.template.continuation_ids``).

The same template serves any ChatML model whose own template cannot show tools (SmolLM2's
only renders ``role`` and ``content``): :func:`needs_tool_template` tells them apart, and
``trajsynth.llm.models`` writes this template into such a model's folder when it prepares
it. A model that brings its own tool template keeps it.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = [
    "ADDED_TOKENS",
    "BOS",
    "DEFAULT_SYSTEM",
    "EOS",
    "GENERATION_PROMPT",
    "PAD",
    "SPECIAL_TOKENS",
    "chat_template",
    "needs_tool_template",
    "template_format",
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

# the signature line, then one line per parameter that has a description: "  name: text"
_TOOL_DESCRIBED = _TOOL_SIGNATURE + (
    "{%- if ps.properties is defined and ps.properties %}"
    "{%- for pname, p in ps.properties.items() %}"
    "{%- if p.description is defined and p.description %}"
    "{{- '\\n  ' ~ pname ~ ': ' ~ p.description }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- endif %}"
)
ToolFormat = Literal["signature", "described", "json"]
_TOOLS: dict[ToolFormat, str] = {
    "signature": _TOOL_SIGNATURE,
    "described": _TOOL_DESCRIBED,
    "json": _TOOL_JSON,
}

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


def chat_template(tool_format: ToolFormat = "signature", system: str = DEFAULT_SYSTEM) -> str:
    """The Jinja chat template (module docstring); ``system`` is used when a row has none.

    >>> t = chat_template()
    >>> "{%- generation %}" in t and "<tool_call>" in t
    True
    """
    if "'" in system or "\\" in system:
        raise ValueError("the default system prompt may not contain quotes or backslashes")
    return _TEMPLATE.replace("__DEFAULT_SYSTEM__", system).replace("__TOOL__", _TOOLS[tool_format])


def template_format(template: str | None) -> ToolFormat | None:
    """The tool format of ``template`` when it is this module's template with the default
    system prompt (a prepared SmolLM2, a checkpoint trained from one), else None.

    >>> template_format(chat_template("described")), template_format("{{ messages }}")
    ('described', None)
    """
    return next((f for f in _TOOLS if template == chat_template(f)), None)


def needs_tool_template(template: str | None) -> bool:
    """True for a ChatML template that cannot show tools or mark assistant tokens (it
    never reads ``tools`` or has no ``{% generation %}`` span): such a model gets
    :func:`chat_template`.

    >>> needs_tool_template("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}")
    True
    >>> needs_tool_template(chat_template())
    False
    """
    if not template or "<|im_start|>" not in template:
        return False
    reads_tools = re.search(r"\btools\b", template) is not None
    marks = re.search(r"\{%-?\s*generation\s*-?%\}", template) is not None
    return not (reads_tools and marks)
