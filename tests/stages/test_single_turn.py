"""single_turn: each row's first decision as a row of its own, copies per decision class."""

from __future__ import annotations

import pytest
from stagerun import run_outputs as run

from trajsynth.core import Message, Trajectory
from trajsynth.core.errors import ConfigError
from trajsynth.core.schema import ToolCall
from trajsynth.stages import Context, ContextSpec, build_stage


def call(name: str, args: str = "{}", i: int = 0) -> ToolCall:
    return ToolCall(id=f"c{i}", name=name, arguments=args)


def row(rid: str, first: Message | None, rest: int = 2) -> Trajectory:
    msgs = [Message(role="system", content="sys"), Message(role="user", content="please")]
    if first is not None:
        msgs.append(first)
        for k in range(rest):  # a tool result and a later turn: what the view leaves out
            msgs += [
                Message(role="tool", content=f"result {k}", tool_call_id="c0"),
                Message(role="assistant", content=f"done {k}"),
            ]
    return Trajectory(
        id=rid, task_id=f"t-{rid}", messages=msgs, extra={"keep": rid}, step_rewards=[]
    )


ONE = row("one", Message(role="assistant", tool_calls=[call("get_weather", '{"city": "Oslo"}')]))
TWO = row("two", Message(role="assistant", tool_calls=[call("a"), call("b", i=1)]))
NONE = row("none", Message(role="assistant", content="No tool can book a table; sorry."), 0)
EMPTY = row("empty", None)


def views(cfg: dict, rows: list[Trajectory]) -> tuple[list[Trajectory], dict[str, int]]:
    ctx = Context(ContextSpec(stage_id="st"))
    out = run("single_turn", cfg, rows, ctx).get("main", [])
    return out, ctx.metrics.counters


def test_each_row_becomes_its_opening_and_first_assistant_message() -> None:
    out, counters = views({}, [ONE, TWO, NONE, EMPTY])
    assert [len(r.messages) for r in out] == [3, 3, 3]
    assert [r.messages[-1].role for r in out] == ["assistant"] * 3
    assert out[0].messages[-1].tool_calls[0].name == "get_weather"
    assert [r.extra["single_turn"]["class"] for r in out] == ["one", "several", "none"]
    assert [r.parent_ids for r in out] == [["one"], ["two"], ["none"]]
    assert all(r.extra["keep"] == p for r, p in zip(out, ["one", "two", "none"], strict=True))
    assert len({r.id for r in out} | {"one", "two", "none"}) == 6  # new ids
    assert [r.num_turns for r in out] == [1, 1, 1] and out[1].num_tool_calls == 2
    assert counters["rows"] == 4 and counters["views"] == 3 and counters["no_assistant"] == 1
    assert counters["views.one"] == counters["views.several"] == counters["views.none"] == 1


def test_repeat_changes_the_mix_and_ids_stay_deterministic() -> None:
    cfg = {"repeat": {"none": 3, "several": 0}}
    out, counters = views(cfg, [ONE, TWO, NONE])
    assert [r.extra["single_turn"]["class"] for r in out] == ["one", "none", "none", "none"]
    assert len({r.id for r in out}) == 4
    again, _ = views(cfg, [NONE, ONE])
    assert {r.id for r in again} == {r.id for r in out}
    assert counters["views.none"] == 3 and "views.several" not in counters


def test_repeat_as_weight_emits_one_view_weighted_by_the_count() -> None:
    """``repeat_as: weight``: the class's count becomes one view's sample weight (times the
    weight its row had), the same ids as the first copies; a count of 0 still drops."""
    heavy = NONE.derive(extra={"weight": 0.5})
    cfg = {"repeat": {"none": 3, "several": 0}, "repeat_as": "weight"}
    out, counters = views(cfg, [ONE, TWO, heavy])
    assert [r.extra["single_turn"]["class"] for r in out] == ["one", "none"]
    assert "weight" not in out[0].extra and out[1].extra["weight"] == 1.5
    copies, _ = views({"repeat": {"none": 3, "several": 0}}, [ONE, TWO, heavy])
    assert [r.id for r in out] == [copies[0].id, copies[1].id]  # the first copies' ids
    assert counters["views.none"] == 1 and counters["views"] == 2
    alone, _ = views(cfg, [NONE])
    assert alone[0].extra["weight"] == 3
    zero, _ = views(cfg, [NONE.derive(extra={"weight": 0})])
    assert zero[0].extra["weight"] == 0  # a row its trainer would drop stays dropped
    with pytest.raises(ConfigError):
        build_stage("single_turn", {"repeat_as": "tokens"})


