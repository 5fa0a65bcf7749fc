"""The shared tool-call parser: formats, repairs, errors, and a hypothesis property test.

Run: PYTHONPATH=. python -m pytest tests/llm/test_parsing.py -q
"""

from __future__ import annotations

import json
import keyword
import random
import string
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajsynth.core.text import clean_text
from trajsynth.llm.parsing import (
    format_hermes,
    format_json_list,
    format_pythonic,
    parse_output,
)

# -- examples --------------------------------------------------------------------------------


def test_hermes_blocks_with_text_and_thinking() -> None:
    text = (
        "<think>I should look it up.</think>Let me check.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {"tz": "CET"}}</tool_call>'
    )
    r = parse_output(text)
    assert [(c.name, json.loads(c.arguments)) for c in r.calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"tz": "CET"}),
    ]
    assert r.content == "Let me check."
    assert r.reasoning == "I should look it up."
    assert r.errors == [] and r.format == "hermes"


def test_pythonic_bfcl_style() -> None:
    r = parse_output('[math.factorial(n=5), get_rate(base="USD", to=["EUR", "JPY"], live=True)]')
    assert [(c.name, json.loads(c.arguments)) for c in r.calls] == [
        ("math.factorial", {"n": 5}),
        ("get_rate", {"base": "USD", "to": ["EUR", "JPY"], "live": True}),
    ]
    assert r.content is None and r.format == "pythonic"


def test_bare_json_list_and_single_object_and_fence() -> None:
    r = parse_output('[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "parameters": "{}"}]')
    assert [(c.name, c.arguments) for c in r.calls] == [("a", '{"x": 1}'), ("b", "{}")]
    r = parse_output('```json\n{"name": "a", "arguments": {"x": 2}}\n```')
    assert [(c.name, c.arguments) for c in r.calls] == [("a", '{"x": 2}')]


def test_near_json_is_repaired_and_noted() -> None:
    r = parse_output("<tool_call>{'name': 'add', 'arguments': {'a': 1, 'b': 2,}}</tool_call>")
    assert [(c.name, json.loads(c.arguments)) for c in r.calls] == [("add", {"a": 1, "b": 2})]
    assert r.errors == [] and len(r.repairs) == 1
    r = parse_output('<tool_call>{"name": "add", "arguments": {"a": 1}</tool_call>')
    assert r.calls[0].name == "add" and json.loads(r.calls[0].arguments) == {"a": 1}


def test_native_calls_keep_raw_malformed_arguments_as_errors() -> None:
    native = [
        {"id": "c1", "name": "add", "arguments": '{"a": 1}'},
        {"id": "c2", "name": "sub", "arguments": '{"a": 1, "b"'},
        {"id": "c3", "name": "", "arguments": "{}"},
    ]
    r = parse_output(None, native)
    assert [c.id for c in r.calls] == ["c1", "c2"]
    assert r.calls[1].arguments == '{"a": 1, "b"'  # kept raw: verifiers see the malformed call
    assert len(r.errors) == 2
    assert "sub" in r.errors[0] and '{"a": 1, "b"' in r.errors[0]


def test_unparseable_blocks_become_errors_with_raw_text() -> None:
    r = parse_output("<tool_call>this is not json at all</tool_call> and some text")
    assert r.calls == []
    assert len(r.errors) == 1 and "this is not json" in r.errors[0]
    assert r.content == "and some text"


def test_prose_is_content_not_an_error() -> None:
    for text in [
        "The answer is 42 (approximately).",
        "Use [1, 2, 3] as the list.",
        '{"name": "Paris", "population": 2100000}',  # a JSON answer, not a call
        "print(x)",  # positional arguments: not a tool call
    ]:
        r = parse_output(text)
        assert r.calls == [] and r.errors == [] and r.content == text


# -- property tests ----------------------------------------------------------------------------

_ident = st.builds(
    lambda head, tail: head + tail,
    st.sampled_from(string.ascii_lowercase),
    st.text(alphabet=string.ascii_lowercase + string.digits + "_", max_size=8),
).filter(lambda s: not keyword.iskeyword(s) and s not in ("true", "false", "null"))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(alphabet=string.printable, max_size=12),
)
_values = st.one_of(
    _scalars,
    st.lists(_scalars, max_size=3),
    st.dictionaries(_ident, _scalars, max_size=2),
    st.lists(st.dictionaries(_ident, st.lists(_scalars, max_size=2), max_size=2), max_size=2),
)
_args = st.dictionaries(_ident, _values, max_size=4)
_names = st.one_of(_ident, st.builds(lambda a, b: f"{a}.{b}", _ident, _ident))
_calls = st.lists(st.tuples(_names, _args), min_size=1, max_size=3)

