"""The chat template, the assistant-only loss mask and the tiny student's folder.

Run: python -m pytest tests/train/test_template.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from trajsynth.train.data import tokenize_row
from trajsynth.train.template import EOS, continuation_ids, hf_messages, row_messages
from trajsynth.train.tiny import PRETOKENIZE_PATTERN, TinyConfig

from .conftest import TOOLS, conversation


def _runs(ids: list[int], mask: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i, m in zip(ids, mask, strict=True):
        if m:
            if not runs or runs[-1][-1] is None:
                runs.append([])
            runs[-1].append(i)
        elif runs and runs[-1] and runs[-1][-1] is not None:
            runs[-1].append(None)  # close the run
    return [[i for i in r if i is not None] for r in runs]


def test_mask_is_exactly_the_assistant_turns(tiny) -> None:
    """Decode only the masked-in tokens: exactly the assistant turns (calls and text), in
    order, each closed by its end-of-turn token; nothing from tool results, user or system."""
    _, tok = tiny
    row = conversation(0)
    ex = tokenize_row(tok, row)
    spans = [tok.decode(r, skip_special_tokens=False) for r in _runs(ex.input_ids, ex.mask)]
    call = '<tool_call>\n{{"name": "{}", "arguments": {}}}\n</tool_call>'
    expected = [
        "<think>\nTwo independent calls.\n</think>\n"
        + call.format("book_flight", json.dumps({"city": "Paris", "seats": 2}))
        + "\n"
        + call.format("get_weather", json.dumps({"city": "Paris"}))
        + EOS,
        "Booked B0; it is sunny." + EOS,
        call.format("book_flight", json.dumps({"city": "Rome"})) + EOS,
        "Booked R1." + EOS,
    ]
    assert spans == expected
    masked_in = "".join(spans)
    for foreign in (
        "You book trips",
        "Book 2 seats",
        '"sky": "sunny"',
        '"booking": "R1"',
        "one seat to Rome",
        "book_flight(city",
        "<tool_response>",
        "<|im_start|>",
    ):
        assert foreign not in masked_in
    # and every assistant token is masked in: the masked-out text holds none of it
    masked_out = tok.decode(
        [i for i, m in zip(ex.input_ids, ex.mask, strict=True) if not m], skip_special_tokens=False
    )
    for own in ("Two independent calls", '"seats": 2', "it is sunny", "Booked R1."):
        assert own not in masked_out
    assert sum(ex.mask) == sum(len(r) for r in _runs(ex.input_ids, ex.mask))


def test_deviated_steps_are_context_not_targets(tiny) -> None:
    """STeCa keeps the agent's deviated step as context: its tokens stay in the input but
    carry no loss; every other assistant turn keeps its mask."""
    _, tok = tiny
    row = conversation(0)
    flags: list[list[str]] = [[] for m in row.messages if m.role == "assistant"]
    flags[2] = ["deviated"]
    flagged = row.derive(step_flags=flags)
    plain, masked = tokenize_row(tok, row), tokenize_row(tok, flagged)
    assert masked.input_ids == plain.input_ids
    spans = [tok.decode(r, skip_special_tokens=False) for r in _runs(masked.input_ids, masked.mask)]
    assert len(spans) == 3 and not any("Rome" in s for s in spans)
    assert spans == [
        tok.decode(r, skip_special_tokens=False)
        for i, r in enumerate(_runs(plain.input_ids, plain.mask))
        if i != 2
    ]


def test_rollout_tokens_equal_sft_tokens(tiny) -> None:
    """Token in / token out: prompt + generated spans + continuation ids reproduce the SFT
    tokenization of the whole conversation exactly (no re-tokenization drift)."""
    _, tok = tiny
    row = conversation(1, "Oslo")
    full = tokenize_row(tok, row)
    msgs = row_messages(row)
    first_assistant = 2
    ids = list(
        tok.apply_chat_template(
            msgs[:first_assistant], tools=TOOLS, add_generation_prompt=True, return_dict=False
        )
    )
    spans = _runs(full.input_ids, full.mask)
    assistant_at = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    for k, at in enumerate(assistant_at):
        ids += spans[k]  # what the model "generated"
        nxt = assistant_at[k + 1] if k + 1 < len(assistant_at) else len(msgs)
        if nxt > at + 1:
            ids += continuation_ids(tok, msgs[: at + 1], msgs[at + 1 : nxt], TOOLS)
    # the SFT rendering ends with the newline after the last turn; rollouts end at its EOS
    assert ids == full.input_ids[: len(ids)]
    assert tok.decode(full.input_ids[len(ids) :]) == "\n"


def test_prefix_preserving_and_generation_prompt(tiny) -> None:
    _, tok = tiny
    msgs = row_messages(conversation(2))
    for k in range(1, len(msgs)):
        if msgs[k - 1]["role"] == msgs[k]["role"] == "tool":
            continue  # consecutive tool results share one user turn (as in Qwen2.5)
        a = tok.apply_chat_template(msgs[:k], tools=TOOLS, tokenize=False)
        b = tok.apply_chat_template(msgs[: k + 1], tools=TOOLS, tokenize=False)
        assert b.startswith(a)
    prompt = tok.apply_chat_template(
        msgs[:2], tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("<|im_start|>assistant\n")
    assert "book_flight(city: string, seats?: integer[1|2]) - Book a flight." in prompt


def test_tiny_folder_loads_as_standard_transformers(tiny_dir: Path, tiny) -> None:
    model, tok = tiny
    files = {p.name for p in tiny_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= files
    assert json.loads((tiny_dir / "tokenizer_config.json").read_text())["tokenizer_class"] == (
        "PreTrainedTokenizerFast"
    )
    assert type(model).__name__ == "LlamaForCausalLM"
    assert PRETOKENIZE_PATTERN in str(tok.backend_tokenizer.pre_tokenizer)
    assert tok.eos_token == EOS and model.generation_config.eos_token_id == tok.eos_token_id
    # the call tags are single tokens that survive skip_special_tokens (vLLM's hermes parser)
    ids = tok.encode("<tool_call>\n{}\n</tool_call>", add_special_tokens=False)
    assert ids[0] == tok.convert_tokens_to_ids("<tool_call>")
    assert tok.decode(ids, skip_special_tokens=True).startswith("<tool_call>")
    assert "<|im_start|>" not in tok.decode(
        tok.encode("<|im_start|>user"), skip_special_tokens=True
    )
    # a value reads as the same token in prose and in a call's JSON (copyable)
    prose = tok.tokenize("fly to Lima today")
    call = tok.tokenize('{"city": "Lima"}')
    assert "Lima" in prose and "Lima" in call


def test_param_estimate_matches_the_built_model(tiny) -> None:
    model, tok = tiny
    cfg = TinyConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64)
    assert cfg.param_estimate() == sum(p.numel() for p in model.parameters())


def test_hf_messages_keep_raw_arguments_that_are_not_json() -> None:
    msgs = hf_messages(
        [{"role": "assistant", "tool_calls": [{"id": "a", "name": "f", "arguments": "{oops"}]}]
    )
    assert msgs[0]["tool_calls"][0]["function"]["arguments"] == "{oops"


def test_the_described_format_adds_each_parameter_description(tiny_dir: Path) -> None:
    """``described``: the signature line, then what each described parameter means (its
    format, unit or default), which a benchmark's answers depend on; a model whose template
    is not trajsynth's keeps its own."""
    from transformers import AutoTokenizer

    from trajsynth.core.errors import ConfigError
    from trajsynth.llm.chat_template import chat_template, template_format
    from trajsynth.train.modeling import use_tool_format

    tok = AutoTokenizer.from_pretrained(tiny_dir)  # its own: the module's is shared
    tools = [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Current weather.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "location": {
                            "type": "string",
                            "description": "City, State, e.g. 'Lima, LI'.",
                        },
                        "unit": {"type": "string", "enum": ["c", "f"]},
                    },
                    "required": ["location"],
                },
            },
        }
    ]
    use_tool_format(tok, "described", "tiny")
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=tools, tokenize=False
    )
    assert (
        "weather(location: string, unit?: string[c|f]) - Current weather.\n"
        "  location: City, State, e.g. 'Lima, LI'.\n</tools>"
    ) in prompt
    assert template_format(tok.chat_template) == "described"
    assert template_format(chat_template("json")) == "json"
    tok.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    with pytest.raises(ConfigError, match="template of its own"):
        use_tool_format(tok, "described", "someone/model")