def test_keep_rows_passes_the_originals_on() -> None:
    out, _ = views({"keep_rows": True}, [ONE])
    assert [r.id for r in out][1] == "one" and len(out[1].messages) == len(ONE.messages)


def test_an_unknown_class_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown decision class"):
        build_stage("single_turn", {"repeat": {"irrelevant": 2}})


def tool(name: str, description: str) -> dict:
    params = {"type": "object", "properties": {"city": {"type": "string"}}}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": params},
    }


def task_row(rid: str, tools: list[dict], later: list[str] = ()) -> Trajectory:
    """A one-call row whose task calls get_weather first (and ``later`` after it)."""
    from trajsynth.core.task import GoldCall, GoldTurn, GroundTruth

    steps = [[GoldCall(name="get_weather", arguments={"city": "Oslo"})]]
    steps += [[GoldCall(name=n, arguments={})] for n in later]
    base = ONE.derive(id=rid, task_id=f"t-{rid}", tools=tools)
    return base.derive(ground_truth=GroundTruth(turns=[GoldTurn(request="please", steps=steps)]))


WEATHER = tool("get_weather", "Get the current weather for a city.")
FORECAST = tool("get_weather_forecast", "Get the weather forecast for a city.")
FLIGHTS = tool("search_flights", "Search flights between two airports.")
HOTELS = tool("book_hotel", "Book a hotel room in a city.")


def test_withhold_adds_the_request_without_its_function_answered_with_no_call() -> None:
    rows = [task_row(f"r{i}", [WEATHER, FORECAST, FLIGHTS, HOTELS]) for i in range(40)]
    out, counters = views({"withhold": 0.5}, rows)
    withheld = [r for r in out if r.extra["single_turn"].get("withheld")]
    # about half the call views, chosen by the row's id: the same ones on every run
    assert 10 <= counters["views.withheld"] == len(withheld) <= 30
    assert {r.id for r in views({"withhold": 0.5}, rows[::-1])[0]} == {r.id for r in out}
    for r in withheld:
        names = [t["function"]["name"] for t in r.tools]
        # the called function is gone, and so is the one that could do the same
        assert names == ["search_flights", "book_hotel"]
        answer = r.messages[-1]
        assert answer.role == "assistant" and not answer.tool_calls and answer.content
        assert "weather" in answer.content and not any(n in answer.content for n in names)
        assert r.capabilities == ["no_tool_needed"] and r.ground_truth.turns[0].kind == "no_tool"
        assert r.messages[:-1] == ONE.messages[:2] and r.parent_ids == [r.parent_ids[0]]
    assert len({r.messages[-1].content for r in withheld}) > 1  # not one sentence


def test_withhold_keeps_what_the_task_needs_out_and_skips_a_view_left_with_nothing() -> None:
    later = task_row("later", [WEATHER, FLIGHTS, HOTELS], later=["book_hotel"])
    alone = task_row("alone", [WEATHER, FORECAST])
    out, counters = views({"withhold": 1.0}, [later, alone])
    withheld = [r for r in out if r.extra["single_turn"].get("withheld")]
    assert [[t["function"]["name"] for t in r.tools] for r in withheld] == [["search_flights"]]
    assert counters["withhold.nothing_left"] == 1 and counters["views.withheld"] == 1