_RENDER = {
    "hermes": format_hermes,
    "json": format_json_list,
    "pythonic": format_pythonic,
}


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=_calls, fmt=st.sampled_from(["hermes", "json", "pythonic", "native"]))
def test_valid_calls_round_trip_in_every_format(calls: list, fmt: str) -> None:
    if fmt == "native":
        native = [
            {"id": f"c{i}", "name": n, "arguments": json.dumps(a)} for i, (n, a) in enumerate(calls)
        ]
        r = parse_output(None, native)
    else:
        r = parse_output(_RENDER[fmt](calls))
    assert r.errors == []
    assert [(c.name, json.loads(c.arguments)) for c in r.calls] == calls
    assert r.content is None


_STRAY = list("{}[](),:'\"=<>/\\ \n")
_TAGS = ["<tool_call>", "</tool_call>", "<think>", "</think>", "```", "```json"]


def _near_misses(text: str, rnd: random.Random, k: int) -> list[str]:
    """``k`` damaged copies of ``text``: truncated, characters cut or inserted, quotes
    swapped, tags or text duplicated."""
    out = []
    for _ in range(k):
        n = len(text)
        i, j = rnd.randint(0, n), rnd.randint(0, n)
        kind = rnd.randrange(6)
        if kind == 0:
            out.append(text[:i])
        elif kind == 1:
            out.append(text[:i] + text[i + rnd.randint(1, 4) :])
        elif kind == 2:
            out.append(text[:i] + rnd.choice(_STRAY) + text[i:])
        elif kind == 3:
            out.append(text.replace('"', "'"))
        elif kind == 4:
            out.append(text[:i] + rnd.choice(_TAGS) + text[i:j] + rnd.choice(_TAGS) + text[j:])
        else:
            out.append(text + text[: n // 2])
    return out


def _check(text: str) -> None:
    r = parse_output(text)
    for call in r.calls:  # whatever it returns is well formed
        assert isinstance(call.name, str) and call.name
        assert isinstance(json.loads(call.arguments), dict)
    assert all(isinstance(e, str) and e for e in r.errors)
    # nothing unparseable is dropped silently: a <tool_call> block outside the reasoning gives
    # a call or an error
    if "<tool_call>" in text and "<think>" not in text and "</think>" not in text:
        assert r.calls or r.errors


_arbitrary = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(st.text(max_size=30), st.sampled_from(_TAGS)), max_size=12).map("".join),
    st.binary(max_size=200).map(lambda b: b.decode("utf-8", "replace")),
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    calls=_calls,
    fmt=st.sampled_from(list(_RENDER)),
    junk=_arbitrary,
    rnd=st.randoms(use_true_random=False),
)
def test_parser_never_raises_on_arbitrary_and_near_miss_text(
    calls: list, fmt: str, junk: str, rnd: random.Random
) -> None:
    """Each example checks one arbitrary string and 8 near misses of a valid rendering:
    4,500 strings per run."""
    _check(junk)
    for text in _near_misses(_RENDER[fmt](calls), rnd, 8):
        _check(text)


def test_parser_survives_pathological_nesting() -> None:
    for text in ["[" * 5000 + "]" * 5000, "(" * 3000, "<tool_call>" + "{" * 4000, "[f(" * 2000]:
        _check(text)


@settings(max_examples=200, deadline=None)
@given(
    native=st.lists(
        st.fixed_dictionaries(
            {
                "id": st.text(max_size=5),
                "name": st.text(max_size=10),
                "arguments": st.text(max_size=40),
            }
        ),
        max_size=4,
    ),
    content=st.one_of(st.none(), st.text(max_size=80)),
)
def test_native_calls_never_raise(native: list, content: str | None) -> None:
    r = parse_output(content, native)
    named = [c for c in native if clean_text(c["name"])]  # NUL is dropped from names
    # every named native call is kept, first and in order (even with malformed arguments)
    assert [c.name for c in r.calls[: len(named)]] == [clean_text(c["name"]) for c in named]
    bad = [c for c in named if _not_object(clean_text(c["arguments"]))]
    assert len(r.errors) >= len(bad) + (len(native) - len(named))


def _not_object(text: str) -> bool:
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return True
    return not isinstance(value, dict)


# -- totality: one bad call costs that call only, and nothing is slow ----------------------


