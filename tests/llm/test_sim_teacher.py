"""The simulated teacher: per-capability error rates measured over 2,000 synthesized tasks
match its skill profile; multi-turn, clarify, no-tool turns; continuation from a prefix;
determinism; hints; logprobs.

The tasks are synthesized here (the built-in domains are another module's business): each has
1–3 turns (tool, no-tool, clarify), 1–4 steps per tool turn, sometimes two parallel calls,
unique argument values per call (so every emitted call can be aligned with the gold call it
attempts) and distractor tools. Errors are measured from the emitted calls alone, the way a
verifier sees them, not read back from the simulator.

Run: PYTHONPATH=. python -m pytest tests/llm/test_sim_teacher.py -q
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from typing import Any

import pytest

from trajsynth.core.task import GoldCall, GoldTurn, GroundTruth
from trajsynth.llm.base import ChatRequest
from trajsynth.llm.client import to_openai_messages
from trajsynth.llm.parsing import parse_output
from trajsynth.llm.sim import SimBackend, SimConfig, SkillProfile

N_TASKS = 2000
TYPES = ["string", "integer", "number", "boolean"]


def _tool(i: int, rnd: random.Random) -> dict[str, Any]:
    n_req, n_opt = rnd.randint(1, 3), rnd.randint(0, 2)
    props = {f"p{i}_{k}": {"type": rnd.choice(TYPES)} for k in range(n_req + n_opt)}
    return {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": f"Operation number {i} on a record.",
            "parameters": {
                "type": "object",
                "properties": props,
                "required": list(props)[:n_req],
            },
        },
    }


TOOL_POOL = [_tool(i, random.Random(i)) for i in range(40)]


def _value(kind: str, uid: int) -> Any:
    return {"string": f"val{uid}", "integer": 1000 * uid, "number": 1000.5 * uid}.get(
        kind, uid % 2 == 0
    )


def make_task(seed: int) -> tuple[GroundTruth, list[dict[str, Any]]]:
    """A random multi-turn task with unique tools and argument values per call."""
    rnd = random.Random(seed)
    pool = rnd.sample(range(len(TOOL_POOL)), len(TOOL_POOL))
    uid = 1
    turns = []
    used: list[int] = []
    for _ in range(rnd.choice([1, 1, 2, 3])):
        kind = rnd.choices(["tool", "no_tool", "clarify"], weights=[0.7, 0.15, 0.15])[0]
        if kind == "no_tool":
            turns.append(GoldTurn(request="What do you think about that?", kind="no_tool"))
            continue
        steps = []
        for _ in range(rnd.choice([1, 1, 2, 2, 3, 4]) if kind == "tool" else rnd.choice([1, 2])):
            step = []
            for _ in range(2 if rnd.random() < 0.1 else 1):
                t = pool.pop()
                used.append(t)
                fn = TOOL_POOL[t]["function"]
                props, req = fn["parameters"]["properties"], fn["parameters"]["required"]
                args = {}
                for k, spec in props.items():
                    if k in req or rnd.random() < 0.7:
                        # booleans cannot be unique; pair them with a unique string elsewhere
                        args[k] = _value(spec["type"], uid)
                        uid += 1
                step.append(GoldCall(name=fn["name"], arguments=args, output={"ok": uid}))
            steps.append(step)
        first = steps[0][0]
        clar = None
        if kind == "clarify":
            key = next(iter(first.arguments))
            clar = f"Use {first.arguments[key]} for that."
        turns.append(GoldTurn(request="Please do it.", kind=kind, steps=steps, clarification=clar))
    offered = [TOOL_POOL[t] for t in used] + [TOOL_POOL[t] for t in pool[:3]]
    return GroundTruth(turns=turns), offered


def rollout(backend: SimBackend, gt: GroundTruth, tools: list, seed: int) -> list[dict]:
    """Play the task: the teacher acts, a scripted user and environment answer."""
    gold = {c.name: c for t in gt.turns for s in t.steps for c in s}
    msgs: list[dict] = [{"role": "user", "content": gt.turns[0].request}]
    turn, asked_in_turn = 0, False
    meta = {"role": "teacher", "ground_truth": gt.model_dump(mode="json")}
    for _ in range(40):
        req = ChatRequest(messages=msgs, tools=tools, seed=seed, metadata=meta)
        raw = backend.answer(req).choices[0]
        msg = {
            "role": "assistant",
            "content": raw.content,
            "tool_calls": [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in raw.tool_calls
            ],
        }
        msgs.append(msg)
        if raw.tool_calls:
            for c in raw.tool_calls:
                g = gold.get(c["name"])
                ok = g is not None and _args(c["arguments"]) == g.arguments
                out = g.output if ok else {"error": "bad call"}
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": json.dumps(out)})
            continue
        text = (raw.content or "").strip()
        if text.endswith("?"):
            g = gt.turns[turn]
            answer = g.clarification if g.kind == "clarify" and not asked_in_turn else "Go ahead."
            asked_in_turn = True
            msgs.append({"role": "user", "content": answer})
            continue
        turn += 1
        asked_in_turn = False
        if turn >= len(gt.turns):
            break
        msgs.append({"role": "user", "content": gt.turns[turn].request})
    return msgs


def _args(text: str) -> dict | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _turn_slices(msgs: list[dict], gt: GroundTruth) -> list[list[dict]]:
    """Assistant messages of each gold turn (follow-up answers stay in their turn)."""
    slices: list[list[dict]] = []
    prev_question = False
    for m in msgs:
        if m["role"] == "user":
            if not prev_question:
                slices.append([])
            prev_question = False
        elif m["role"] == "assistant":
            slices[-1].append(m)
            prev_question = not m["tool_calls"] and (m["content"] or "").strip().endswith("?")
    return slices


def measure(backend: SimBackend, n_tasks: int) -> tuple[Counter, Counter, float]:
    """(errors, opportunities, task success rate) measured from the rollouts' outputs."""
    err, opp = Counter(), Counter()
    successes = 0
    for i in range(n_tasks):
        gt, tools = make_task(i)
        offered = {t["function"]["name"] for t in tools}
        msgs = rollout(backend, gt, tools, seed=i)
        ok_task = True
        for g, assistant in zip(gt.turns, _turn_slices(msgs, gt), strict=False):
            first = assistant[0] if assistant else None
            if g.kind == "no_tool":
                opp["spurious_call"] += 1
                bad = bool(first and first["tool_calls"])
                err["spurious_call"] += bad
                ok_task &= not bad
                continue
            acting = [m for m in assistant if m["tool_calls"]]
            if g.kind == "clarify":
                opp["skip_clarification"] += 1
                skipped = bool(first and first["tool_calls"])
                err["skip_clarification"] += skipped
                ok_task &= not skipped
                if skipped:
                    continue  # a guessed value, not a per-call error: not counted below
            else:
                opp["needless_clarification"] += 1
                asked = bool(first and not first["tool_calls"] and first["content"].endswith("?"))
                err["needless_clarification"] += asked
                ok_task &= not asked
            # per call: align each emitted call with the gold call it attempts
            by_name = {c.name: (s, c) for s, step in enumerate(g.steps) for c in step}
            by_args = {
                json.dumps(c.arguments, sort_keys=True): (s, c) for _, (s, c) in by_name.items()
            }
            emitted_steps = []
            for m in acting:
                step_ids = []
                for tc in m["tool_calls"]:
                    name, text = tc["function"]["name"], tc["function"]["arguments"]
                    args = _args(text)
                    # exact arguments identify the call even under a wrong or made-up name;
                    # otherwise (malformed, dropped or wrong argument) the name does
                    hit = (
                        by_args.get(json.dumps(args, sort_keys=True)) if args is not None else None
                    ) or by_name.get(name)
                    assert hit is not None, (name, text, g)
                    s, gold = hit
                    step_ids.append(s)
                    kind = _classify(name, args, gold, offered, tools)
                    for k in (
                        "malformed_json",
                        "hallucinated_tool",
                        "wrong_tool",
                        "wrong_argument_value",
                    ):
                        opp[k] += 1
                    if _optional(gold, tools):
                        opp["drop_optional_param"] += 1
                    if kind:
                        err[kind] += 1
                        ok_task = False
                emitted_steps.append(step_ids[0])
            n = len(g.steps)
            structure = _structure(emitted_steps, n)
            if n >= 2:
                for k in ("stop_early", "missing_dependent_call", "wrong_call_order"):
                    opp[k] += 1
                if structure:
                    err[structure] += 1
            ok_task &= structure is None
        successes += ok_task
    return err, opp, successes / n_tasks


