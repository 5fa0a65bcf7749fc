"""The simulated roles other than the actor: director, user simulator, query writer, judge
(JGLV / APIGen / edge), HardGen verifier, ECHO rewriter, STeCa reflector, EDDE expander.

Run: PYTHONPATH=. python -m pytest tests/llm/test_sim_roles.py -q
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from trajsynth.core.errors import EndpointError
from trajsynth.core.surface import find, stated
from trajsynth.core.task import GoldCall, GoldTurn, GroundTruth
from trajsynth.llm.base import ChatRequest
from trajsynth.llm.parsing import parse_output
from trajsynth.llm.sim import SimBackend, SimConfig
from trajsynth.llm.sim.judge import VERDICTS

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_flights",
            "description": "Search flights between two cities.",
            "parameters": {
                "type": "object",
                "properties": {
                    "origin": {"type": "string"},
                    "destination": {"type": "string"},
                    "date": {"type": "string"},
                },
                "required": ["origin", "destination"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "book_flight",
            "description": "Book a flight by its id; returns a booking id.",
            "parameters": {
                "type": "object",
                "properties": {"flight_id": {"type": "string"}, "seats": {"type": "integer"}},
                "required": ["flight_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "convert_currency",
            "description": "Convert an amount between currencies.",
            "parameters": {
                "type": "object",
                "properties": {
                    "amount": {"type": "number"},
                    "from_currency": {"type": "string"},
                    "to_currency": {"type": "string"},
                },
                "required": ["amount", "from_currency", "to_currency"],
            },
        },
    },
]
NAMES = [t["function"]["name"] for t in TOOLS]
SEARCH = GoldCall(
    name="search_flights",
    arguments={"origin": "Paris", "destination": "Rome", "date": "2026-05-01"},
    output={"flights": [{"id": "FL12", "price": 210}]},
)
BOOK = GoldCall(
    name="book_flight", arguments={"flight_id": "FL12", "seats": 2}, output={"booking": "BK9"}
)
GT = GroundTruth(
    turns=[
        GoldTurn(
            request="Find me a flight from Paris to Rome on May 1st and book 2 seats.",
            steps=[[SEARCH], [BOOK]],
        ),
        GoldTurn(request="Which seat is best on a short flight?", kind="no_tool"),
        GoldTurn(
            request="Convert the price to dollars.",
            kind="clarify",
            steps=[
                [
                    GoldCall(
                        name="convert_currency",
                        arguments={"amount": 210, "from_currency": "EUR", "to_currency": "USD"},
                    )
                ]
            ],
            clarification="The price is in EUR.",
        ),
    ]
)


def ask(
    meta: dict[str, Any],
    *,
    seed: int | None = 0,
    n: int = 1,
    tools: list | None = TOOLS,
    messages: list | None = None,
    **cfg: Any,
) -> list[str]:
    backend = SimBackend(SimConfig(**cfg), role=meta["role"])
    req = ChatRequest(
        messages=messages or [{"role": "user", "content": "go"}],
        tools=tools,
        n=n,
        seed=seed,
        metadata=meta,
    )
    return [c.content or "" for c in backend.answer(req).choices]


def test_director_outlines_needs_without_tool_names() -> None:
    plan = json.loads(ask({"role": "director", "ground_truth": GT.model_dump(mode="json")})[0])
    assert [t["type"] for t in plan["turns"]] == ["tool_call", "non_tool", "clarify"]
    need = plan["turns"][0]["need"]  # both needs, in words of its own, never a tool's name
    assert "flight" in need and re.search(r"\b(book|reserve)\b", need)
    assert not re.search(r"search_flights|book_flight", need)
    for seed in range(20):  # planned from the tools alone
        plan = json.loads(ask({"role": "director", "num_turns": 4}, seed=seed)[0])
        assert len(plan["turns"]) == 4
        assert any(t["type"] == "tool_call" for t in plan["turns"])
        text = json.dumps(plan)
        assert not any(name in text for name in NAMES), text
        assert all(
            t["need"].startswith(("The", "Following", "Building", "Next", "Then"))
            for t in plan["turns"]
        )


def test_user_simulator_reveals_the_goal_turn_by_turn() -> None:
    meta = {"role": "user", "ground_truth": GT.model_dump(mode="json")}
    conv: list[dict] = []
    assert ask(meta, messages=[{"role": "system", "content": "sys"}])[0] == GT.turns[0].request
    conv = [
        {"role": "user", "content": GT.turns[0].request},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "search_flights", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "{}"},
        {"role": "assistant", "content": "Booked: BK9."},
    ]
    assert ask(meta, messages=conv)[0] == GT.turns[1].request
    conv += [
        {"role": "user", "content": GT.turns[1].request},
        {"role": "assistant", "content": "An aisle seat."},
        {"role": "user", "content": GT.turns[2].request},
        {"role": "assistant", "content": "Which currency is the price in?"},
    ]
    assert ask(meta, messages=conv)[0] == "The price is in EUR."
    conv += [
        {"role": "user", "content": "The price is in EUR."},
        {"role": "assistant", "content": "That is 228 USD."},
    ]
    assert ask(meta, messages=conv)[0] == "###STOP###"
    # a needless question on a tool turn is answered by restating the request
    needless = [
        {"role": "user", "content": GT.turns[0].request},
        {"role": "assistant", "content": "Could you confirm?"},
    ]
    assert GT.turns[0].request in ask(meta, messages=needless)[0]
    # a persona changes the opening, not the content
    opened = ask({**meta, "persona": "student"}, messages=[{"role": "system", "content": "s"}])[0]
    assert opened.lower().endswith(GT.turns[0].request.lower())


def test_query_writer_keeps_values_drops_derived_ones_and_never_names_functions() -> None:
    meta = {
        "role": "query_writer",
        "steps": [[SEARCH.model_dump()], [BOOK.model_dump()]],
        "n_queries": 5,
    }
    for persona in (None, "student", "retiree", "busy professional"):
        for style in (None, "casual", "formal", "terse"):
            queries = json.loads(ask({**meta, "persona": persona, "style": style})[0])["queries"]
            assert len(queries) == 5 and len(set(queries)) == 5
            for q in queries:
                # every value stated, verbatim or in a form that maps back to it alone
                assert stated("Paris", q) and stated("Rome", q) and stated(2, q, "seats")
                assert find("2026-05-01", q) in ("verbatim", "date_long")
                assert "FL12" not in q  # comes from the search's output: referred to, not said
                assert not re.search(r"\bsearch_flights\b|\bbook_flight\b", q)
    # several phrasings per tool across seeds
    seen = {json.dumps(ask({**meta, "n_queries": 1}, seed=s)) for s in range(10)}
    assert len(seen) >= 5


def _votes(meta: dict[str, Any], n: int = 600, **cfg: Any) -> Counter:
    backend = SimBackend(SimConfig(**cfg), role="judge")
    out: Counter = Counter()
    for seed in range(n):
        req = ChatRequest(
            messages=[{"role": "user", "content": "judge"}], tools=TOOLS, seed=seed, metadata=meta
        )
        text = backend.answer(req).choices[0].content
        out[next((v for v in VERDICTS if text.startswith(v + ".")), text)] += 1
    return out


def test_jglv_judge_verdicts_follow_truth_with_configured_accuracy() -> None:
    label = [BOOK.model_dump()]
    wrong = [{"name": "book_flight", "arguments": {"flight_id": "FL13", "seats": 2}}]
    # truth from the reference: the prediction is wrong
    votes = _votes(
        {"role": "judge", "label": label, "prediction": wrong, "reference": label},
        judge_accuracy=0.8,
    )
    assert set(votes) <= set(VERDICTS)
    assert abs(votes["RESPONSE2_INCORRECT"] / 600 - 0.8) < 0.06
    # label wrong (the prediction is the reference) → RESPONSE1_INCORRECT
    votes = _votes(
        {"role": "judge", "label": wrong, "prediction": label, "reference": label, "accuracy": 1.0}
    )
    assert votes == Counter({"RESPONSE1_INCORRECT": 600})
    # schema rules without a reference: an unknown function is incorrect
    bad = [{"name": "book_flights", "arguments": {"flight_id": "FL12"}}]
    votes = _votes({"role": "judge", "label": label, "prediction": bad, "accuracy": 1.0}, n=5)
    assert votes == Counter({"RESPONSE2_INCORRECT": 5})
    # text in LoopTool's form is parsed; order-insensitive equality → BOTH_CORRECT
    two = [SEARCH.model_dump(), BOOK.model_dump()]
    text = (
        "<tool_call>\n"
        + json.dumps({"name": "book_flight", "arguments": BOOK.arguments})
        + "\n</tool_call>\n<tool_call>\n"
        + json.dumps({"name": "search_flights", "arguments": SEARCH.arguments})
        + "\n</tool_call>"
    )
    votes = _votes({"role": "judge", "label": two, "prediction": text, "accuracy": 1.0}, n=5)
    assert votes == Counter({"BOTH_CORRECT": 5})
    # stated truth wins; the analysis line follows LoopTool's format
    out = ask(
        {
            "role": "judge",
            "label": label,
            "prediction": wrong,
            "truth": "both_incorrect",
            "accuracy": 1.0,
        }
    )[0]
    assert out.startswith("BOTH_INCORRECT.\nError Analysis: ") and "Correct Approach: " in out


def test_independent_votes_disagree_so_consensus_is_testable() -> None:
    meta = {
        "role": "judge",
        "label": [BOOK.model_dump()],
        "reference": [BOOK.model_dump()],
        "prediction": [{"name": "book_flight", "arguments": {"flight_id": "X"}}],
    }
    backend = SimBackend(SimConfig(judge_accuracy=0.6), role="judge")
    req = ChatRequest(
        messages=[{"role": "user", "content": "j"}], tools=TOOLS, n=3, seed=0, metadata=meta
    )
    consensus = 0
    for seed in range(300):
        votes = [
            c.content.split(".")[0]
            for c in backend.answer(req.model_copy(update={"seed": seed})).choices
        ]
        consensus += Counter(votes).most_common(1)[0][1] >= 2
    # P(some two of three agree) with p = 0.6 and the rest spread over 3 wrong verdicts ≈ 0.79
    assert 0.72 < consensus / 300 < 0.87


def test_single_apigen_and_edge_judges() -> None:
    ok = ask(
        {
            "role": "judge",
            "mode": "looptool_single",
            "response": [BOOK.model_dump()],
            "reference": [BOOK.model_dump()],
            "accuracy": 1.0,
        }
    )[0]
    assert ok == "CORRECT."
    bad = ask(
        {
            "role": "judge",
            "mode": "looptool_single",
            "response": "I booked it.",
            "reference": [BOOK.model_dump()],
            "accuracy": 1.0,
        }
    )[0]
    assert bad.startswith("INCORRECT.\nError Analysis:")
    passes = json.loads(
        ask(
            {
                "role": "judge",
                "mode": "apigen",
                "query": "book FL12",
                "calls": [BOOK.model_dump()],
                "results": [{"booking": "BK9"}],
                "accuracy": 1.0,
            }
        )[0]
    )
    assert passes["passes"] == "yes" and passes["thought"]
    fails = json.loads(
        ask(
            {
                "role": "judge",
                "mode": "apigen",
                "query": "book FL12",
                "calls": [BOOK.model_dump()],
                "results": [{"error": "flight not found"}],
                "accuracy": 1.0,
            }
        )[0]
    )
    assert fails["passes"] == "no" and "error" in fails["thought"]
    edge = json.loads(
        ask(
            {
                "role": "judge",
                "mode": "edge",
                "source_tool": TOOLS[0],
                "target_tool": TOOLS[1],
                "accuracy": 1.0,
            }
        )[0]
    )
    assert edge["related"] == "yes"
    none = json.loads(
        ask(
            {
                "role": "judge",
                "mode": "edge",
                "source_tool": TOOLS[2],
                "target_tool": TOOLS[1],
                "accuracy": 1.0,
            }
        )[0]
    )
    assert none["related"] == "no"
    flips = Counter(
        json.loads(c)["passes"]
        for s in range(400)
        for c in ask(
            {"role": "judge", "mode": "apigen", "calls": [BOOK.model_dump()], "results": []},
            seed=s,
            judge_accuracy=0.75,
        )
    )
    assert abs(flips["yes"] / 400 - 0.75) < 0.07


def test_verifier_hints_name_the_problem_but_never_a_gold_value() -> None:
    gold = [[SEARCH.model_dump()], [BOOK.model_dump()]]
    values = ["Paris", "Rome", "2026-05-01", "FL12"]
    cases = {
        "stops after 1": [SEARCH.model_dump()],
        "does not fit": [SEARCH.model_dump(), {"name": "convert_currency", "arguments": {}}],
        "value of 'destination'": [
            {"name": "search_flights", "arguments": {**SEARCH.arguments, "destination": "Lyon"}},
            BOOK.model_dump(),
        ],
        "leaves out the argument 'date'": [
            {"name": "search_flights", "arguments": {"origin": "Paris", "destination": "Rome"}},
            BOOK.model_dump(),
        ],
        "too early": [BOOK.model_dump(), SEARCH.model_dump()],
        "not valid JSON": '<tool_call>{"name": "search_flights", "arguments": "{oops"}</tool_call>',
    }
    for expected, candidate in cases.items():
        out = json.loads(ask({"role": "verifier", "gold": gold, "candidate": candidate})[0])
        assert out["correct"] is False and expected in out["hint"], (expected, out)
        assert not any(v in out["hint"] for v in values), out["hint"]
    right = json.loads(
        ask(
            {
                "role": "verifier",
                "gold": gold,
                "candidate": [SEARCH.model_dump(), BOOK.model_dump()],
            }
        )[0]
    )
    assert right == {"correct": True, "hint": ""}


TRAJ = [
    {"role": "user", "content": "Book the cheapest flight Paris to Rome and pay in USD."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "a",
                "type": "function",
                "function": {
                    "name": "search_flights",
                    "arguments": json.dumps({"origin": "Paris", "destination": "Rome"}),
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "a", "content": json.dumps({"flights": [{"id": "FL12"}]})},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "b",
                "type": "function",
                "function": {"name": "book_flight", "arguments": json.dumps({"flight_id": "FL99"})},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "b", "content": json.dumps({"error": "no such flight"})},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c",
                "type": "function",
                "function": {
                    "name": "search_flights",
                    "arguments": json.dumps({"origin": "Paris", "destination": "Rome"}),
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c", "content": json.dumps({"flights": [{"id": "FL12"}]})},
]


def test_rewriter_relabels_only_what_was_achieved_or_abstains() -> None:
    meta = {"role": "rewriter", "trajectory": None}
    outs = [json.loads(ask({"role": "rewriter"}, messages=TRAJ, seed=s)[0]) for s in range(200)]
    answered = [o for o in outs if o["query"]]
    abstained = [o for o in outs if not o["query"]]
    assert all(
        o == {"query": "", "workflow": "", "final_answer": "", "calls": []} for o in abstained
    )
    assert abs(len(abstained) / 200 - 0.1) < 0.06
    achieved = {"origin": "Paris", "destination": "Rome"}
    for o in answered:  # the failed booking is not a goal; the repeated search appears once
        assert [c["name"] for c in o["calls"]] == ["search_flights"]
        assert "book" not in o["query"].lower() and "Paris" in o["query"]
    # at error_rate, the rewritten calls carry a wrong value (the replay check must reject it)
    wrong = [o for o in answered if o["calls"][0]["arguments"] != achieved]
    assert 0 < len(wrong) < len(answered) * 0.25
    assert all("Paris" in o["workflow"] for o in answered if o not in wrong)
    goals = json.loads(ask({"role": "rewriter", "mode": "goals"}, messages=TRAJ)[0])[
        "possible_goals"
    ]
    assert len(goals) == 1 and "Paris" in goals[0]
    nothing = [TRAJ[0], TRAJ[3], TRAJ[4]]
    assert json.loads(ask({**meta, "trajectory": nothing}, messages=[TRAJ[0]])[0])["query"] == ""


def test_reflector_leads_from_the_deviation_to_the_expert_action() -> None:
    for seed in range(5):
        thought = ask(
            {
                "role": "reflector",
                "expert_action": [BOOK.model_dump()],
                "deviated_action": [SEARCH.model_dump()],
                "goal": "book a flight",
            },
            seed=seed,
        )[0]
        assert "search_flights" in thought and "book_flight" in thought and "FL12" in thought


def test_expander_keeps_tools_and_structure_with_new_values() -> None:
    meta = {
        "role": "expander",
        "correct": [SEARCH.model_dump(), BOOK.model_dump()],
        "variation": "user persona",
        "garbage_rate": 0.2,
    }
    outs = [c for s in range(100) for c in ask(meta, seed=s, n=3)]
    good = [o for o in outs if re.match(r"INPUT: .+\nOUTPUT: <tool_call>", o, re.S)]
    assert 0.7 < len(good) / len(outs) < 0.9
    for o in good:
        parsed = parse_output(o.split("OUTPUT:", 1)[1])
        assert [c.name for c in parsed.calls] == ["search_flights", "book_flight"]
        args = [json.loads(c.arguments) for c in parsed.calls]
        assert set(args[0]) == set(SEARCH.arguments) and args[0] != SEARCH.arguments
        assert all(stated(v, o.split("OUTPUT:")[0], k) for k, v in args[0].items())


def test_invalid_metadata_is_a_clear_error_and_no_metadata_a_generic_reply() -> None:
    with pytest.raises(EndpointError, match="sim actor: invalid metadata: ground_truth"):
        ask({"role": "teacher"})
    with pytest.raises(EndpointError, match="labl: Extra inputs are not permitted"):
        ask({"role": "judge", "labl": []})
    reply = SimBackend(SimConfig(), role="whatever").answer(
        ChatRequest(messages=[{"role": "user", "content": "hello there"}])
    )
    assert "hello there" in reply.choices[0].content
