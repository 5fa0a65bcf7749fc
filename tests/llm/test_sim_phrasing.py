"""Requests a person would write, on tools nobody here wrote: the simulated query writer never
repeats a run of a tool's description, never names a tool, states every gold value (verbatim
or in a form that maps back to it alone), varies its sentences, and gives the same text for
the same seed; the teacher's thoughts say which value goes where, in varied words.

The tools and gold calls are BFCL's (questions with their possible answers) and tau-bench's
(the actions of its recorded airline tasks), read from ``../shared/external``.

Run: PYTHONPATH=. python -m pytest tests/llm/test_sim_phrasing.py -q
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from trajsynth.core.surface import find
from trajsynth.core.task import GoldCall, GoldTurn, GroundTruth
from trajsynth.envs.importers.bfcl import read_entries
from trajsynth.llm.base import ChatRequest
from trajsynth.llm.sim import SimBackend, SimConfig, SkillProfile, phrasing
from trajsynth.llm.sim.phrasing import names_tool, quotes_description, unit_of

WRITER = SimBackend(SimConfig(), role="query_writer")


def write(steps: list[list[GoldCall]], tools: list[dict], seed: int, n: int = 3, **meta: Any):
    req = ChatRequest(
        messages=[{"role": "user", "content": "write"}],
        tools=tools,
        seed=seed,
        metadata={
            "role": "query_writer",
            "steps": [[c.model_dump(mode="json") for c in s] for s in steps],
            "n_queries": n,
            **meta,
        },
    )
    return json.loads(WRITER.answer(req).choices[0].content or "{}")["queries"]


@pytest.fixture(scope="module")
def bfcl(external_dir: Path) -> list[tuple[list[list[GoldCall]], list[dict]]]:
    """(one step of gold calls, the entry's tools) for BFCL's simple, multiple and parallel
    questions."""
    cases = []
    for cat in ("simple_python", "multiple", "parallel", "parallel_multiple"):
        for e in read_entries(external_dir / "bfcl" / f"BFCL_v4_{cat}.json"):
            if e.gold and e.gold[0]:
                cases.append(([e.gold[0]], e.tools.to_openai()))
    return cases


@pytest.fixture(scope="module")
def tau(external_dir: Path) -> list[tuple[list[list[GoldCall]], list[dict]]]:
    """(the actions of one recorded airline task, one per step; the airline tools)."""
    tools = json.loads((external_dir / "tau-bench/airline/tools_openai.json").read_text())
    raw = json.loads(
        (external_dir / "tau-bench/historical_trajectories/gpt-4o-airline.json").read_text()
    )
    seen, cases = set(), []
    for t in raw:
        actions = t["info"]["task"]["actions"]
        key = json.dumps(actions, sort_keys=True)
        if actions and key not in seen:
            seen.add(key)
            steps = [[GoldCall(name=a["name"], arguments=a["kwargs"])] for a in actions]
            cases.append((steps, tools))
    return cases


def _check(steps: list[list[GoldCall]], tools: list[dict], queries: list[str]) -> list[str]:
    """What is wrong with the requests (empty: nothing)."""
    problems = []
    descriptions = [t.get("function", t).get("description", "") for t in tools]
    names = [t.get("function", t)["name"] for t in tools]
    for q in queries:
        if quotes_description(q, descriptions):
            problems.append(f"quotes a description: {q}")
        if names_tool(q, names):
            problems.append(f"names a tool: {q}")
        for call in (c for s in steps for c in s):
            for k, v in call.arguments.items():
                if find(v, q, k) is None:
                    problems.append(f"leaves out {call.name}.{k}={v!r}: {q}")
    return problems


def test_bfcl_requests_never_quote_and_state_every_value(bfcl) -> None:
    assert len(bfcl) > 900
    problems, queries = [], []
    for i, (steps, tools) in enumerate(bfcl):
        qs = write(steps, tools, seed=i)
        queries += qs
        problems += _check(steps, tools, qs)
    assert problems == [], problems[:5]
    # phrased, not templated: many openings, none dominant, and most values verbatim
    openings = Counter(" ".join(q.lower().split()[:2]) for q in queries)
    assert len(openings) > 150 and openings.most_common(1)[0][1] < 0.15 * len(queries)


def test_tau_bench_requests_never_quote_and_state_every_value(tau) -> None:
    assert len(tau) >= 20
    problems = []
    for i, (steps, tools) in enumerate(tau):
        for persona in (None, "busy professional", "retiree"):
            for style in (None, "terse", "formal", "casual"):
                meta = {"persona": persona, "style": style} if persona else {"style": style}
                qs = write(steps, tools, seed=i, **{k: v for k, v in meta.items() if v})
                problems += _check(steps, tools, qs)
    assert problems == [], problems[:5]


def test_numbers_carry_the_unit_their_description_gives() -> None:
    assert unit_of("width", "Width of the wall in feet.", money=False) == ("ft", "feet")
    assert unit_of("freq", "The note's frequency (Hz).", money=False) == ("Hz", "hertz")
    assert unit_of("price", "Ticket price in USD", money=False) == ("$", "dollars")
    assert unit_of("size", "Size in meters or feet", money=False) is None  # either: neither
    assert unit_of("budget", "Daily budget.", money=True) == ("$", "dollars")
    assert unit_of("budget", "Daily budget.", money=False) is None  # the tool takes a currency
    assert unit_of("count", "How many results.", money=True) is None
    props = {
        "width": {"type": "integer", "description": "Width of the wall in feet."},
        "tone": {"type": "number", "description": "Frequency of the tone in Hz."},
        "budget": {"type": "integer", "description": "What it may cost."},
    }
    tools = [{"type": "function", "function": {
        "name": "paint_estimate", "description": "Estimate the paint a wall needs.",
        "parameters": {"type": "object", "properties": props}}}]  # fmt: skip
    call = GoldCall(name="paint_estimate", arguments={"width": 20, "tone": 440.5, "budget": 5000})
    queries = [q for s in range(40) for q in write([[call]], tools, seed=s)]
    assert _check([[call]], tools, queries) == []  # every value still stated
    said = Counter(
        unit for q in queries
        for unit in ("20ft", "20 ft", "20 feet", "440.5Hz", "440.5 Hz", "440.5 hertz", "$5")
        if unit in q
    )  # fmt: skip
    assert sum(said.values()) > len(queries)  # most numbers with their unit, in several forms
    assert said["20ft"] and said["20 feet"] and said["440.5Hz"] and said["$5"]
    assert any(find(20, q) == "unit" for q in queries)
    # every symbol the writer glues to a number is one the reader takes back (core.surface)
    from trajsynth.core.surface import GLUED_UNITS
    from trajsynth.llm.sim.phrasing import _DESC_UNITS

    assert {symbol for symbol, _ in _DESC_UNITS.values()} - {"", "$"} <= set(GLUED_UNITS)


def test_a_list_of_numbers_is_said_in_digits_often_in_brackets() -> None:
    props = {"group_a": {"type": "array", "items": {"type": "integer"}},
             "group_b": {"type": "array", "items": {"type": "number"}}}  # fmt: skip
    tools = [{"type": "function", "function": {
        "name": "compare_groups", "description": "Compare the means of two samples.",
        "parameters": {"type": "object", "properties": props}}}]  # fmt: skip
    call = GoldCall(name="compare_groups", arguments={"group_a": [3, 4, 5, 6, 4],
                                                      "group_b": [7.5, 8, 9.25]})  # fmt: skip
    queries = [q for s in range(30) for q in write([[call]], tools, seed=s)]
    assert _check([[call]], tools, queries) == []
    assert not any(w in q for q in queries for w in ("three", "four", "five", "six"))
    brackets = sum("[3, 4, 5, 6, 4]" in q for q in queries)
    assert 0.2 * len(queries) < brackets < 0.7 * len(queries)  # as BFCL writes them, or in words
    assert any("3, 4, 5, 6 and 4" in q or "3, 4, 5, 6, and 4" in q for q in queries)


def test_values_keep_mostly_verbatim_and_transform_unambiguously(bfcl) -> None:
    forms: Counter[str] = Counter()
    for i, (steps, tools) in enumerate(bfcl):
        q = write(steps, tools, seed=i, n=1)[0]
        for call in (c for s in steps for c in s):
            for k, v in call.arguments.items():
                forms[find(v, q, k)] += 1
    total = sum(forms.values())
    assert forms[None] == 0
    assert 0.7 < forms["verbatim"] / total < 0.99  # a good share verbatim, some not
    assert forms["number_word"] > 0


def test_same_seed_same_text_other_seeds_other_text(bfcl) -> None:
    steps, tools = bfcl[0]
    first = [write(steps, tools, seed=s) for s in range(8)]
    assert first == [write(steps, tools, seed=s) for s in range(8)]
    assert len({q for qs in first for q in qs}) >= 16


def test_a_description_is_never_repeated_even_when_it_is_the_obvious_wording() -> None:
    """A tool whose description says exactly what a user would ask."""
    desc = "Calculate the area of a triangle given the base and height of the triangle."
    tools = [{"type": "function", "function": {"name": "calculate_triangle_area",
              "description": desc, "parameters": {"type": "object", "properties": {
                  "base": {"type": "integer"}, "height": {"type": "integer"}}}}}]  # fmt: skip
    call = GoldCall(name="calculate_triangle_area", arguments={"base": 10, "height": 5})
    queries = [q for s in range(50) for q in write([[call]], tools, seed=s)]
    assert _check([[call]], tools, queries) == []
    assert all("triangle" in q.lower() for q in queries)  # its purpose, in other words
    assert len(set(queries)) > 100


# --------------------------------------------------------------------------------------
# the teacher's thoughts
# --------------------------------------------------------------------------------------

TEACHER = SimBackend(SimConfig(profile=SkillProfile.perfect()), role="teacher")


def _thought(gt: GroundTruth, tools: list[dict], seed: int) -> str:
    req = ChatRequest(
        messages=[{"role": "user", "content": gt.turns[0].request}],
        tools=tools,
        seed=seed,
        metadata={"role": "teacher", "ground_truth": gt.model_dump(mode="json")},
    )
    return TEACHER.answer(req).choices[0].reasoning or ""


def test_thoughts_map_values_to_parameters_in_varied_words(tau) -> None:
    openings: Counter[str] = Counter()
    n = 0
    for i, (steps, tools) in enumerate(tau):
        request = write(steps[:1], tools, seed=i, n=1)[0]
        gt = GroundTruth(turns=[GoldTurn(request=request, steps=steps[:1])])
        thought = _thought(gt, tools, seed=i)
        call = steps[0][0]
        assert call.name in thought
        for k, v in call.arguments.items():
            assert f"{k}={json.dumps(v, ensure_ascii=False)}" in thought, (thought, k)
        openings[" ".join(thought.split()[:3])] += 1
        n += 1
    assert len(openings) >= 6 and openings.most_common(1)[0][1] <= n / 3


def test_a_value_written_differently_is_named_both_ways_in_the_thought() -> None:
    tools = [{"type": "function", "function": {"name": "list_events",
              "description": "List my calendar for a day.", "parameters": {"type": "object",
              "properties": {"date": {"type": "string"}}}}}]  # fmt: skip
    call = GoldCall(name="list_events", arguments={"date": "2025-06-18"})
    gt = GroundTruth(turns=[GoldTurn(request="What's on my calendar on June 18, 2025?",
                                     steps=[[call]])])  # fmt: skip
    thought = _thought(gt, tools, seed=0)
    assert "June 18, 2025" in thought and 'date="2025-06-18"' in thought


def test_every_request_says_what_it_wants_even_for_one_word_functions() -> None:
    """BFCL's multi-turn API classes as code (as the generalist pipeline runs them): names
    that are ordinary words ("mean", "subtract", "retweet") and docstrings that open with a
    verb the lexicon lacks. A request says the action ("subtract the number", "compute the
    mean"), never the empty "pull up the information"; a one-word name is a word a person
    says, not a tool's identifier."""
    pytest.importorskip("bfcl_eval")
    from trajsynth.envs.code import toolset_from_targets
    from trajsynth.llm.sim.phrasing import intent_of, intent_phrase, plain_word

    root = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
    classes = {"math_api": "MathAPI", "posting_api": "TwitterAPI", "message_api": "MessageAPI"}
    vague, phrases = [], {}
    for module, cls in classes.items():
        tools = toolset_from_targets([f"{root}.{module}:{cls}"])
        names = set(tools.names())
        for name in names:
            intent = intent_of(name, tools.get(name).description, names)
            phrases[name] = intent_phrase(name, tools.get(name).description, taboo=names)
            if intent.objects in (("information",), ("request",)) or intent.verbs() == ["handle"]:
                vague.append(f"{name}: {phrases[name]}")
    assert len(phrases) > 40 and vague == []
    assert phrases["subtract"].startswith("subtract ") and "mean" in phrases["mean"]
    assert plain_word("mean") and plain_word("Dictionary") and not plain_word("get_user_id")
    assert names_tool("compute get_user_id now", ["get_user_id"])
    assert not names_tool("the mean of 3 and 4", ["mean"])


def test_codes_are_often_said_by_name_and_the_gold_keeps_the_code() -> None:
    """A person says "Germany", "Texas", "French", "Celsius" where the tool takes "DE", "TX",
    "fr", "C": the request names what the code stands for in a good share of draws, states
    every value (by its name through the parameter), and never says a code for another
    table's name."""
    tools = [{"type": "function", "function": {"name": "get_weather_report",
              "description": "Weather for a place.", "parameters": {"type": "object",
              "properties": {"country_code": {"type": "string"}, "state": {"type": "string"},
                             "lang": {"type": "string"}, "unit": {"type": "string"}},
              "required": ["country_code"]}}}]  # fmt: skip
    call = GoldCall(
        name="get_weather_report",
        arguments={"country_code": "US", "state": "TX", "lang": "fr", "unit": "C"},
    )
    queries = [q for s in range(60) for q in write([[call]], tools, seed=s)]
    assert _check([[call]], tools, queries) == []
    named = Counter(
        k for q in queries for k, v in call.arguments.items() if find(v, q, k) == "code_name"
    )
    for k in call.arguments:  # each code said by its name in some of the 180 requests
        assert 0.15 < named[k] / len(queries) < 0.7, (k, named[k])
    assert any("Texas" in q for q in queries) and any("Celsius" in q for q in queries)
    assert not any("Tunisia" in q for q in queries)  # "TX" is a state here, not a country


def test_calls_of_one_tool_are_often_said_once_with_their_values_joined() -> None:
    """BFCL's parallel questions say "concerts near Berlin and Paris", "Taylor Swift and
    Maroon 5 ... 20 and 15 minutes respectively": one clause for calls of one tool that
    differ in one or two values. The writer says them so in a good share of draws, every
    value still stated and findable, never split inside a value ("on May 5, 2024" and "May 4,
    2024", not "May 5, 2024 and 4, 2024"); calls differing in three values stay apart."""
    tools = [{"type": "function", "function": {"name": "find_concerts",
              "description": "Concerts in a city.", "parameters": {"type": "object",
              "properties": {"city": {"type": "string"}, "date": {"type": "string"},
                             "genre": {"type": "string"},
                             "max_price": {"type": "integer"}}}}}]  # fmt: skip

    def concert(city: str, date: str, genre: str = "jazz", price: int = 80) -> GoldCall:
        args = {"city": city, "date": date, "genre": genre, "max_price": price}
        return GoldCall(name="find_concerts", arguments=args)

    one = [[concert("Berlin", "2025-05-02"), concert("Rio de Janeiro", "2025-05-02")]]
    two = [[concert("Berlin", "2025-05-02"), concert("Paris", "2025-05-04")]]
    three = [[concert("Berlin", "2025-05-02", "rock"), concert("Paris", "2025-05-04", "pop")]]
    said = {}
    for name, steps in (("one", one), ("two", two), ("three", three)):
        queries = [q for s in range(40) for q in write(steps, tools, seed=s)]
        assert _check(steps, tools, queries) == []
        said[name] = queries
    joined = [q for q in said["one"] if re.search(r"Berlin,? and (\"?)Rio de Janeiro\1", q)]
    assert 0.2 < len(joined) / len(said["one"]) < 0.8  # often, not always
    assert sum("respectively" in q for q in said["two"]) > 0.1 * len(said["two"])
    assert not any("respectively" in q for q in said["one"] + said["three"])
    assert not any(re.search(r"\b2025,? and 4, 2025", q) for q in said["two"])


def test_other_tools_given_the_same_values_are_often_asked_for_in_one_request() -> None:
    """BFCL's parallel_multiple says "the temperature and humidity forecast for Boston, USA
    for the next 10 days": calls of other tools given the same values in one step, said once.
    The writer does so in most draws, every value still stated; tools given other values,
    or a tool called twice, are said apart."""

    def forecast(what: str) -> dict:
        return {"type": "function", "function": {"name": f"forecast_{what}",
                "description": f"Retrieve the {what} forecast.", "parameters": {
                "type": "object", "properties": {"location": {"type": "string"},
                "days": {"type": "integer"}}}}}  # fmt: skip

    tools = [forecast("temperature"), forecast("humidity")]
    boston = {"location": "Boston, USA", "days": 10}
    same = [[GoldCall(name="forecast_temperature", arguments=boston),
             GoldCall(name="forecast_humidity", arguments=boston)]]  # fmt: skip
    other = [[GoldCall(name="forecast_temperature", arguments=boston),
              GoldCall(name="forecast_humidity", arguments={**boston, "days": 5})]]  # fmt: skip
    said = {}
    for name, steps in (("same", same), ("other", other)):
        queries = [q for s in range(40) for q in write(steps, tools, seed=s)]
        assert _check(steps, tools, queries) == []
        said[name] = queries
    once = [q for q in said["same"] if q.count("Boston, USA") == 1]
    assert 0.5 < len(once) / len(said["same"]) < 0.95  # most often, not always
    assert sum(bool(re.search(r"temperature( forecast)? and (\w+ )?the humidity", q))
               for q in once) > 0.3 * len(once)  # fmt: skip
    assert not any(q.count("Boston, USA") == 1 for q in said["other"])


def test_a_calls_one_string_is_often_said_without_its_parameters_name(monkeypatch) -> None:
    """BFCL's questions name the parameter of about a third of their string values ("the
    proteins found in the plasma membrane"); with ``IMPLICIT_P`` a call's one stated string
    is said without its parameter's name in a good share of draws, still findable. With two
    strings each keeps the name that tells them apart. Off (0), every one is named."""
    tools = [{"type": "function", "function": {"name": "get_proteins",
              "description": "Get the list of proteins in a specific cell compartment.",
              "parameters": {"type": "object", "properties": {
                  "cell_compartment": {"type": "string"}, "organism": {"type": "string"},
                  "include_description": {"type": "boolean"}}}}}]  # fmt: skip
    membrane = {"cell_compartment": "plasma membrane"}
    one = [[GoldCall(name="get_proteins", arguments={**membrane, "include_description": True})]]
    two = [[GoldCall(name="get_proteins", arguments={**membrane, "organism": "yeast"})]]
    off = [q.lower() for s in range(40) for q in write(one, tools, seed=s)]
    assert all("compartment" in q for q in off)
    monkeypatch.setattr(phrasing, "IMPLICIT_P", 0.5)
    said = {}
    for name, steps in (("one", one), ("two", two)):
        queries = [q for s in range(40) for q in write(steps, tools, seed=s)]
        assert _check(steps, tools, queries) == []
        said[name] = [q.lower() for q in queries]
    unnamed = [q for q in said["one"] if "compartment" not in q]
    assert 0.25 < len(unnamed) / len(said["one"]) < 0.75
    assert all("compartment" in q for q in said["two"])