def _optional(gold: GoldCall, tools: list) -> bool:
    fn = next(t["function"] for t in tools if t["function"]["name"] == gold.name)
    return any(k not in fn["parameters"]["required"] for k in gold.arguments)


def _classify(
    name: str, args: dict | None, gold: GoldCall, offered: set, tools: list
) -> str | None:
    if args is None:
        return "malformed_json"
    if name not in offered:
        return "hallucinated_tool"
    if name != gold.name:
        return "wrong_tool"
    missing = [k for k in gold.arguments if k not in args]
    if len(missing) == 1 and set(args) == set(gold.arguments) - set(missing):
        return "drop_optional_param"
    wrong = [k for k in gold.arguments if args.get(k) != gold.arguments[k]]
    if len(wrong) == 1 and set(args) == set(gold.arguments):
        return "wrong_argument_value"
    assert args == gold.arguments, (args, gold.arguments)
    return None


def _structure(emitted: list[int], n: int) -> str | None:
    full = list(range(n))
    if emitted == full:
        return None
    if emitted == full[: len(emitted)] and 0 < len(emitted) < n:
        return "stop_early"
    if len(emitted) == n - 1 and any(emitted == full[:i] + full[i + 1 :] for i in range(n - 1)):
        return "missing_dependent_call"
    if any(emitted == [*full[:i], i + 1, i, *full[i + 2 :]] for i in range(n - 1)):
        return "wrong_call_order"
    raise AssertionError(f"unexplained step sequence {emitted} for {n} steps")