def test_escaped_emoji_pair_in_near_json_keeps_every_call() -> None:
    text = (
        '<tool_call>{"name": "say", "arguments": {"text": "hi \\ud83d\\ude00",}}</tool_call>'
        '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    )
    r = parse_output(text)
    assert [c.name for c in r.calls] == ["say", "add"]
    assert json.loads(r.calls[0].arguments) == {"text": "hi \U0001f600"}
    for c in r.calls:
        (c.id + c.arguments).encode("utf-8")


def test_deeply_nested_native_arguments_cost_that_call_only() -> None:
    deep = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    native = [
        {"id": "1", "name": "f", "arguments": deep},
        {"id": "2", "name": "g", "arguments": "{}"},
    ]
    r = parse_output("hello", native)
    assert [c.name for c in r.calls] == ["g"] and r.content == "hello"
    assert len(r.errors) == 1 and "nested deeper" in r.errors[0]


def test_one_bad_element_of_a_json_list_costs_that_element_only() -> None:
    good = '{"name": "f", "arguments": {"a": 1}}'
    bad = '{"name": "bad", "arguments": {"a": ' + "[" * 200 + "]" * 200 + "}}"  # too deep
    text = "[" + good + ", " + bad + ", " + good + "]"
    r = parse_output(text)
    assert [c.name for c in r.calls] == ["f", "f"] and r.errors


def test_pathological_outputs_are_fast_and_lone_surrogates_are_cleaned() -> None:
    import time

    for text in [
        "<tool_call>" + "{" * 40_000,
        "<tool_call>" + '1]{ "' * 1600,  # minutes inside json-repair without the budget
        "<think>" + "\ud83d" * 100_000,
        "[" + '{"name": "f", "arguments": {}}, ' * 20_000,
    ]:
        start = time.perf_counter()
        r = parse_output(text)
        assert time.perf_counter() - start < 2.0
        (r.content or "").encode("utf-8")
        (r.reasoning or "").encode("utf-8")
    assert parse_output("Done \ud83d").content == "Done \ufffd"


# -- bounded work: no regular expression on model text, long outputs off the event loop ------


def test_the_parser_reads_model_text_without_regular_expressions() -> None:
    """Tags and fences are found with ``str.find``: a backtracking pattern on a fence took
    minutes on 100,000 characters (issue 23), so the parser imports no regex engine."""
    import ast
    from pathlib import Path

    import trajsynth.llm.parsing as parsing

    tree = ast.parse(Path(parsing.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"re", "regex"}


def test_fences_tags_and_oversized_lists_keep_their_meaning() -> None:
    # a fenced block, with or without a language tag; an unclosed fence is prose
    for text in [
        '```json\n[{"name": "a", "arguments": {}}]\n```',
        '```[{"name": "a", "arguments": {}}]```',
    ]:
        assert [c.name for c in parse_output(text).calls] == ["a"]
    r = parse_output("```" + "x" * 5000)
    assert r.calls == [] and r.errors == [] and r.content == "```" + "x" * 5000
    # an unclosed <think> ends where a call starts; blocks many times over are read once each
    r = parse_output('<think>hm <tool_call>{"name": "f", "arguments": {}}</tool_call>')
    assert r.reasoning == "hm" and [c.name for c in r.calls] == ["f"]
    r = parse_output("<think>a</think><think>b</think>" * 3 + "done")
    assert r.reasoning == "a\nb\na\nb\na\nb" and r.content == "done"
    # more pythonic calls than are read: the first 64 and one error for the rest
    r = parse_output("[" + ", ".join(f"f(i={i})" for i in range(70)) + "]")
    assert len(r.calls) == 64 and r.errors == ["6 more pythonic tool calls not read"]
    # a pythonic list too large for Python's parser: one error, not minutes
    r = parse_output("[" + "f(a=1, b='x'), " * 1000 + "g()]")
    assert r.calls == [] and len(r.errors) == 1 and "too large to read" in r.errors[0]
    # a broken JSON list with a valid element of 50,000 characters: that element is read
    big = json.dumps({"name": "write", "arguments": {"text": "y" * 50_000}})
    r = parse_output(f'[{big}, {{"name": "g", "arguments": {{"a": 1,}}')
    assert [c.name for c in r.calls] == ["write", "g"]
    assert json.loads(r.calls[0].arguments)["text"] == "y" * 50_000


def test_long_outputs_are_parsed_off_the_event_loop(monkeypatch: Any) -> None:
    """An output over ``OFF_LOOP_CHARS`` is parsed in a worker thread: the loop keeps
    running meanwhile (here it must run a task before the parse may finish); a short one is
    parsed in place."""
    import asyncio
    import threading

    from trajsynth.llm import parsing
    from trajsynth.llm.scripted import scripted_client

    real = parsing.parse_output
    ticked = threading.Event()
    seen: list[tuple[int, bool, bool]] = []

    def spy(content: Any, *args: Any, **kwargs: Any) -> Any:
        on_loop = threading.current_thread() is threading.main_thread()
        # a parse on the loop's thread blocks the loop, so the tick never comes
        waited = ticked.wait(5) if len(content or "") > parsing.OFF_LOOP_CHARS else True
        seen.append((len(content or ""), on_loop, waited))
        return real(content, *args, **kwargs)

    monkeypatch.setattr(parsing, "parse_output", spy)
    long = "```" + "x" * 50_000
    client = scripted_client("t", lambda req: req.messages[-1]["content"])

    async def tick() -> None:
        await asyncio.sleep(0.05)
        ticked.set()

    async def main() -> tuple[Any, Any]:
        short = await client.chat([{"role": "user", "content": "hello"}])
        got, _ = await asyncio.gather(client.chat([{"role": "user", "content": long}]), tick())
        return short, got

    short, got = asyncio.run(main())
    assert seen == [(5, True, True), (len(long), False, True)]
    assert short.choices[0].message.content == "hello"
    assert got.choices[0].message.content == long