def test_withhold_puts_a_function_of_another_domain_in_the_called_ones_place() -> None:
    """Without the swap a contrast view offers fewer functions than its view: the one-function
    views were then mostly declines, and a student learned to decline when one is offered."""
    weather = [task_row(f"w{i}", [FLIGHTS, WEATHER, HOTELS]) for i in range(6)]
    alone = task_row("alone", [WEATHER])  # nothing would be left without a swap
    other = [
        task_row(f"m{i}", [WEATHER]).derive(
            domain="math", tools=[WEATHER, tool("add", "Add two numbers."),
                                  tool("get_weather_report", "Weather report for a city.")],
        )
        for i in range(2)
    ]  # fmt: skip
    rows = [*weather, alone, *other]
    out, counters = views({"withhold": 1.0}, rows)
    withheld = {r.parent_ids[0]: r for r in out if r.extra["single_turn"].get("withheld")}
    for rid in [r.id for r in weather]:
        names = [t["function"]["name"] for t in withheld[rid].tools]
        # as many as the view offered, the called one's place taken by math's "add" (never
        # its weather function, alike to the one that went, nor one of its own domain)
        assert names == ["search_flights", "add", "book_hotel"]
        assert "add" not in withheld[rid].messages[-1].content
    assert [t["function"]["name"] for t in withheld["alone"].tools] == ["add"]
    for rid in [r.id for r in other]:  # math's weather function goes as alike: "add" stays
        names = [t["function"]["name"] for t in withheld[rid].tools]
        assert names[1] == "add" and names[0] in {"search_flights", "book_hotel"}
    assert counters["withhold.swapped"] == 9 and "withhold.nothing_left" not in counters
    # swap off: the list shrinks, and a view left with nothing is passed over
    out, counters = views({"withhold": 1.0, "swap": False}, rows)
    shrunk = [r for r in out if r.extra["single_turn"].get("withheld")]
    assert sorted(len(r.tools) for r in shrunk) == [1, 1] + [2] * 6
    assert counters["withhold.nothing_left"] == 1 and "withhold.swapped" not in counters


def test_a_question_where_the_task_wants_a_call_is_dropped_unless_asked_to_keep() -> None:
    asks = task_row("asks", [WEATHER]).derive(
        messages=[*ONE.messages[:2], Message(role="assistant", content="Which city?")]
    )
    out, counters = views({}, [asks, NONE])
    assert [r.parent_ids for r in out] == [["none"]] and counters["needless"] == 1
    kept, _ = views({"drop_needless": False}, [asks])
    assert len(kept) == 1 and kept[0].extra["single_turn"]["class"] == "none"


def test_a_call_where_the_task_wants_none_is_dropped_unless_asked_to_keep() -> None:
    """The teacher called a function where no offered one fits (a declining ``clarify`` turn)
    or where a required value was missing (a ``clarify`` turn with steps): a verify that
    checks the final state passes a read-only call, and BFCL scores that decision wrong."""
    from trajsynth.core.task import GoldCall, GoldTurn, GroundTruth

    declines = GoldTurn(request="please", kind="clarify", answer="No tool can do that.")
    asks = GoldTurn(
        request="please",
        kind="clarify",
        steps=[[GoldCall(name="get_weather", arguments={"city": "Oslo"})]],
        clarification="Oslo.",
    )
    chat = GoldTurn(request="please", kind="no_tool", answer="Hello!")
    rows = [
        ONE.derive(id=f"r{i}", task_id=f"t{i}", ground_truth=GroundTruth(turns=[g]))
        for i, g in enumerate([declines, asks, chat])
    ]
    wanted = task_row("wanted", [WEATHER])
    out, counters = views({}, [*rows, wanted])
    assert [r.parent_ids for r in out] == [["wanted"]] and counters["spurious"] == 3
    assert "needless" not in counters
    kept, _ = views({"drop_needless": False}, rows)
    assert len(kept) == 3