@pytest.fixture(scope="module")
def measured() -> tuple[Counter, Counter, float]:
    return measure(SimBackend(SimConfig(seed=7), role="teacher"), N_TASKS)


def test_measured_error_rates_match_the_profile(measured: tuple[Counter, Counter, float]) -> None:
    err, opp, _ = measured
    profile = SkillProfile()
    report = []
    for kind, n in sorted(opp.items()):
        p = getattr(profile, kind)
        rate = err[kind] / n
        sigma = math.sqrt(p * (1 - p) / n)
        report.append((kind, n, round(rate, 4), p))
        assert abs(rate - p) <= 4 * sigma + 1e-9, (kind, n, rate, p, sigma)
    # every capability was exercised enough to be measured
    assert min(opp.values()) >= 300, report
    assert set(opp) == set(SkillProfile.model_fields) - {"hint_error_scale"}


def test_default_profile_succeeds_on_30_to_60_percent(
    measured: tuple[Counter, Counter, float],
) -> None:
    _, _, success = measured
    assert 0.30 <= success <= 0.60, success


def test_weak_capabilities_are_clearly_weaker() -> None:
    p = SkillProfile()
    weak = [p.missing_dependent_call, p.skip_clarification, p.spurious_call, p.drop_optional_param]
    strong = [p.wrong_tool, p.malformed_json, p.hallucinated_tool, p.wrong_argument_value]
    assert min(weak) >= 4 * max(strong)


def test_perfect_profile_solves_everything_and_hints_help() -> None:
    perfect = SimBackend(SimConfig(profile=SkillProfile.perfect()), role="teacher")
    err, _, success = measure(perfect, 150)
    assert success == 1.0 and sum(err.values()) == 0
    # a hint scales every rate by hint_error_scale: fewer errors on the same tasks
    base = SimBackend(SimConfig(seed=1), role="teacher")
    _, _, plain = measure(base, 300)
    hinted = _HintedBackend(SimConfig(seed=1), role="teacher")
    _, _, with_hint = measure(hinted, 300)
    assert with_hint > plain + 0.15


class _HintedBackend(SimBackend):
    def answer(self, request: ChatRequest):  # type: ignore[override]
        meta = dict(request.metadata or {}, hint=True)
        return super().answer(request.model_copy(update={"metadata": meta}))


# -- behaviour ------------------------------------------------------------------------------

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
                    "max_price": {"type": "integer"},
                },
                "required": ["origin", "destination"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "book_flight",
            "description": "Book a flight by its id.",
            "parameters": {
                "type": "object",
                "properties": {"flight_id": {"type": "string"}},
                "required": ["flight_id"],
            },
        },
    },
]
GT = GroundTruth(
    turns=[
        GoldTurn(
            request="Find flights from Paris to Rome under 300 and book the first.",
            steps=[
                [
                    GoldCall(
                        name="search_flights",
                        arguments={"origin": "Paris", "destination": "Rome", "max_price": 300},
                        output={"flights": ["FL12"]},
                    )
                ],
                [
                    GoldCall(
                        name="book_flight",
                        arguments={"flight_id": "FL12"},
                        output={"booking": "BK9"},
                    )
                ],
            ],
        ),
        GoldTurn(
            request="Book the same again for my friend.",
            kind="clarify",
            steps=[[GoldCall(name="book_flight", arguments={"flight_id": "FL12"})]],
            clarification="Yes, flight FL12.",
        ),
        GoldTurn(
            request="Thanks! How long is the flight?", kind="no_tool", answer="About two hours."
        ),
    ],
    required_outputs=["BK9"],
)
PERFECT = SimBackend(SimConfig(profile=SkillProfile.perfect()), role="teacher")


def _step(backend: SimBackend, msgs: list, seed: int = 0, **meta: Any):
    req = ChatRequest(
        messages=to_openai_messages(msgs),
        tools=TOOLS,
        seed=seed,
        metadata={"role": "teacher", "ground_truth": GT.model_dump(mode="json"), **meta},
    )
    return backend.answer(req).choices[0]


def test_perfect_actor_plays_a_multi_turn_task_with_clarify_and_no_tool_turns() -> None:
    msgs: list[dict] = [{"role": "user", "content": GT.turns[0].request}]
    first = _step(PERFECT, msgs)
    assert [c["name"] for c in first.tool_calls] == ["search_flights"]
    msgs += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "name": "search_flights", "arguments": first.tool_calls[0]["arguments"]}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": '{"flights": ["FL12"]}'},
    ]
    second = _step(PERFECT, msgs)
    assert [(c["name"], json.loads(c["arguments"])) for c in second.tool_calls] == [
        ("book_flight", {"flight_id": "FL12"})
    ]
    msgs += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "b", "name": "book_flight", "arguments": '{"flight_id": "FL12"}'}
            ],
        },
        {"role": "tool", "tool_call_id": "b", "content": '{"booking": "BK9"}'},
    ]
    final = _step(PERFECT, msgs)
    assert final.tool_calls == [] and not final.content.endswith("?")
    # clarify turn: asks first, acts after the clarification
    msgs += [
        {"role": "assistant", "content": final.content},
        {"role": "user", "content": GT.turns[1].request},
    ]
    ask = _step(PERFECT, msgs)
    assert ask.tool_calls == [] and ask.content.endswith("?")
    msgs += [
        {"role": "assistant", "content": ask.content},
        {"role": "user", "content": GT.turns[1].clarification},
    ]
    act = _step(PERFECT, msgs)
    assert [c["name"] for c in act.tool_calls] == ["book_flight"]
    msgs += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "name": "book_flight", "arguments": act.tool_calls[0]["arguments"]}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": '{"booking": "BK9"}'},
    ]
    done = _step(PERFECT, msgs)
    assert done.tool_calls == [] and "BK9" in done.content  # required output, as observed
    # no-tool turn: answers in text with the gold answer
    msgs += [
        {"role": "assistant", "content": done.content},
        {"role": "user", "content": GT.turns[2].request},
    ]
    chat = _step(PERFECT, msgs)
    assert chat.tool_calls == [] and chat.content == "About two hours."


def test_continues_from_a_prefix_written_by_someone_else() -> None:
    # STeCa/TSR: an expert prefix with step 1 done; the actor plays step 2
    msgs = [
        {"role": "system", "content": "You are a travel agent."},
        {"role": "user", "content": GT.turns[0].request},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "x",
                    "name": "search_flights",
                    "arguments": '{"origin": "Paris", "destination": "Rome", "max_price": 300}',
                }
            ],
        },
        {"role": "tool", "tool_call_id": "x", "content": '{"flights": ["FL12"]}'},
    ]
    nxt = _step(PERFECT, msgs)
    assert [c["name"] for c in nxt.tool_calls] == ["book_flight"]


def test_same_seed_same_answer_different_seeds_differ() -> None:
    noisy = SimBackend(
        SimConfig(
            profile=SkillProfile(
                missing_dependent_call=0.5, stop_early=0.3, wrong_argument_value=0.3
            )
        ),
        role="teacher",
    )
    msgs = [{"role": "user", "content": GT.turns[0].request}]
    runs = {seed: _step(noisy, msgs, seed=seed).model_dump_json() for seed in range(30)}
    assert runs[3] == _step(noisy, msgs, seed=3).model_dump_json()
    assert len(set(runs.values())) > 2


def test_n_choices_differ_unless_greedy_and_logprobs_mark_errors() -> None:
    profile = SkillProfile.perfect().model_copy(update={"wrong_argument_value": 0.5})
    noisy = SimBackend(SimConfig(profile=profile), role="teacher")
    meta = {"role": "teacher", "ground_truth": GT.model_dump(mode="json")}
    msgs = [{"role": "user", "content": GT.turns[0].request}]
    sampled = noisy.answer(
        ChatRequest(
            messages=msgs, tools=TOOLS, n=16, seed=1, metadata=meta, logprobs=True, top_logprobs=2
        )
    )
    assert len({json.dumps(c.tool_calls, sort_keys=True) for c in sampled.choices}) > 1
    greedy = noisy.answer(
        ChatRequest(messages=msgs, tools=TOOLS, n=4, seed=1, metadata=meta, temperature=0)
    )
    assert len({c.model_dump_json() for c in greedy.choices}) == 1
    right, wrong = [], []
    for c in sampled.choices:
        mean = sum(t.logprob for t in c.logprobs) / len(c.logprobs)
        assert len(c.logprobs[0].top) == 2
        args = json.loads(c.tool_calls[0]["arguments"])
        (right if args == GT.turns[0].steps[0][0].arguments else wrong).append(mean)
    assert right and wrong
    assert sum(right) / len(right) > sum(wrong) / len(wrong)  # errors are less confident