def test_focus_adds_the_view_with_only_the_functions_it_calls() -> None:
    """Magnet's tasks mostly offer distractors, so the one-function views were mostly no-call
    answers; a focused view is the single-function question that benchmarks ask."""
    rows = [task_row(f"r{i}", [FLIGHTS, WEATHER, HOTELS]) for i in range(40)]
    two = TWO.derive(tools=[tool("b", "B things."), FLIGHTS, tool("a", "A things.")])
    alone = task_row("alone", [WEATHER])  # offers nothing else: nothing to focus
    out, counters = views({"focus": 0.5, "repeat": {"several": 2}}, [*rows, two, alone, NONE])
    focused = [r for r in out if r.extra["single_turn"].get("focus")]
    # about half the call views that offer more than they call, drawn by the row's id
    assert 10 <= counters["views.focused"] <= 31
    assert {r.id for r in views({"focus": 0.5}, rows[::-1])[0]} == {
        r.id for r in views({"focus": 0.5}, rows)[0]
    }
    for r in focused:
        names = [t["function"]["name"] for t in r.tools]
        parent = next(p for p in [*rows, two] if p.id == r.parent_ids[0])
        assert names == (["b", "a"] if parent is two else ["get_weather"])  # in their order
        assert r.messages == parent.messages[:3]  # the same request and calls
        assert r.extra["single_turn"]["class"] == ("several" if parent is two else "one")
    assert all(r.parent_ids != ["alone"] and r.parent_ids != ["none"] for r in focused)
    # its own views: new ids, the class's repeat count, and the plain views as without focus
    assert len({r.id for r in out}) == len(out)
    plain = [r for r in out if not r.extra["single_turn"].get("focus")]
    without, _ = views({"repeat": {"several": 2}}, [*rows, two, alone, NONE])
    assert [r.id for r in plain] == [r.id for r in without]
    every, _ = views({"focus": 1.0, "repeat": {"several": 2}}, [two])
    assert [[t["function"]["name"] for t in r.tools] for r in every] == [
        ["b", FLIGHTS["function"]["name"], "a"]
    ] * 2 + [["b", "a"]] * 2
    # with withhold each focused view is drawn on its own: its contrast offers one function
    # of another domain in the called one's place
    other = [task_row(f"m{i}", [tool("add", "Add two numbers.")]).derive(domain="math")
             for i in range(2)]  # fmt: skip
    out, counters = views({"focus": 1.0, "withhold": 1.0}, [*rows[:4], *other])
    contrasts = [r for r in out if r.extra["single_turn"].get("withheld")
                 and r.extra["single_turn"].get("focus")]  # fmt: skip
    assert len(contrasts) == 4 == counters["views.focused"]
    assert all([t["function"]["name"] for t in r.tools] == ["add"] for r in contrasts)


def test_opaque_renames_the_offered_functions_and_their_calls_alike() -> None:
    """A request echoes its function's name words; behind an opaque name ("GetWea") only the
    description says whether the function fits, in call and contrast views alike."""
    from trajsynth.stages.quality.single_turn import opaque_name

    assert opaque_name("change_food", set()) == "ChaFoo"
    assert opaque_name("getCurrentWeather", set()) == "GetCurWea"
    assert opaque_name("cmd_controller.execute", set()) == "CmdConExe"
    assert opaque_name("get_weather", {"GetWea"}) == "GetWea2"
    rows = [task_row(f"r{i}", [WEATHER, FORECAST, FLIGHTS]) for i in range(60)]
    other = [task_row(f"m{i}", [tool("add", "Add two numbers.")]).derive(domain="math")
             for i in range(2)]  # fmt: skip
    out, counters = views({"opaque": 0.3, "withhold": 0.5}, [*rows, *other])
    opaque = [r for r in out if r.tools[0]["function"]["name"][0].isupper()]
    assert len(opaque) == counters["views.opaque"] and 0.15 < len(opaque) / len(out) < 0.45
    for r in opaque:
        names = [t["function"]["name"] for t in r.tools]
        assert len(set(names)) == len(names) and all(n[0].isupper() for n in names)
        descriptions = [t["function"]["description"] for t in r.tools]
        assert any("weather" in d or "Add" in d or "flights" in d for d in descriptions)
        calls = r.messages[-1].tool_calls or []
        assert all(c.name in names for c in calls)  # every call names an offered function
        if calls:
            assert calls[0].name == "GetWea" and calls[0].arguments == '{"city": "Oslo"}'
            assert r.ground_truth.turns[0].steps[0][0].name == "GetWea"
            assert r.tools[names.index("GetWea")] == {
                **WEATHER, "function": {**WEATHER["function"], "name": "GetWea"}
            }  # fmt: skip
    assert any(not r.messages[-1].tool_calls for r in opaque)  # contrast views too
    # drawn per view id: the same views on every run, none without the option
    again, _ = views({"opaque": 0.3, "withhold": 0.5}, [*rows, *other])
    assert [r.tools for r in again] == [r.tools for r in out]
    plain, counters = views({"withhold": 0.5}, [*rows, *other])
    assert "views.opaque" not in counters and [r.id for r in plain] == [r.id for r in out]