@pytest.mark.parametrize("fmt", ["hermes", "pythonic", "json"])
def test_text_call_formats_parse_back_to_the_same_calls(fmt: str) -> None:
    backend = SimBackend(SimConfig(profile=SkillProfile.perfect(), call_format=fmt), role="teacher")
    choice = _step(backend, [{"role": "user", "content": GT.turns[0].request}])
    assert choice.tool_calls == []
    parsed = parse_output(choice.content, reasoning=choice.reasoning)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == [
        ("search_flights", {"origin": "Paris", "destination": "Rome", "max_price": 300})
    ]
    assert parsed.errors == [] and parsed.reasoning


def test_misleading_hint_steps_are_followed() -> None:
    wrong = [[{"name": "book_flight", "arguments": {"flight_id": "FL99"}}]]
    choice = _step(PERFECT, [{"role": "user", "content": GT.turns[0].request}], hint_steps=wrong)
    assert [(c["name"], json.loads(c["arguments"])) for c in choice.tool_calls] == [
        ("book_flight", {"flight_id": "FL99"})
    ]


def test_spurious_arguments_for_a_parameter_typed_by_a_list_of_json_types() -> None:
    """``"type": ["integer", "null"]`` is valid JSON Schema; the spurious call's arguments
    looked that list up in a dict (TypeError: unhashable) and failed the whole turn."""
    from trajsynth.llm.sim.text import ToolInfo, default_args

    info = ToolInfo(name="f", properties={"n": {"type": ["integer", "null"]}}, required=["n"])
    args = default_args(info, random.Random(0))
    assert list(args) == ["n"] and isinstance(args["n"], str)
    typed = ToolInfo(name="g", properties={"n": {"type": "integer"}}, required=["n"])
    assert default_args(typed, random.Random(0)) == {"n": 7}


def _opening(gt: GroundTruth, seed: int) -> ChatRequest:
    """The teacher's request for the first turn of ``gt``: the user's opening, TOOLS."""
    return ChatRequest(
        messages=to_openai_messages([{"role": "user", "content": gt.turns[0].request}]),
        tools=TOOLS,
        seed=seed,
        metadata={"role": "teacher", "ground_truth": gt.model_dump(mode="json")},
    )


def test_a_request_no_function_fits_is_declined_not_questioned() -> None:
    """A Magnet irrelevance turn (``clarify`` with no steps, a declining gold answer): the
    teacher declines as the answer does. It used to ask "Could you give me the missing detail
    I need for this?", and a student trained on those rows asked that of answerable requests."""
    decline = "None of the functions I have can locate airports, so I can't do that here."
    gt = GroundTruth(
        turns=[
            GoldTurn(
                request="I'm trying to find the airports for Boston.",
                kind="clarify",
                steps=[],
                answer=decline,
                clarification="Never mind, let's skip that.",
            )
        ]
    )
    for seed in range(5):
        req = _opening(gt, seed)
        out = PERFECT.answer(req).choices[0]
        assert out.tool_calls == [] and out.content == decline


def test_skipping_a_decline_calls_an_offered_function_never_claims_the_task_done() -> None:
    """A teacher that misses that no function fits (``skip_clarification``) calls one of the
    offered functions — a decision single_turn and the verifiers can see is wrong. It used to
    answer "I have handled your request.", which passed verify (no call, state unchanged), and
    the student answered BFCL questions with it."""
    decline = "None of the functions I have can locate airports, so I can't do that here."
    gt = GroundTruth(
        turns=[GoldTurn(request="Find the airports for Boston.", kind="clarify", answer=decline)]
    )
    profile = SkillProfile.perfect().model_copy(update={"skip_clarification": 1.0})
    skips = SimBackend(SimConfig(profile=profile), role="teacher")
    names = {t["function"]["name"] for t in TOOLS}
    for seed in range(5):
        req = _opening(gt, seed)
        out = skips.answer(req).choices[0]
        assert len(out.tool_calls) == 1 and out.tool_calls[0]["name"] in names
        assert "handled" not in (out.content or "")
